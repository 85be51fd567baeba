"""Buffer layouts, tags and the polling wait shared by every rank.

Every message on the data path is one contiguous float64 numpy buffer sent with the buffer methods (``Isend`` /
``Irecv``), never pickled:

- **plan** (master -> worker ``i``): ``[t, load_i, batch (-1: whole partition), k_parts, n_parts, start wall time,
  parts... (capacity P, padded with -1)]`` followed by the model ``w`` (``d`` values);
- **result** (worker ``i`` -> master): ``[t, i, real compute seconds, emulated seconds, overrun flag, send
  wall time]`` followed by the message (``L`` values; a complex message travels as its float64 view, 2 per entry);
- **control**: ``STOP`` (master -> worker) and ``ACK`` (worker -> master) are one-value buffers on the same
  communicator with the reserved tag :data:`CTRL_TAG`.

**Tags.** MPI only guarantees tags ``0..32767``. Data messages carry ``t mod 32767`` and the header repeats the
full iteration number, so a late message is recognised even after the tag wraps around; ``32767`` is reserved for
control. Control shares the data communicator on purpose: MPI keeps messages from one sender to one receiver on
one communicator in order, so once the master has a worker's ``ACK`` every result that worker sent before it has
been matched (and a pending receive for it can be cancelled safely, see :func:`cancel_receive`).

**Waiting.** A blocking ``Wait``/``Recv`` spins a core; with more ranks than cores the spinning ranks starve the
ones that work (REFERENCES section 6). Every wait here is ``Test`` + a short sleep (:data:`POLL`).
"""

from __future__ import annotations

import ctypes
import math
import sys
import time

import numpy as np
from mpi4py import MPI

POLL = 2e-4             # seconds between two tests of a pending request
CTRL_TAG = 32767        # STOP / ACK
TAG_MOD = 32767         # data tags are t mod TAG_MOD, i.e. 0..32766

PLAN_HEADER = 6         # t, load, batch, k_parts, n_parts, wall time (time.time) when the master started iteration t
RESULT_HEADER = 6       # t, worker, real compute (s), emulated (s), overrun flag, send wall time


class RunFailure(RuntimeError):
    """The run cannot go on (the reason is the message); the job exits non-zero."""


def data_tag(t: int) -> int:
    """The MPI tag of iteration ``t``'s plan and results (the header carries the full ``t``)."""
    return t % TAG_MOD


def plan_size(parts_capacity: int, d: int) -> int:
    return PLAN_HEADER + parts_capacity + d


def pack_plan(buf: np.ndarray, t: int, load: float, batch: int | None, k_parts: int, parts, w: np.ndarray,
              capacity: int, stamp: float) -> None:
    """Write worker ``i``'s plan and the model into ``buf`` (which no pending request may point at)."""
    parts = tuple(parts)
    if len(parts) > capacity:
        raise ValueError(f"plan holds {len(parts)} partitions for one worker, capacity {capacity}")
    buf[:PLAN_HEADER] = (t, load, -1 if batch is None else batch, k_parts, len(parts), stamp)
    buf[PLAN_HEADER:PLAN_HEADER + capacity] = -1
    buf[PLAN_HEADER:PLAN_HEADER + len(parts)] = parts
    buf[PLAN_HEADER + capacity:] = w


def unpack_plan(buf: np.ndarray, capacity: int):
    """``(t, load, batch, k_parts, parts, w, stamp)``; ``w`` is a view into ``buf``."""
    t, load, batch, k_parts, n_parts, stamp = buf[:PLAN_HEADER]
    parts = tuple(int(p) for p in buf[PLAN_HEADER:PLAN_HEADER + int(n_parts)])
    return (int(t), float(load), None if batch < 0 else int(batch), int(k_parts), parts, buf[PLAN_HEADER + capacity:],
            float(stamp))


def message_layout(scheme, d: int) -> tuple[int, bool]:
    """``(float64 values per message, complex?)``: complex codes send real and imaginary parts."""
    length = scheme.message_size(d)   # 2 d for a complex code: real and imaginary parts travel as float64
    return length, length != d


def as_payload(message: np.ndarray, is_complex: bool) -> np.ndarray:
    """The float64 view of a message, as it travels."""
    if is_complex:
        return np.ascontiguousarray(message, dtype=np.complex128).view(np.float64)
    return np.ascontiguousarray(message, dtype=np.float64)


def from_payload(payload: np.ndarray, is_complex: bool) -> np.ndarray:
    return payload.view(np.complex128) if is_complex else payload


def precise_sleep() -> None:
    """Ask Linux for a 1 ns timer slack on this process: a ``time.sleep`` then overshoots by ~25 us instead of the
    default ~75 us, which makes the emulated response times and the polling tighter. No-op elsewhere."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)   # PR_SET_TIMERSLACK = 29
        except (OSError, AttributeError):
            pass


def sleep_until(deadline: float, interrupted=None, check_every: float = 0.005) -> bool:
    """Sleep until the wall time ``deadline`` (``time.time``, common to the ranks of one host) in steps of at most
    1 ms. If given, ``interrupted()`` is asked every ``check_every`` seconds; returns False as soon as it says
    True, else True at the deadline."""
    last_check = -math.inf
    while True:
        now = time.time()
        if now >= deadline:
            return True
        if interrupted is not None and now - last_check >= check_every:
            last_check = now
            if interrupted():
                return False
        time.sleep(min(deadline - now, 1e-3))


def wait(request: MPI.Request, poll: float = POLL, timeout: float | None = None) -> MPI.Status:
    """Complete ``request`` by polling (Test + sleep): never spins a core. Raises :class:`TimeoutError` after
    ``timeout`` seconds (None: wait for ever)."""
    status = MPI.Status()
    limit = None if timeout is None else time.perf_counter() + timeout
    while not request.Test(status):
        if limit is not None and time.perf_counter() > limit:
            raise TimeoutError(f"no completion within {timeout:g} s")
        time.sleep(poll)
    return status


def cancel_receive(request: MPI.Request) -> bool:
    """Cancel a pending *receive* (sends are never cancelled). Returns True if it was cancelled, False if a
    message won the race and was received into the buffer (the caller discards it)."""
    if request == MPI.REQUEST_NULL:
        return True
    request.Cancel()
    status = wait(request)
    return bool(status.Is_cancelled())


def warm_up(comm: MPI.Comm, sends: list[tuple[np.ndarray, int]], recvs: list[tuple[np.ndarray, int]]) -> None:
    """One exchange of the data-path buffers with each peer before the clock starts (collective over ``comm``):
    connections, memory registration and first-touch page faults are paid here instead of in iteration 0. On a
    duplicate of ``comm``, so that nothing here can match a data tag."""
    warm = comm.Dup()
    requests = [warm.Irecv(buf, source=peer, tag=0) for buf, peer in recvs]
    requests += [warm.Isend(buf, dest=peer, tag=0) for buf, peer in sends]
    for request in requests:
        wait(request)
    warm.Free()
