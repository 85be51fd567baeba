"""Buffer layouts, tags and the polling wait shared by every rank.

Every message on the data path is one contiguous float64 numpy buffer sent with the buffer methods (``Isend`` /
``Irecv``), never pickled:

- **plan** (master -> worker ``i``): the header :data:`PLAN_HEADER` (:class:`WorkerPlan`'s fields: iteration,
  load, batch, partitions, how many worker ``i`` holds, issue time, model slot, chunked?, local deadline), the
  partitions (capacity ``P``, padded with -1), then the model ``w`` (``d`` values) unless it is in a shared slot;
- **result** (worker ``i`` -> master): the header :data:`RESULT_HEADER` (:class:`Result`'s fields), then the
  message (``L`` values; a complex message travels as its float64 view, 2 per entry) unless it is in shared
  memory or there is none (a marker);
- **control**: ``STOP`` (master -> worker) and ``ACK`` (worker -> master) are one-value buffers on the same
  communicator with the reserved tag :data:`CTRL_TAG`.

**Tags.** MPI only guarantees tags ``0..32767``. Plans carry ``t mod 32766`` and the header repeats the full
iteration number, so a late message is recognised even after the tag wraps around; ``32767`` is reserved for
control, ``32766`` for every result (a plan may have several, and late ones come after the iteration: the master
keeps one receive posted per worker on that tag, reposted after each arrival, and tells them apart by header).
Control shares the data communicator on purpose: MPI keeps messages from one sender to one receiver on one
communicator in order, so once the master has a worker's ``ACK`` every result that worker sent before it has
been matched (and a pending receive for it can be cancelled safely, see :func:`cancel_receive`).

**Shared memory.** When every rank runs on one node, the 800 kB-scale payloads do not travel at all: the master
writes each model version once into a slot of a node-local shared window (``MPI.Win.Allocate_shared``) and the
plan names the slot; each worker writes its messages into a ring of segments of its own before it waits out their
emulated time, and the result on the wire is the header alone. Plans and results are then a few dozen bytes (MPI's
eager protocol: no rendezvous, no copy through the master's progress engine on the critical path). Safety rests
on the plan/answer discipline, not on timing: the master never rewrites a slot that a worker may still read, and
a worker never rewrites a segment the master has not read (``streaming.py``). ``Win.Sync`` orders the writes
before the message that announces them (the MPI-3 unified memory model). On several nodes, or with
``GRADCODE_MPI_SHARED=0`` in the environment, everything travels in the messages, as laid out above.

**Waiting.** A blocking ``Wait``/``Recv`` spins a core; with more ranks than cores the spinning ranks starve the
ones that work (see ``docs/references.md#mpi``). Every wait here is ``Test`` + a short sleep (:data:`POLL`), or on
one node a block on the rank's doorbell, rung by whoever ends the wait (``doorbell.py``: idle workers, the master
waiting for results, the All-Reduce path's exchange), and the runtime bounds each one (a timeout, and a ``watch``
that notices a dead or failed peer: ``peers.py``).
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

POLL = 2e-4             # seconds between two tests of a pending request
IDLE_POLL = 1e-3        # seconds between two looks for a plan by an idle worker with no doorbell (several hosts, or
#                         GRADCODE_MPI_SHARED=0): the plan's pickup counts toward the worker's emulated time (which
#                         runs from the master's stamp), and eight idle ranks polling every POLL would take most of a
#                         core of a 2-core host from the ranks that compute; also the master's longest doorbell wait
RECHECK = 5e-3         # seconds: the longest a rank blocks on its doorbell (doorbell.py) before it looks again for
#                         what it waits for, and at its peers (a ring that was lost costs at most this)
RESOLUTION = 1e-3       # seconds: the runtime's own cost per iteration is of this order (polls, sends, sleeps'
#                         overshoot); an ideal iteration time below it has no meaningful overhead ratio
CTRL_TAG = 32767        # STOP / ACK
RESULT_TAG = 32766      # every result (the header says which iteration)
TAG_MOD = 32766         # data tags are t mod TAG_MOD, i.e. 0..32765

PLAN_HEADER = 9         # values before a plan's partitions: the fields of WorkerPlan.header (pack_plan)
RESULT_HEADER = 10      # values before a result's message: the fields of Result, in order
MESSAGE, LAST, MARKER = 0, 1, 2
STREAM_RING = 4         # message segments per worker: a plan's messages and one more (partial_coded, s = 2: 3)
SHARED_ENV = "GRADCODE_MPI_SHARED"   # "0": move the payloads in messages even on one node
MODEL_SLOTS = 8         # at most this many model versions in shared memory (n + 1 always suffice, see ModelSlots)


class RunFailure(RuntimeError):
    """The run cannot go on (the reason is the message); the job exits non-zero."""


def data_tag(t: int) -> int:
    """The MPI tag of iteration ``t``'s plan and results (the header carries the full ``t``)."""
    return t % TAG_MOD


def plan_size(parts_capacity: int, d: int) -> int:
    return PLAN_HEADER + parts_capacity + d


@dataclass(frozen=True)
class WorkerPlan:
    """Worker ``i``'s plan as it reads it. ``w`` is a view into the plan buffer or into the shared slot the plan
    names (never a copy; see :func:`check_model`); ``stamp`` is the wall time (``time.time``) at which the master
    issued the plan; ``slot`` is -1 when the model came in the plan."""

    t: int
    load: float
    batch: int | None
    n_parts: int
    parts: tuple[int, ...]
    w: np.ndarray
    stamp: float
    slot: int
    chunked: bool
    tau: float

    @staticmethod
    def iteration(buf: np.ndarray) -> int:
        """The iteration of the plan in ``buf``, without unpacking the rest."""
        return int(buf[_PLAN_T])

    @staticmethod
    def issued(buf: np.ndarray) -> float:
        """The issue time of the plan in ``buf``, without unpacking the rest."""
        return float(buf[_PLAN_STAMP])


_PLAN_T, _PLAN_STAMP = 0, 5      # where the iteration and the issue time lie in a plan (the order of pack_plan)


def pack_plan(buf: np.ndarray, t: int, load: float, batch: int | None, n_parts: int, parts, w: np.ndarray,
              capacity: int, stamp: float, slot: int = -1, chunked: bool = False,
              tau: float = math.inf) -> np.ndarray:
    """Write worker ``i``'s plan into ``buf`` (which no pending request may point at), and the model too unless it
    is in shared-memory slot ``slot``. Returns the part of ``buf`` to send."""
    parts = tuple(parts)
    if len(parts) > capacity:
        raise ValueError(f"plan holds {len(parts)} partitions for one worker, capacity {capacity}")
    buf[:PLAN_HEADER] = (t, load, -1 if batch is None else batch, n_parts, len(parts), stamp, slot, float(chunked),
                         tau)
    buf[PLAN_HEADER:PLAN_HEADER + capacity] = -1
    buf[PLAN_HEADER:PLAN_HEADER + len(parts)] = parts
    if slot >= 0:
        return buf[:PLAN_HEADER + capacity]
    buf[PLAN_HEADER + capacity:] = w
    return buf


def unpack_plan(buf: np.ndarray, capacity: int, shared: SharedMemory | None = None) -> WorkerPlan:
    """The plan in ``buf``, its model where it lies (:class:`WorkerPlan`)."""
    t, load, batch, n_parts, n_held, stamp, slot, chunked, tau = buf[:PLAN_HEADER]
    parts = tuple(int(p) for p in buf[PLAN_HEADER:PLAN_HEADER + int(n_held)])
    if slot >= 0:
        shared.sync()      # the master's write of the slot happened before its send of this plan
        w = shared.models[int(slot)]
    else:
        w = buf[PLAN_HEADER + capacity:]
    return WorkerPlan(int(t), float(load), None if batch < 0 else int(batch), int(n_parts), parts, w, float(stamp),
                      int(slot), bool(chunked), float(tau))


@dataclass
class Result:
    """A result's header (worker -> master), the first :data:`RESULT_HEADER` values of its buffer, in this order.

    The master keeps the worker's durations (``real``, ``sent_at - taken_at``) and not its clock readings: the
    records' per-worker times are on the master's clock (``heard.py``)."""

    t: int               # the iteration of the plan it answers
    worker: int
    real: float          # seconds of real compute on that plan so far
    emulated: float      # seconds of emulated response time (the delay model's draw)
    overrun: bool        # the real compute outlasted the emulated time (:func:`overran`)
    sent_at: float       # wall time of the send (time.time)
    chunks: int          # chunks done (1 for a plan that is not chunked)
    kind: int            # MESSAGE; LAST, a message that ends the worker's plan; MARKER, the plan ended with none
    taken_at: float      # wall time at which the worker took the plan up
    seq: int             # its message's number in the worker's shared ring; -1: it follows the header (or none)

    def pack(self, buf: np.ndarray) -> None:
        buf[:RESULT_HEADER] = (self.t, self.worker, self.real, self.emulated, float(self.overrun), self.sent_at,
                               self.chunks, self.kind, self.taken_at, self.seq)

    @classmethod
    def read(cls, buf: np.ndarray) -> Result:
        t, worker, real, emulated, overrun, sent_at, chunks, kind, taken_at, seq = buf[:RESULT_HEADER].tolist()
        return cls(int(t), int(worker), real, emulated, bool(overrun), sent_at, int(chunks), int(kind), taken_at,
                   int(seq))


def overran(emulated: float, until: float, add: bool) -> bool:
    """Has real work whose emulated time (seconds) ends at the wall time ``until`` outlasted it, now? Work below
    the runtime's resolution (zero or tiny: the overhead ratio leaves it out too) has nothing to overrun, nor has
    a delay added after the real work (``[run] inject = "add"``)."""
    return not add and emulated >= RESOLUTION and time.time() > until


def finite(x: np.ndarray) -> bool:
    """All finite? A sum is finite unless some entry is NaN or infinite (or it overflows: then check properly)."""
    with np.errstate(all="ignore"):
        if math.isfinite(float(np.add.reduce(x))):
            return True
    return bool(np.isfinite(x).all())


def message_layout(scheme, d: int) -> tuple[int, bool]:
    """``(float64 values per message, complex?)``: complex codes send real and imaginary parts."""
    length = scheme.message_size(d)   # 2 d for a complex code: real and imaginary parts travel as float64
    return length, length == 2 * d    # (shorter for partial_coded with l > 1: d / l real numbers)


def as_payload(message: np.ndarray, is_complex: bool) -> np.ndarray:
    """The float64 view of a message, as it travels (a float64 payload of a complex code already is: as received)."""
    if is_complex and np.iscomplexobj(message):
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


def sleep_until(deadline: float, interrupted=None, check_every: float = 0.005, nap=time.sleep) -> bool:
    """Sleep until the wall time ``deadline`` (``time.time``, common to the ranks of one host) in steps of at most
    1 ms. If given, ``interrupted()`` is asked every ``check_every`` seconds; returns False as soon as it says
    True, else True at the deadline. ``nap(seconds)`` sleeps (a doorbell's wait may return early: doorbell.py)."""
    last_check = -math.inf
    while True:
        now = time.time()
        if now >= deadline:
            return True
        if interrupted is None:
            wake = deadline
        else:
            if now - last_check >= check_every:
                last_check = now
                if interrupted():
                    return False
            wake = min(deadline, last_check + max(check_every, 1e-3))
        nap(max(wake - now, 0.0))


def probe(comm: MPI.Comm, source: int, tag: int, status: MPI.Status | None = None) -> bool:
    """``comm.Iprobe``, a second time if the first finds nothing. MPICH's first probe after a while often misses a
    message that is already there (measured: a worker rung for its plan found it on the second probe in 246 of 247
    wakes); with one probe the worker blocked on its doorbell again and took its plan up ~5 ms (``RECHECK``) late."""
    return bool(comm.Iprobe(source=source, tag=tag, status=status)
                or comm.Iprobe(source=source, tag=tag, status=status))


def testsome(requests: list[MPI.Request]) -> list[int] | None:
    """``MPI.Request.Testsome``, a second time if the first completes nothing (as :func:`probe`)."""
    return MPI.Request.Testsome(requests) or MPI.Request.Testsome(requests)


def wait(request: MPI.Request, poll: float = POLL, timeout: float | None = None, watch=None) -> MPI.Status:
    """Complete ``request`` by polling (Test + sleep): never spins a core. Raises :class:`TimeoutError` after
    ``timeout`` seconds (None: wait for ever); ``watch()``, if given, is called between two tests (it raises to
    end the wait: see :meth:`mpi_runtime.peers.Peers.check`)."""
    status = MPI.Status()
    wait_for(lambda: request.Test(status), poll, timeout, watch)
    return status


def wait_for(done, poll: float = POLL, timeout: float | None = None, watch=None, idle=None) -> None:
    """Poll ``done()`` until it is true, as :func:`wait` completes a request (same ``timeout`` and ``watch``).
    Between two tests ``idle()`` if given (e.g. a doorbell's bounded wait: ``doorbell.py``), else a sleep of
    ``poll`` seconds."""
    limit = None if timeout is None else time.perf_counter() + timeout
    while not done():
        if limit is not None and time.perf_counter() > limit:
            raise TimeoutError(f"no completion within {timeout:g} s")
        if watch is not None:
            watch()
        if idle is None:
            time.sleep(poll)
        else:
            idle()


def wait_all(requests: list[MPI.Request], timeout: float, watch=None) -> list[int]:
    """Complete ``requests`` by polling for up to ``timeout`` seconds; the indices of those still pending then
    (empty: all completed). ``watch`` as in :func:`wait`."""
    pending = {i for i, r in enumerate(requests) if r != MPI.REQUEST_NULL}
    limit = time.perf_counter() + timeout
    while pending:
        for i in list(pending):
            if requests[i].Test():
                pending.discard(i)
        if not pending or time.perf_counter() > limit:
            break
        if watch is not None:
            watch()
        time.sleep(POLL)
    return sorted(pending)


def dup(comm: MPI.Comm, timeout: float, watch=None) -> MPI.Comm:
    """``comm.Dup()`` by its non-blocking form, bounded: :class:`RunFailure` after ``timeout`` seconds."""
    new, request = comm.Idup()
    try:
        wait(request, timeout=timeout, watch=watch)
    except TimeoutError:
        raise RunFailure(f"duplicating the communicator did not complete within {timeout:g} s: some rank stopped "
                         "right after the previous checkpoint") from None
    return new


def cancel_receive(request: MPI.Request, timeout: float | None = None) -> bool:
    """Cancel a pending *receive* (sends are never cancelled). Returns True if it was cancelled, False if a
    message won the race and was received into the buffer (the caller discards it). ``timeout`` as in
    :func:`wait`."""
    if request == MPI.REQUEST_NULL:
        return True
    request.Cancel()
    status = wait(request, timeout=timeout)
    return bool(status.Is_cancelled())


def warm_up(comm: MPI.Comm, sends: list[tuple[np.ndarray, int]], recvs: list[tuple[np.ndarray, int]],
            timeout: float | None = None, watch=None) -> None:
    """One exchange of the data-path buffers with each peer before the clock starts (collective over ``comm``):
    connections, memory registration and first-touch page faults are paid here instead of in iteration 0. On a
    duplicate of ``comm``, so that nothing here can match a data tag. Bounded by ``timeout`` seconds (None: for
    ever): :class:`RunFailure` naming the ranks whose exchange did not complete."""
    limit = math.inf if timeout is None else timeout
    warm = dup(comm, limit, watch)
    requests = [warm.Irecv(buf, source=peer, tag=0) for buf, peer in recvs]
    requests += [warm.Isend(buf, dest=peer, tag=0) for buf, peer in sends]
    pending = wait_all(requests, limit, watch)
    if pending:
        peers = sorted({[peer for _, peer in recvs + sends][i] for i in pending})
        raise RunFailure(f"warm-up: no exchange with ranks {peers} within {timeout:g} s")
    warm.Free()


class SharedMemory:
    """The node-local shared window of a run (collective over ``comm``, every rank on one node): rank 0's segment
    holds ``slots`` model versions of ``d`` values, worker rank ``r``'s segment one message of ``length`` values.
    Every rank sees every segment as a numpy array; a passive epoch stays open for the whole run and
    :meth:`sync` (``Win.Sync``, a memory barrier) orders a rank's writes before the message that announces them
    and another rank's reads after it."""

    def __init__(self, comm: MPI.Comm, d: int, length: int, slots: int, barrier=None, ring: int = 1):
        workers = comm.Get_size() - 1
        own = slots * (1 + d) + workers if comm.Get_rank() == 0 else ring * length
        self.win = MPI.Win.Allocate_shared(own * 8, 8, comm=comm)
        master = self._segment(0)
        rows = master[:slots * (1 + d)].reshape(slots, 1 + d)
        # each slot: the iteration whose model it holds (-1 while being written), then the model
        self.versions, self.models = rows[:, 0], rows[:, 1:]
        # streaming: how many ring messages of each worker the master has read (written by the master only)
        self.consumed = master[slots * (1 + d):]
        self.rings = [self._segment(r).reshape(ring, length) for r in range(1, comm.Get_size())]
        self.win.Lock_all(MPI.MODE_NOCHECK)
        # first touch here, not in iteration 0: each rank writes its own segment and maps everyone else's
        if comm.Get_rank() == 0:
            rows[...] = -1.0
            self.consumed[...] = 0.0
        else:
            self.rings[comm.Get_rank() - 1][...] = -1.0
        self.sync()
        if barrier is None:
            wait(comm.Ibarrier())
        else:
            barrier()      # a bounded one that names a missing rank (Peers.checkpoint)
        self.sync()
        for segment in [master, *self.rings]:
            segment.sum()

    def _segment(self, rank: int) -> np.ndarray:
        buf, _ = self.win.Shared_query(rank)
        return np.frombuffer(buf, dtype=np.float64)

    def sync(self) -> None:
        self.win.Sync()

    def close(self) -> None:
        """Collective: only when every rank reaches the end of the run (never before an ``MPI_Abort``)."""
        self.win.Unlock_all()
        self.win.Free()


def open_shared(comm: MPI.Comm, d: int, length: int, barrier=None, ring: int = 1) -> SharedMemory | None:
    """The run's shared window (``min(ranks, MODEL_SLOTS)`` model slots: one more than the workers; ``ring``
    message segments per worker), or None
    (the payloads then travel in the messages) if the ranks span several nodes or ``GRADCODE_MPI_SHARED=0``.
    Collective; every rank comes to the same answer (one node holds all the ranks or none does; the launcher gives
    every rank the same environment). ``Split_type`` and ``Allocate_shared`` have no non-blocking form: call this
    right after a checkpoint; ``barrier`` (default: an unbounded ``Ibarrier``) ends the set-up."""
    if not one_node(comm):
        return None
    return SharedMemory(comm, d, length, min(comm.Get_size(), MODEL_SLOTS), barrier, ring)


def open_payloads(comm: MPI.Comm, cfg, scheme, d: int, peers) -> tuple[int, bool, bool, SharedMemory | None]:
    """What the master and every worker set up alike, collectively (every rank calls this at the same point):
    ``(message length, complex?, streaming?, shared memory or None)``. A run streams (several results per plan) if
    the scheme does or late workers abandon; the payloads go into node-local shared memory if possible
    (:func:`open_shared`; a streaming run gives each worker a ring of segments, ``streaming.py``)."""
    length, is_complex = message_layout(scheme, d)
    streaming = scheme.streams or cfg.options.late_workers == "abandon"
    shared = open_shared(comm, d, length, lambda: peers.checkpoint("shared memory", cfg.options.startup_timeout),
                         ring=STREAM_RING if streaming else 1)
    return length, is_complex, streaming, shared


def one_node(comm: MPI.Comm) -> bool:
    """May the ranks of ``comm`` share memory: all on one node, and ``GRADCODE_MPI_SHARED`` is not ``0``?
    Collective (``Split_type``); every rank comes to the same answer."""
    if os.environ.get(SHARED_ENV, "1") == "0":
        return False
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    same = node.Get_size() == comm.Get_size()
    node.Free()
    return same


class ModelSlots:
    """Which shared slot holds which model version (master side).

    The model of iteration ``t`` goes into a slot that no worker may still read (``streaming.Unread``: a late
    worker computes on the model of the plan it holds, never a newer or older one). Workers that hold one plan each
    name at most ``n`` slots, so ``n + 1`` slots leave one free; with fewer (``MODEL_SLOTS`` caps the memory), or
    when workers hold two plans (``abandon``), the model travels in the plans of an iteration that finds none free."""

    def __init__(self, shared: SharedMemory | None):
        self.shared = shared

    def publish(self, t: int, w: np.ndarray, held) -> int:
        """Write ``w``, the model of iteration ``t``, into a slot not in ``held`` (slots named by busy workers'
        plans); its index, or -1 if none is free (or nothing is shared): then the model goes in the plans."""
        shared = self.shared
        if shared is None:
            return -1
        slot = free_slot(held, len(shared.models))
        if slot >= 0:
            # version -1 while the model is rewritten: a reader that overlapped the write sees a version not its own
            shared.versions[slot] = -1
            shared.sync()
            np.copyto(shared.models[slot], w)
            shared.sync()
            shared.versions[slot] = t
            shared.sync()
        return slot


def check_model(shared: SharedMemory | None, slot: int, t: int) -> None:
    """After a worker has read the model of plan ``t`` from ``slot``: raise :class:`RunFailure` unless the slot
    still holds iteration ``t`` (a seqlock's second read: the master marks a slot -1 before rewriting it, so a
    read that overlapped a rewrite, or came after one, is caught). A guard on :class:`ModelSlots`, never expected
    to fire."""
    if slot < 0:
        return
    shared.sync()
    if shared.versions[slot] != t:
        raise RunFailure(f"model slot {slot} was rewritten (version {shared.versions[slot]:g}) while a worker "
                         f"computed on it for iteration {t}")


def free_slot(held, slots: int) -> int:
    """The lowest slot in ``range(slots)`` not in ``held``; -1 if all are held."""
    taken = set(int(s) for s in held)
    return next((s for s in range(slots) if s not in taken), -1)

