"""A worker rank of a master/worker scheme: receive a plan, compute, wait out the emulated response time, send.

Worker ``i`` (rank ``i + 1``) loops:

1. **Wait for a plan**: ``Iprobe`` (twice: MPICH's first probe after a wait often misses a plan that is there,
   ``protocol.probe``), then on one node a block on this worker's doorbell, which the master rings after sending
   plans (``doorbell.py``; re-checked every 5 ms), elsewhere a 1 ms sleep. If several plans are queued (it
   was busy), it drains them all and keeps only the newest: old plans are stale. A ``STOP`` ends the loop (it answers
   ``ACK``). The model is read where it arrived, never copied: in the plan buffer, or in the shared-memory slot the
   plan names (``protocol.py``), checked after the compute to still hold the plan's version.
2. **Compute** the real partial gradients of its partitions (``workload.gradients``) and encode them with
   ``scheme.message(i, partials, plan)``. Every rank built the same workload and scheme from the spec.
3. **Emulate the response time** that the delay model assigns it, ``(P_i(load_i) + C_i) * time_scale`` seconds
   from ``begin = max(start of the iteration at the master, when this worker became free)``, the simulator's
   ``begin_i = max(start, free_i)``: the time the plan (and the model, if it travels) spent in transit, like the
   real compute, counts toward the emulated time instead of adding to it (the start travels in the plan as
   wall-clock time, exact on one host; on several hosts it needs clocks synchronised by NTP, and a stamp from the
   future is clipped to the receive time). The same ``delay.sample(seed, t, n, load)`` draw the simulator uses
   (common random numbers). Real compute time counts toward it (only the remainder is slept); if the real compute
   was longer, the message goes out late and the result header's overrun flag says so. An infinite emulated delay
   (the ``unresponsive`` model) makes the rank behave as a hung process: it never answers anything again.
4. **Send** the result (the header, and the message unless it is in shared memory) with a non-blocking buffer
   send, tag ``t mod 32766``, and complete it by polling before the buffer is written again. The message is
   written (into the send buffer or the worker's shared segment) before the sleep, so that only the header is
   written after it. The worker counts as free from the moment it sent (the
   simulator's ``free_i = arrival``): the transfer of the result, like that of the plan, counts toward the next
   emulated time.

A streaming plan (``scheme.streams`` or ``late_workers = "abandon"``) runs chunk by chunk (:meth:`Worker._work_stream`):
the model is copied out of its slot at once, each message is written into the worker's shared ring when its chunk
ends (``streaming.Ring``; inline if the ring is full) and only its header goes out when it is due. Under ``abandon``
(``between_chunks``: a chunked plan) the worker drops its plan for a newer one by the newer plan's issue time, not
by when it noticed it: at a chunk boundary only a plan issued by then counts, and a plan issued before the chunk
in progress began interrupts that chunk, the worker counting as free from its start (the simulator's rule, a
chunk begun by the iteration's end is finished; a worker wakes a moment after its boundary, and deciding by arrival
dropped plans one chunk early or late, moving whole runs off their ideal by up to 20 model units).
"""

from __future__ import annotations

import math
import time

import numpy as np
from mpi4py import MPI

from gradcode.clusters.driver import late_rule
from gradcode.schemes._base import Plan

from . import protocol as P
from . import streaming as S
from .config import RunConfig
from .doorbell import NO_DOORBELL, job_doorbell
from .faults import Faults
from .peers import MasterLost, Peers, who


class Worker:
    def __init__(self, comm: MPI.Comm, cfg: RunConfig, scheme, delay, workload, capacity: int, peers: Peers,
                 faults: Faults):
        self.comm, self.cfg, self.scheme, self.delay, self.workload = comm, cfg, scheme, delay, workload
        self.peers, self.faults = peers, faults
        self.i = comm.Get_rank() - 1
        self.n = cfg.workers
        self.capacity = capacity
        d = workload.dim
        self.late = cfg.options.late_workers
        # the payloads in node-local shared memory if possible (protocol.py); collective, like warm_up
        self.length, self.is_complex, self.streaming, self.shared = P.open_payloads(comm, cfg, scheme, d, peers)
        # two plan buffers: drain into the spare one, keep whichever holds the newest plan
        # written once here, so that the page faults of first use do not land in iteration 0
        self.plans = [np.full(P.plan_size(capacity, d), 0.0), np.full(P.plan_size(capacity, d), 0.0)]
        self.result = np.full(P.RESULT_HEADER + (0 if self.shared else self.length), 0.0)
        self.payload = self.shared.messages[self.i] if self.shared else self.result[P.RESULT_HEADER:]
        self.ctrl = np.zeros(1)
        # on one node: the master rings this worker's doorbell after each plan (and the STOP), the worker rings the
        # master's after each result, so that neither polls while it waits (doorbell.py)
        self.bell = job_doorbell("plans", self.i + 1, self.n + 1, peers.local) if self.shared else NO_DOORBELL
        # how long the master may legitimately leave this worker without a plan: it fails an iteration after grace
        # seconds without any message, and an iteration takes at most 2 n messages (a late answer and a current one
        # per worker); beyond that the master is hung (a dead master on this host is noticed at once, peers.py)
        self.patience = (2 * self.n + 2) * cfg.options.grace
        self.free = 0.0          # wall time at which this worker sent its last result
        # the buffer of the plan in hand, and of a newer plan already received while it was in hand (_newer_plan)
        self.current: int | None = None
        self.pending: int | None = None
        # chunk by chunk, several results per plan, on the streaming tag (mpi_runtime/master.py): payloads in a ring
        # of shared segments (streaming.Ring), inline when the ring is full or nothing is shared
        self.stopped = False
        self.add = cfg.options.inject == "add"   # the emulated delay after the real compute, not from the start
        if self.streaming:
            self.ring = S.Ring(self.shared, self.i) if self.shared else None
            self.result = np.full(P.RESULT_HEADER + self.length, 0.0)

    # --- the loop -------------------------------------------------------------------------------------------
    def run(self) -> None:
        self.faults.maybe_crash("warmup")
        setup = self.cfg.options.startup_timeout     # the bound of every wait until the clock starts
        self.peers.checkpoint("warm-up", setup)
        # the master names a missing worker within that; this worker names the master after twice that
        P.warm_up(self.comm, [(self.result, 0)], [(self.plans[0], 0)], 2 * setup + 1, self.peers.check)
        self.peers.checkpoint("clock start", setup)    # the master starts its clock after this
        while True:
            self.current = self._next_plan()
            if self.current is None or not self._work(self.plans[self.current]):
                break          # a STOP, answered with ACK
        if self.shared:
            self.peers.checkpoint("shutdown", self.cfg.options.grace)
            self.shared.close()     # collective with the master, which has every ACK

    def _next_plan(self) -> int | None:
        """Index of the buffer holding the newest queued plan (a plan received while the last was in hand counts as
        queued); None on STOP."""
        current, self.pending = self.pending, None
        status = MPI.Status()
        limit = time.perf_counter() + self.patience
        while True:
            if P.probe(self.comm, 0, MPI.ANY_TAG, status):
                if status.Get_tag() == P.CTRL_TAG:
                    self._stop()
                    return None
                slot = 0 if current is None else 1 - current
                self._wait(self.comm.Irecv(self.plans[slot], source=0, tag=status.Get_tag()), "a plan")
                if current is None or self.plans[slot][0] > self.plans[current][0]:
                    current = slot
                continue          # drain: more plans may be queued behind this one
            if current is not None:
                return current
            if time.perf_counter() > limit:
                raise MasterLost(f"no plan and no STOP from {who([0])} within {self.patience:g} s (2 n + 2 times "
                                 f"[run] grace){self.peers.states([0])}")
            self.peers.check()
            self.bell.wait(P.RECHECK, poll=P.IDLE_POLL)

    def _wait(self, request: MPI.Request, what: str) -> None:
        """Complete a transfer with the master, bounded (the master polls for it unless it is busy elsewhere)."""
        try:
            P.wait(request, timeout=self.patience, watch=self.peers.check)
        except TimeoutError:
            raise MasterLost(f"{what}: {who([0])} did not complete the transfer within {self.patience:g} s"
                             f"{self.peers.states([0])}") from None

    def _stop(self) -> None:
        """Receive the STOP and answer ACK (on the data communicator, so it follows every result sent before)."""
        self._wait(self.comm.Irecv(self.ctrl, source=0, tag=P.CTRL_TAG), "the STOP")
        self._wait(self.comm.Isend(self.ctrl, dest=0, tag=P.CTRL_TAG), "the ACK")

    # --- one plan -------------------------------------------------------------------------------------------
    def _work(self, buf: np.ndarray) -> bool:
        """Compute, wait out the emulated delay, send. False if a STOP arrived meanwhile."""
        if self.streaming:
            return self._work_stream(buf)
        received = time.time()
        t, load, batch, n_parts, parts, w, stamp, slot, _, _ = P.unpack_plan(buf, self.capacity, self.shared)
        begin = max(min(stamp, received), self.free)
        self.faults.maybe_crash(t)
        payload = self._message(t, load, batch, n_parts, parts, w)
        P.check_model(self.shared, slot, t)
        real = time.time() - received
        target = self._emulated(t, load)
        # the real work alone took longer than the emulated time; a target below the runtime's resolution (zero or
        # tiny: the overhead ratio leaves it out too) has nothing to overrun, nor has a delay added on top of the
        # real work (inject = "add")
        overrun = not self.add and target >= P.RESOLUTION and received + real > begin + target
        until = received + real + target if self.add else begin + target
        if not math.isfinite(target):
            _hang(self.peers)
        self.payload[:] = payload     # before the sleep: after it, only the header is left to write
        self.faults.maybe_poison(t, self.payload)
        if self.shared:
            self.shared.sync()        # the payload is written before the header that announces it is sent
        if not P.sleep_until(until, self._stop_came, nap=self.bell.wait):
            return False
        hdr = self.result
        hdr[:P.RESULT_HEADER] = (t, self.i, real, target, float(overrun), time.time(), len(parts), P.LAST, received,
                                 -1)
        self.free = hdr[5]     # free from when it sent (its emulated arrival): the transfer counts toward the next plan
        self._wait(self.comm.Isend(hdr, dest=0, tag=P.data_tag(t)), f"the result of iteration {t}")
        self.bell.ring(0)
        return True

    # --- one plan, chunk by chunk (a streaming scheme, or late_workers = "abandon") ------------------------------
    def _work_stream(self, buf: np.ndarray) -> bool:
        """Chunk by chunk: compute chunk ``j``'s real gradient, build and queue the scheme's message if it wants one
        after this chunk, wait until the chunk's emulated end ``begin + compute (j + 1) / L`` (the simulator's
        :mod:`gradcode.clusters.iteration`), then - between chunks - answer a STOP, drop the rest if a newer plan
        has come (``abandon``; an unchunked plan is interruptible throughout, as the simulator's ``abandon``) and stop
        at the local deadline ``tau``. A queued message goes out ``comm`` after its chunk ended: before the next chunk's
        real compute if that leaves the compute time to end by the chunk's emulated end, else after it. The worker's
        last result says so (``LAST``, or a ``MARKER`` with no message). False on STOP."""
        received = time.time()
        t, load, batch, n_parts, parts, w, stamp, slot, chunked, tau = P.unpack_plan(buf, self.capacity,
                                                                                     self.shared)
        w = np.array(w)              # a copy: the model is read now only (see streaming.Unread)
        P.check_model(self.shared, slot, t)
        begin = max(min(stamp, received), self.free)
        if self.ring is not None:
            self.ring.rewind()       # messages staged for a dropped plan were never sent
        self.faults.maybe_crash(t)
        L = len(parts) if chunked else 1
        own = tuple(tuple(parts) if j == self.i else () for j in range(self.n))
        plan = Plan(t=t, parts=own, n_parts=n_parts, load=np.full(self.n, load), batch=batch, tau=tau,
                    chunked=chunked)
        late = late_rule(self.late, plan)     # between_chunks: abandon if the plan is chunked, else finish
        emits = set(self.scheme.emits(self.i, plan))
        compute, comm = self._draw(t, load)
        if not (math.isfinite(compute) and math.isfinite(comm)):
            _hang(self.peers)
        scale = self.cfg.options.time_scale
        ends = [begin + compute * scale * (j + 1) / L for j in range(L)]
        self.receipt, self.real, self.target = received, 0.0, (compute + comm) * scale   # for the result headers
        self.overrun = False
        partials: list[np.ndarray] = []
        queue: list[tuple] = []    # (send time, chunks done, message: ring number, copy or None, last of the plan?)
        done = 0
        ended = False      # the plan's last message (or marker) is queued
        for j in range(L):
            chunk = [parts[j]] if chunked else list(parts)
            tick = time.time()
            partials.extend(self.workload.gradients(w, t, chunk, n_parts, batch))
            spent = time.time() - tick
            self.real += spent
            if self.add:     # this chunk's emulated time after its real compute: every later end moves too
                ends[j:] = [e + spent for e in ends[j:]]
            more = j + 1 < L and (ends[j] - begin) / scale < tau     # another chunk follows (not past the deadline)
            if j + 1 in emits:    # built now, before the chunk's emulated end: it leaves when due, not after its making
                stacked = np.stack(partials)
                msg = self.scheme.message(self.i, j + 1, stacked, plan)
                ended = not more
                queue.append((ends[j] + comm * scale, j + 1, self._stage(t, P.as_payload(msg, self.is_complex)),
                              ended))
            # the real work alone outlasted the chunk's emulated end (a chunk below the runtime's resolution has
            # nothing to overrun, nor has a delay added after the real work), as in _work
            if not self.add and ends[j] - (ends[j - 1] if j else begin) >= P.RESOLUTION and time.time() > ends[j]:
                self.overrun = True
            # a chunked plan is interruptible too, by a plan issued before this chunk began: in the model the worker
            # never began it (the plan came a moment after the boundary, which passed by with nothing to see)
            chunk_start = ends[j - 1] if j else begin
            state = self._until(ends[j], queue, t, late, interruptible=True,
                                issued_by=chunk_start if chunked else math.inf,
                                free_at=chunk_start if chunked else -math.inf)
            if state != "on":
                return state != "stop"
            done = j + 1
            if not more:
                break
            # a plan issued after this boundary is noticed here when the worker wakes late: in the model the next
            # chunk has begun (the simulator's chunk_start <= end), so it is dropped only at the next boundary
            if late == "abandon" and self._newer_plan(issued_by=ends[j]):
                self.free = ends[j]   # free from this chunk boundary (its emulated end), the simulator's free_i
                return True   # drop the rest (and the messages not yet out): the newer plan is waiting
            # a message due before the next chunk's real work would be done goes out first, on time: behind that work
            # it would leave late by the whole real compute of a chunk (the next chunk still ends at ends[j + 1])
            if queue and queue[0][0] + spent <= ends[j + 1]:
                state = self._until(queue[0][0], queue, t, late, interruptible=False)
                if state != "on":
                    return state != "stop"
        if not ended:      # the plan ended with no message due: say so
            queue.append((ends[done - 1] + comm * scale if done else begin, done, None, True))
        # abandoned now: in the model the worker was free when its last chunk ended (unchunked: when the newer plan
        # was issued, as in the compute phase)
        state = self._until(math.inf, queue, t, late, interruptible=late == "abandon",
                            free_at=(ends[done - 1] if done else begin) if chunked else -math.inf)
        return state != "stop"

    def _stage(self, t: int, payload: np.ndarray):
        """A message to send later: its ring number (written into shared memory now, before the wait), or a copy
        (inline: nothing shared, or the ring is full)."""
        m = -1 if self.ring is None else self.ring.stage(payload)
        if m < 0:
            return payload.copy()
        self.faults.maybe_poison(t, self.ring.segments[m % len(self.ring.segments)])
        return m

    def _until(self, until: float, queue: list, t: int, late: str, *, interruptible: bool,
               issued_by: float = math.inf, free_at: float = -math.inf) -> str:
        """Wait until ``until`` (or until the queue is empty if ``until`` is inf), sending queued messages when
        due. ``"on"``; ``"stop"`` (a STOP came and was answered); ``"newer"`` (a newer plan, if ``interruptible``
        under abandon: the queue is dropped, and the worker counts as free from ``free_at``: by default as soon as
        the newer plan was issued, the simulator's ``begin = start`` for an unchunked plan; noticing it takes the
        worker up to a millisecond, which counts toward the next emulated time as the plan's transit does). Only a
        plan issued by ``issued_by`` interrupts (:meth:`_newer_plan`)."""
        abandon = interruptible and late == "abandon"
        while True:
            due = queue[0][0] if queue else math.inf
            nxt = min(until, due)
            if not math.isfinite(nxt):
                return "on"
            watch = (lambda: self._stop_came() or self._newer_plan(issued_by)) if abandon else self._stop_came
            if not P.sleep_until(nxt, watch, check_every=0.0 if abandon else 0.005, nap=self.bell.wait):
                if self.stopped:
                    return "stop"
                self.free = free_at
                return "newer"
            if queue and due <= until:
                self._send_stream(t, queue.pop(0))
            else:
                return "on"

    def _send_stream(self, t: int, item) -> None:
        send_at, c, msg, last = item
        kind = (P.LAST if last else P.MESSAGE) if msg is not None else P.MARKER
        out = self.result
        seq = -1
        if isinstance(msg, int):            # in the shared ring: only the header travels
            seq = msg
            self.ring.sending(seq)
            out = out[:P.RESULT_HEADER]
        elif msg is not None:
            out[P.RESULT_HEADER:P.RESULT_HEADER + len(msg)] = msg
            self.faults.maybe_poison(t, out[P.RESULT_HEADER:])
        else:
            out = out[:P.RESULT_HEADER]
        out[:P.RESULT_HEADER] = (t, self.i, self.real, self.target, float(self.overrun), time.time(), c, kind,
                                 self.receipt, seq)
        if last:
            self.free = out[5]
        self._wait(self.comm.Isend(out, dest=0, tag=P.STREAM_TAG), f"a result of iteration {t}")
        self.bell.ring(0)

    def _newer_plan(self, issued_by: float = math.inf) -> bool:
        """Has a newer plan been issued by the wall time ``issued_by``? Plans that came are received now, into the
        buffer the plan in hand does not use (the newest kept: plans come in order), for :meth:`_next_plan` to take.
        By their issue time, not their arrival: the worker looks when it wakes, a moment after a chunk boundary,
        and a plan issued in that moment came after the boundary, as the simulator has it."""
        status = MPI.Status()
        while P.probe(self.comm, 0, MPI.ANY_TAG, status) and status.Get_tag() != P.CTRL_TAG:
            spare = 1 - self.current
            self._wait(self.comm.Irecv(self.plans[spare], source=0, tag=status.Get_tag()), "a plan")
            self.pending = spare
        return self.pending is not None and self.plans[self.pending][P.PLAN_STAMP] <= issued_by

    def _draw(self, t: int, load: float) -> tuple[float, float]:
        """This worker's compute and communication time of plan ``t`` in model units (the simulator's draw)."""
        compute, comm = self.delay.sample(self.cfg.options.seed, t, self.n, np.full(self.n, load))
        return float(compute[0, self.i]), float(comm[0, self.i])

    def _message(self, t: int, load: float, batch: int | None, n_parts: int, parts, w) -> np.ndarray:
        partials = self.workload.gradients(w, t, parts, n_parts, batch)
        # the scheme only reads its own worker's entry of the plan
        own = tuple(tuple(parts) if j == self.i else () for j in range(self.n))
        plan = Plan(t=t, parts=own, n_parts=n_parts, load=np.full(self.n, load), batch=batch)
        return P.as_payload(self.scheme.message(self.i, 1, partials, plan), self.is_complex)

    def _emulated(self, t: int, load: float) -> float:
        """Seconds this worker's response takes in the model: the simulator's draw for (seed, t, i, load)."""
        compute, comm = self._draw(t, load)
        return (compute + comm) * self.cfg.options.time_scale

    def _stop_came(self) -> bool:
        """Has a STOP arrived while this worker waits out an emulated delay? (Then it answers ACK.)"""
        if P.probe(self.comm, 0, P.CTRL_TAG):
            self._stop()
            self.stopped = True
            return True
        self.peers.check()     # the master died meanwhile: say so now, not after the emulated delay
        return False


def _hang(peers: Peers) -> None:
    """An infinite emulated delay: behave as a hung process (no answer, ever). The master reports this rank after
    its grace period and aborts it; if the master dies first (on this host), this rank says so and fails."""
    while True:
        time.sleep(P.POLL * 100)
        peers.check()
