"""Will a run fit in memory? An estimate made before the run, from ``n``, the iterations and what the records hold.

A simulated run holds a few ``n``-long arrays per iteration (draws, arrival times, their order: about 100 bytes a
worker) and turns a record into a JSON line (its ``n``-long lists as Python objects: about 100 more), and it keeps
every record, its per-worker fields as numpy arrays: the responders (8 bytes each), a non-uniform ``load`` (8 bytes
a worker), below ``WORKER_TIMES_MAX_N`` workers the five per-worker times (40 bytes a worker), and in a training run
each worker's ``busy`` span and its work (32 bytes), plus a few copies of the ``n_parts x d`` partial gradients.
The figures below are set a little above what a timing-only run at ``n = 2 * 10^6`` uses (180-230 bytes a worker,
plus 8 per responder and iteration). At ``n = 10^8`` the timing-only run needs about 20 GB before
the first record: :func:`check_memory` refuses it with the figure instead of letting it swap or die in a
``MemoryError``.

An MPI run (:func:`estimate_mpi_bytes`, checked by ``gradcode run`` before it launches) starts ``n + 1`` Python
processes, each with its own interpreter, numpy, scipy and mpi4py (about 40 MB of private memory with MPICH,
plus 7 MB of its shared-memory segments; the libraries' 45 MB of code once), and each builds the whole
workload (its data); the master keeps a plan buffer per worker and the records, every worker two plan buffers and a
message, and the node-local shared window the model slots and one message per worker. With ``--hostfile`` the
ranks are spread over hosts and the check is not made (the estimate is for one host).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..plumbing import memory  # memory.available_bytes() read at call time (a test may set a limit)
from ..plumbing.memory import describe_bytes
from .records import WORKER_TIMES_MAX_N

WORKING_BYTES = 224        # per worker: one iteration's arrays and the JSON line of its record
RESPONDER_BYTES = 8        # per responder and record kept
LOAD_BYTES = 8             # per worker and record, when the load is not the same for every worker
BUSY_BYTES = 32            # per worker and record of a training run: its [begin, arrival] span, work computed and used
TIMES_BYTES = 40           # per worker and record below WORKER_TIMES_MAX_N: the five worker_* times


def estimate_bytes(scheme, iterations: int, workload=None) -> int:
    """Bytes a simulated run of ``scheme`` (bound, reset) needs for ``iterations`` iterations, beyond what is
    already allocated (the workload's data)."""
    n = scheme.n
    m = scheme.stop_count() if not scheme.decentralized else None
    responders = n if m is None else min(n, m)
    per_record = RESPONDER_BYTES * responders
    plan = scheme.plan(0)
    if plan.load.size and (plan.load != plan.load.flat[0]).any() or scheme.decentralized:
        per_record += LOAD_BYTES * n
    total = WORKING_BYTES * n
    if n < WORKER_TIMES_MAX_N:
        per_record += TIMES_BYTES * n
    if workload is not None:
        per_record += BUSY_BYTES * n
        total += 3 * 8 * plan.n_parts * int(workload.dim)   # partial gradients, messages, their combination
        if plan.batch:    # each partition's mini-batch gathered: rows of X and their residuals
            total += batch_bytes(plan.n_parts, plan.batch, workload)
    return int(total + iterations * per_record)


RANK_BYTES = 48_000_000      # per MPI rank: private memory (interpreter, numpy, scipy, mpi4py) and MPICH's segments
LIBRARY_BYTES = 45_000_000   # the libraries' code, mapped once for all ranks
MODEL_SLOTS = 8              # model versions in the shared window (mpi_runtime.protocol.MODEL_SLOTS)
# a process building a workload peaks at this many times the data it keeps (the generator's temporaries), and every
# rank builds at once: measured for least_squares with 32 samples, (peak RSS - the bare interpreter's) / data = 3.73,
# 3.26, 3.11, 3.08, 3.06 at dim = 1e5, 3e5, 1e6, 2e6, 4e6 (docs/benchmarks.md)
BUILD_PEAK = 3.2


def batch_bytes(n_parts: int, batch: int, workload) -> int:
    """Bytes of one gradient evaluation's mini-batches: ``n_parts x batch`` rows of ``X`` (``dim`` numbers at most)
    and their residuals, 8 bytes each (a batch larger than its partition is drawn with replacement, so it may be
    as large as the user asks)."""
    return 8 * int(n_parts) * int(batch) * (int(workload.dim) + 1)


def workload_bytes(workload) -> int:
    """Bytes of the arrays a workload holds (its data: dense or sparse matrices, labels, a held-out set)."""
    total = 0
    for value in vars(workload).values():
        if isinstance(value, np.ndarray):
            total += value.nbytes
        elif hasattr(value, "data") and hasattr(value, "indices") and hasattr(value, "indptr"):   # scipy.sparse
            total += value.data.nbytes + value.indices.nbytes + value.indptr.nbytes
    return total


def estimate_mpi_bytes(scheme, workload, iterations: int) -> int:
    """Bytes an MPI run of ``scheme`` on one host needs at its peak: ``n + 1`` ranks, each :data:`RANK_BYTES` and
    the workload's data as its building peaks (:data:`BUILD_PEAK` times the data kept: every rank builds at once),
    the launcher's own copy, their buffers (plans of ``capacity + d`` values, messages of ``message_size(d)``), the
    master's records and the shared window (``MODEL_SLOTS`` models and ``n`` messages), plus the libraries once.

    >>> from gradcode import make_scheme, make_workload
    >>> w = make_workload("least_squares", n_samples=60, dim=4)
    >>> round(estimate_mpi_bytes(make_scheme("sync", n=3), w, 10) / 1e6)      # four ranks: about 4 x 48 + 45 MB
    237
    """
    n, d = scheme.n, int(workload.dim)
    plan = scheme.plan(0)
    capacity = max((len(p) for p in plan.parts), default=1)
    plan_floats = 16 + capacity + d
    length = scheme.message_size(d)
    data = workload_bytes(workload)
    ranks = (n + 1) * (RANK_BYTES + int(BUILD_PEAK * data)) + data
    buffers = 8 * (n * plan_floats + n * length            # the master: a plan buffer and a message per worker
                   + n * (2 * plan_floats + length))        # each worker: two plan buffers and its message
    shared = 8 * (MODEL_SLOTS * (1 + d) + n * length)
    records = iterations * (RESPONDER_BYTES + LOAD_BYTES + BUSY_BYTES
                            + (TIMES_BYTES if n < WORKER_TIMES_MAX_N else 0)) * n
    return int(LIBRARY_BYTES + ranks + buffers + shared + records)


def check_mpi_memory(scheme, workload, iterations: int, *, available: tuple[int, str] | None = None) -> int:
    """:func:`estimate_mpi_bytes`; a :class:`ConfigError` with the figures if it exceeds what this host has
    available (``available`` overrides :func:`~gradcode.plumbing.memory.available_bytes`), before anything is
    launched."""
    need = estimate_mpi_bytes(scheme, workload, iterations)
    have = memory.available_bytes() if available is None else available
    if have is not None and need > have[0]:
        n, data = scheme.n, workload_bytes(workload)
        raise ConfigError(
            f"this MPI run would need about {describe_bytes(need)} of memory on this host ({n + 1} ranks of "
            f"about {describe_bytes(RANK_BYTES + int(BUILD_PEAK * data))} each at start-up: the interpreter, numpy, "
            f"scipy, mpi4py, and the workload's data of {describe_bytes(data)} as each rank builds it, about "
            f"{BUILD_PEAK:g} times that at the peak), but only "
            f"{describe_bytes(max(have[0], 0))} is available ({have[1]}); use fewer workers or a smaller workload, "
            "or spread the ranks over several hosts (--hostfile)")
    return need


def check_memory(scheme, iterations: int, workload=None, *, available: tuple[int, str] | None = None) -> int:
    """The estimate of :func:`estimate_bytes`; a :class:`ConfigError` with the figures if it exceeds what is
    available (``available`` overrides :func:`~gradcode.plumbing.memory.available_bytes`)."""
    need = estimate_bytes(scheme, iterations, workload)
    have = memory.available_bytes() if available is None else available
    if have is not None and need > have[0]:
        raise ConfigError(
            f"this run would need about {describe_bytes(need)} of memory (n = {scheme.n} workers, {iterations} "
            f"iterations: {describe_bytes(WORKING_BYTES * scheme.n)} of per-iteration arrays, the rest for the "
            f"records kept), but only {describe_bytes(max(have[0], 0))} is available ({have[1]}); use fewer "
            "workers or fewer iterations"
            + (" or a smaller batch" if scheme.plan(0).batch else ""))
    return need
