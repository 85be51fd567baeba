"""Anytime mini-batches (Ferdinand, Al-Lawati, Draper and Nokleby, "Anytime Minibatch", ICLR 2019): every worker
computes for a fixed time ``T``, as many samples as it can, then sends the sum of its per-sample gradients and its
count; the master weights by the counts. The master/worker form of dropping (``docs/references.md#uncoded-schemes``).

With ``b_i`` the samples worker ``i`` finished by ``T`` and ``S_i`` the sum of their gradients, the estimate is::

    g_hat = n_parts * (sum_i S_i) / (sum_i b_i)

the count-weighted average of every computed per-sample gradient, scaled (as every scheme here) to the sum over all
``n_parts`` partitions. No worker is waited for beyond ``T``: a slow worker contributes fewer samples, not a later
message; the mini-batch size varies from step to step.

**How it runs.** Each worker's plan is an ordered list of ``max_samples`` chunks (one data partition each, a sample
or a micro-batch of ``sample_load`` units of the delay model); worker ``i`` keeps every chunk that ends by ``T``,
drops the one in progress at ``T`` (or stops earlier if its list runs out) and its message leaves at once, arriving
``C_i`` later. The master needs every worker's ``(S_i, b_i)``: the iteration lasts ``max_i(stop_i + C_i)``. That
reduction, a sum of ``[S_i, b_i]`` over all workers, is exactly what the clusters' All-Reduce path computes (on MPI
rank 0 takes part with nothing of its own: the master), so this scheme uses the
:class:`~gradcode.schemes._base.DecentralizedScheme` interface: its fixed-time rule is a
:class:`~gradcode.schemes._base.Schedule` and no cluster knows it.

**Equal work.** A unit of load is sync's worker-step; a chunk is ``sample_load = 1/M`` units by default, so ``M``
chunks are sync's work and ``T = "auto"`` is chosen so that a worker computes ``M`` chunks on average.

**T = "auto"**, like DropCompute's ``tau``: after ``warmup`` steps, record the chunk times of ``record_steps`` steps
(every rank sees the same, so every rank chooses the same), then fix ``T`` for the rest of the run; until then every
worker computes the nominal ``M`` chunks (no time limit). ``T`` is the mean, over the recorded steps and workers, of
the time to compute those ``M`` chunks, so that the expected mini-batch is sync's ``n M`` (why not DropCompute's
throughput criterion: ``docs/references.md#uncoded-schemes``).

**Records.** ``counts`` (every worker's samples kept, in worker order), ``T`` (also as ``tau``, the plan's name for
a local limit), ``load`` (the units kept: ``counts x sample_load``). The clusters' ``drop_rate`` is here the share
of the ``max_samples`` list left undone, and the sample in progress at ``T`` is not yet counted as ``wasted``.

**Which samples.** Worker ``i`` holds partitions ``i*max_samples ... (i+1)*max_samples - 1`` and starts step ``t``
at offset ``(t*M) mod max_samples`` in them, so that the samples a worker rarely reaches at the end of its list are
not always the same ones.

Example::

    >>> from gradcode import make_scheme
    >>> s = make_scheme("anytime", n=3, T=2.0, M=2, max_samples=4, sample_load=1.0)
    >>> sched = s.schedule(np.array([[0.5] * 4, [1.0] * 4, [3.0] * 4]), np.zeros(3), s.plan(0).tau)
    >>> sched.kept.tolist(), sched.stop.tolist()     # the fast worker runs out of samples at 2.0 = T
    ([4, 2, 0], [2.0, 2.0, 2.0])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError, check_float, check_int
from ._base import Combined, DecentralizedScheme, Plan, Schedule, check_chunks


class RotatedParts(Sequence):
    """Worker ``i``'s chunks at a step: its ``size`` partitions ``i*size ...`` starting at ``offset``, wrapping
    around (``parts[i][m] = i*size + (offset + m) mod size``), without building ``n*size`` tuples every step."""

    def __init__(self, n: int, size: int, offset: int):
        self.n, self.size, self.offset = n, size, offset

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(self.n)[i])
        i = range(self.n)[i]
        return tuple(i * self.size + (self.offset + m) % self.size for m in range(self.size))

    def __repr__(self) -> str:
        return f"RotatedParts(n={self.n}, size={self.size}, offset={self.offset})"


def fixed_time(micro: np.ndarray, T: float, nominal: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunks kept and compute time of each worker when it computes for ``T`` (``inf``: the first ``nominal``
    chunks, the fixed mini-batch before ``T`` is known). ``micro`` is ``(..., chunks)``; a chunk counts if it ends by
    ``T``; a worker stops at ``T``, or when its chunks run out.

    >>> fixed_time(np.array([[1.0, 1.0, 1.0], [2.5, 1.0, 1.0]]), 2.0, 2)
    (array([2, 0]), array([2., 2.]))
    """
    end = np.cumsum(np.asarray(micro, dtype=float), axis=-1)
    if not math.isfinite(T):
        return np.full(end.shape[:-1], nominal), end[..., nominal - 1]
    return (end <= T).sum(axis=-1), np.minimum(end[..., -1], T)


@dataclass
class AnytimeState:
    T: float
    used: float = float("inf")                     # the limit of the last step (T may be chosen right after it)
    counts: list = field(default_factory=list)     # chunks each worker kept in the last step
    recorded: list = field(default_factory=list)   # nominal compute times (n,) of the recording window


class Anytime(DecentralizedScheme):
    """Anytime mini-batches: every worker computes for ``T`` (a number, or ``"auto"``), then its sum and count go
    to the master, which divides the sum of sums by the sum of counts. ``M`` chunks of ``sample_load`` units (default
    ``1/M``) are sync's work; a worker has ``max_samples`` chunks (default ``3 M``) to compute from. See the module
    docstring for ``T = "auto"`` (``warmup``, ``record_steps``)."""

    name = "anytime"
    description = "every worker computes for a fixed time T, the master weights the sums by the sample counts"
    adapts = ("tau",)
    timeline_rank = 7
    param_hints = {"tau": "anytime's time limit is T", "check": "anytime stops at T exactly (no timer checks)"}

    def __init__(self, n: int, *, T="auto", M: int = 12, max_samples: int | None = None,
                 sample_load: float | None = None, warmup: int = 5, record_steps: int = 10,
                 batch: int | None = None):
        super().__init__(n, batch=batch)
        if T == "auto":
            self.T = T
        elif isinstance(T, str) or T is None:
            raise ConfigError(f"anytime: T must be a number > 0 or 'auto', got {T!r}")
        else:
            self.T = check_float("T", T, low=0.0, low_open=True)
            if not math.isfinite(self.T):
                raise ConfigError(f"anytime: T must be finite (a worker must send at some time), got {T!r}")
        self.M = check_int("M", M, low=1)
        self.max_samples = 3 * self.M if max_samples is None else check_int("max_samples", max_samples, low=1)
        if self.max_samples < self.M:
            raise ConfigError(f"anytime: max_samples = {self.max_samples} must be >= M = {self.M} (a worker must be "
                              "able to compute the nominal mini-batch)")
        check_chunks(self.name, self.n, self.max_samples, "max_samples" if max_samples is not None else "M")
        self.sample_load = 1.0 / self.M if sample_load is None else check_float("sample_load", sample_load, low=0.0,
                                                                                 low_open=True)
        self.warmup = check_int("warmup", warmup, low=0)
        self.record_steps = check_int("record_steps", record_steps, low=1)
        self.reset()

    def _initial_state(self) -> AnytimeState:
        return AnytimeState(T=self.T if isinstance(self.T, float) else float("inf"))

    # --- plan -----------------------------------------------------------------------------------------------
    def plan(self, t: int) -> Plan:
        offset = (t * self.M) % self.max_samples
        return Plan(t=t, parts=RotatedParts(self.n, self.max_samples, offset), n_parts=self.n * self.max_samples,
                    load=np.full(self.n, self.max_samples * self.sample_load), batch=self.batch,
                    micro_batches=self.max_samples, tau=self.state.T)   # inf until T = 'auto' is chosen

    @property
    def samples_per_unit(self) -> float | None:
        return None if self.batch is None else self.batch / self.sample_load

    @property
    def work_note(self) -> str | None:
        if math.isclose(self.M * self.sample_load, 1.0, rel_tol=1e-9):
            return None
        return (f"unequal work: the nominal mini-batch is M x sample_load = {self.M} x {self.sample_load:g} = "
                f"{self.M * self.sample_load:g} units per worker, sync's is 1")

    # --- the fixed-time rule ----------------------------------------------------------------------------------
    def micro_times(self, delay, seed: int, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Step ``t``'s chunk times ``(n, max_samples)`` (each ``sample_load`` units) and communication ``(n,)``."""
        micro, comm_time = delay.sample_micro(seed, t, self.n, self.max_samples)
        return micro[0] * self.sample_load, comm_time[0]

    def schedule(self, micro: np.ndarray, comm_time: np.ndarray, tau: float) -> Schedule:
        """:func:`fixed_time` as a schedule: the chunk in progress at ``T`` was started, its work is dropped."""
        kept, stop = fixed_time(micro, tau, self.M)
        return Schedule.of_stops(micro, kept, stop, comm_time, self.max_samples if math.isfinite(tau) else self.M)

    # --- combine and adapt ------------------------------------------------------------------------------------
    def combine_sum(self, total: np.ndarray, parts: int, plan: Plan) -> Combined:
        """``n_parts * total / parts``: the sum of the workers' sums over the sum of their counts, scaled to the sum
        over all partitions. No sample at all (every worker slower than ``T`` for its first one) is a zero step,
        said by ``method``."""
        if parts == 0:
            return Combined(np.zeros_like(np.asarray(total, dtype=float)), method="no samples")
        return Combined(np.asarray(total) * (plan.n_parts / parts), method="count-weighted")

    def observe(self, t: int, micro: np.ndarray, comm_time: np.ndarray) -> None:
        """Remember each worker's count of step ``t``; with ``T = "auto"``, record the nominal compute times (the
        first ``M`` chunks, which every worker computed: no limit yet) and fix ``T`` after ``record_steps``."""
        self.state.used = self.state.T
        kept, _ = fixed_time(micro, self.state.used, self.M)
        self.state.counts = [int(k) for k in kept]
        if self.T != "auto" or math.isfinite(self.state.T) or t < self.warmup:
            return
        self.state.recorded.append(np.cumsum(micro[..., :self.M], axis=-1)[..., -1])
        if len(self.state.recorded) == self.record_steps:
            self.state.T = float(np.mean(self.state.recorded))
            self.state.recorded = []

    def record(self) -> dict:
        """The step's limit ``T`` (also as ``tau``, the plan's name for it, which ``adaptive.png`` draws), ``M``, and
        every worker's count of samples kept (``counts``, in worker order)."""
        used = self.state.used
        return {"k": self.n, "tau": used, "T": used, "M": self.M, "counts": self.state.counts}
