"""How plans and results move between the master and the workers: one object on each side.

:class:`MasterPort` and :class:`WorkerPort` own everything the wire needs (the layouts, tags and shared memory of
``protocol.py``: buffers, model slots, message rings, doorbells, requests, headers), so that the master and the
worker say what moves, never how. Every worker has at most one plan in flight from the master, sent from its own
send buffer, written again only once that send has completed; the master keeps one receive posted per worker,
into its own receive buffer, reposted once the result in it has been read.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable

import numpy as np
from mpi4py import MPI

from . import protocol as P
from . import streaming as S
from .doorbell import NO_DOORBELL, job_doorbell
from .peers import MasterLost, Peers, who
from .protocol import Result, RunFailure, WorkerPlan


class MasterPort:
    """The master's end of every worker's channel (rank ``i + 1`` is worker ``i``)."""

    def __init__(self, comm: MPI.Comm, cfg, scheme, d: int, capacity: int, peers: Peers):
        self.comm, self.peers, self.capacity, self.grace, self.n = comm, peers, capacity, cfg.options.grace, cfg.workers
        # collective, like warm_up: every rank opens the shared window at the same point
        self.length, self.is_complex, self.streaming, self.shared = P.open_payloads(comm, cfg, scheme, d, peers)
        self.slots = P.ModelSlots(self.shared)
        self.unread = S.Unread(self.n)       # the model slots that workers may still read
        self.read = np.zeros(self.n, dtype=int)    # ring messages read from each worker
        # on one node: ring a worker's doorbell after its plan, and wait on ours for results (doorbell.py)
        self.bell = job_doorbell("plans", 0, self.n + 1, peers.local) if self.shared else NO_DOORBELL
        # written once here (np.full, not np.empty): the page faults of first use do not land in iteration 0
        self.send_bufs = [np.full(P.plan_size(capacity, d), 0.0) for _ in range(self.n)]
        self.recv_bufs = [np.full(P.RESULT_HEADER + self.length, 0.0) for _ in range(self.n)]
        self.send_reqs = [MPI.REQUEST_NULL] * self.n
        self.recv_reqs = [MPI.REQUEST_NULL] * self.n
        self.dead: set[int] = set()      # workers dropped (drop): no request to or from them any more

    def warm_up(self, timeout: float) -> None:
        """The buffers' first exchange with every worker (``protocol.warm_up``), then the receives posted."""
        P.warm_up(self.comm, [(buf, i + 1) for i, buf in enumerate(self.send_bufs)],
                  [(buf, i + 1) for i, buf in enumerate(self.recv_bufs)], timeout, self.peers.check)
        for i in range(self.n):
            self._post(i)

    def publish(self, t: int, w: np.ndarray) -> int:
        """The model of iteration ``t`` into a shared slot no worker may still read; its slot, or -1 (then it
        travels in the plans)."""
        return self.slots.publish(t, w, self.unread.held())

    def taken(self, i: int) -> bool:
        """Has worker ``i`` taken its last plan (so that its send buffer is free)?"""
        return bool(self.send_reqs[i].Test())

    def prepare(self, i: int, t: int, plan, w: np.ndarray, stamp: float, slot: int) -> np.ndarray:
        """Worker ``i``'s share of ``plan`` packed into its send buffer, once the previous plan's send is complete:
        the part of the buffer for :meth:`send`."""
        try:       # the worker answered its previous plan, so it took it: its buffer is free again
            P.wait(self.send_reqs[i], timeout=self.grace, watch=self.peers.check)
        except TimeoutError:
            raise RunFailure(f"iteration {t}: {who([i + 1])} did not take its plan within {self.grace:g} s "
                             f"([run] grace){self.peers.states([i + 1])}") from None
        self.unread.sent(i, t, slot)
        return P.pack_plan(self.send_bufs[i], t, float(plan.load[i]), plan.batch, plan.n_parts, plan.parts[i], w,
                           self.capacity, stamp, slot, plan.chunked, plan.tau)

    def send(self, i: int, t: int, message: np.ndarray, ring: bool = True) -> None:
        """Send worker ``i`` its plan of iteration ``t`` (:meth:`prepare`), and ring its doorbell unless told not
        to (the caller rings several at once with :meth:`ring`)."""
        self.send_reqs[i] = self.comm.Isend(message, dest=i + 1, tag=P.data_tag(t))
        if ring:
            self.ring([i])

    def ring(self, workers: Iterable[int]) -> None:
        """Wake these workers (their doorbells; nothing without doorbells)."""
        for i in workers:
            self.bell.ring(int(i) + 1)

    def nap(self, seconds: float) -> None:
        """Between two looks for results: on our doorbell (a worker rings it after each result) for up to
        ``IDLE_POLL``, never longer than ``seconds``; without a doorbell a ``POLL`` sleep."""
        self.bell.wait(min(P.IDLE_POLL, max(seconds, 0.0)), poll=P.POLL)

    def arrivals(self) -> list[tuple[int, Result]]:
        """The results completed since the last call, ``(worker, header)`` in the order they were sent. Each must
        be handed back with :meth:`done` once its payload is read."""
        done = P.testsome(self.recv_reqs)
        if not done:
            return []
        if self.shared:
            self.shared.sync()     # ring payloads were written before the headers that announce them were sent
        out = []
        for i in done:
            self.recv_reqs[i] = MPI.REQUEST_NULL
            res = Result.read(self.recv_bufs[i])
            self.unread.answered(i, res.t)   # it has read the model of plan res.t, and skipped older ones
            out.append((i, res))
        return sorted(out, key=lambda item: item[1].sent_at)

    def payload(self, i: int, res: Result) -> np.ndarray | None:
        """The payload ``res`` announces, where it lies (worker ``i``'s ring, or after the header); None for a
        marker. Valid until :meth:`done`."""
        if res.kind == P.MARKER:
            return None
        if res.seq < 0:
            return self.recv_bufs[i][P.RESULT_HEADER:]
        if res.seq != self.read[i]:     # a guard on the ring's discipline, never expected to fire
            raise RunFailure(f"worker {i} (rank {i + 1}) announced ring message {res.seq}, expected {self.read[i]}")
        ring = self.shared.rings[i]
        return ring[res.seq % len(ring)]

    def done(self, i: int, res: Result) -> None:
        """Worker ``i``'s result is read: its ring segment may be written again, its next result come in."""
        if res.kind != P.MARKER and res.seq >= 0:
            self.read[i] += 1
            self.shared.sync()     # the reads are done before the worker may see the count and rewrite the segment
            self.shared.consumed[i] = self.read[i]
        self._post(i)

    def _post(self, i: int) -> None:
        if i not in self.dead:
            self.recv_reqs[i] = self.comm.Irecv(self.recv_bufs[i], source=i + 1, tag=P.RESULT_TAG)

    def drop(self, i: int) -> None:
        """Worker ``i`` is dead: never wait on it, send to it or collect with it again. Its pending receive is
        cancelled (a local operation, complete at once with MPICH also for a dead peer: measured), its last send
        never waited for, and the model slots it held are free."""
        self.dead.add(i)
        try:
            P.cancel_receive(self.recv_reqs[i], timeout=self.grace)
        except TimeoutError:
            pass       # never seen; the request is left behind, as the job ends with MPI_Abort (master.py)
        self.recv_reqs[i] = self.send_reqs[i] = MPI.REQUEST_NULL
        self.unread.answered(i, 2 ** 62)

    def shutdown(self) -> list[int]:
        """STOP every living worker; wait up to ``grace`` s for their ACKs, dropping the results still coming;
        return the workers that never answered. Receives still pending are cancelled (``protocol.cancel_receive``)."""
        stop = np.zeros(1)
        acks = [np.zeros(1) for _ in range(self.n)]
        living = [i for i in range(self.n) if i not in self.dead]
        null = MPI.REQUEST_NULL
        stops = [null if i in self.dead else self.comm.Isend(stop, dest=i + 1, tag=P.CTRL_TAG) for i in range(self.n)]
        self.ring(living)
        ack_reqs = [null if i in self.dead else self.comm.Irecv(acks[i], source=i + 1, tag=P.CTRL_TAG)
                    for i in range(self.n)]
        limit = time.perf_counter() + self.grace
        acked = np.zeros(self.n, dtype=bool)
        acked[list(self.dead)] = True       # nothing to wait for
        while not acked.all() and time.perf_counter() < limit:
            for i in MPI.Request.Testsome(ack_reqs) or []:
                acked[i] = True
                self.peers.forget(i + 1)    # done: it may exit
            for i in MPI.Request.Testsome(self.recv_reqs) or []:    # late results: received and dropped
                if not acked[i]:
                    self._post(i)       # it may have more in flight before its ACK
            time.sleep(P.POLL)
        for i in (i for i in living if acked[i]):
            # every result sent before the ACK has been matched: a pending receive can only be cancelled
            P.cancel_receive(self.recv_reqs[i])
            P.wait_all([self.send_reqs[i], stops[i]], self.grace)   # both were received: already complete
        return [int(i) for i in np.flatnonzero(~acked)]

    def close(self) -> None:
        """Free the shared window: collective, once every worker has acknowledged the STOP."""
        if self.shared:
            self.shared.close()


@dataclasses.dataclass
class Staged:
    """A message to send later: ``seq``, its number in the ring (its payload written there already), or
    ``inline``, its payload (in the send buffer already, or a copy); neither for a marker (no message)."""

    seq: int = -1
    inline: np.ndarray | None = None
    in_place: bool = False     # ``inline`` is the send buffer's payload


class WorkerPort:
    """Worker ``i``'s end of its channel with the master (rank 0)."""

    def __init__(self, comm: MPI.Comm, cfg, scheme, d: int, capacity: int, peers: Peers, faults):
        self.comm, self.peers, self.faults, self.capacity = comm, peers, faults, capacity
        self.i = comm.Get_rank() - 1
        n = cfg.workers
        # collective, like warm_up: every rank opens the shared window at the same point
        self.length, self.is_complex, self.streaming, self.shared = P.open_payloads(comm, cfg, scheme, d, peers)
        # two plan buffers: drain into the spare one, keep whichever holds the newest plan
        self.plans = [np.full(P.plan_size(capacity, d), 0.0), np.full(P.plan_size(capacity, d), 0.0)]
        self.result = np.full(P.RESULT_HEADER + self.length, 0.0)
        self.ring = S.Ring(self.shared, self.i) if self.shared else None
        self.ctrl = np.zeros(1)
        # on one node the master rings this worker's doorbell after each plan (and the STOP), the worker rings the
        # master's after each result, so that neither polls while it waits (doorbell.py)
        self.bell = job_doorbell("plans", self.i + 1, n + 1, peers.local) if self.shared else NO_DOORBELL
        # how long the master may legitimately leave this worker without a plan: it fails an iteration after grace
        # seconds without any message, and an iteration takes at most 2 n messages (a late answer and a current one
        # per worker); beyond that the master is hung (a dead master on this host is noticed at once, peers.py)
        self.patience = (2 * n + 2) * cfg.options.grace
        # the buffer of the plan in hand, and of a newer plan received while it was in hand (newer_plan)
        self.current: int | None = None
        self.pending: int | None = None
        self.stopped = False     # a STOP came and was answered
        self.in_place = False    # a staged message, not sent yet, is in the send buffer (stage)

    def warm_up(self, timeout: float) -> None:
        P.warm_up(self.comm, [(self.result, 0)], [(self.plans[0], 0)], timeout, self.peers.check)

    def next_plan(self) -> WorkerPlan | None:
        """The newest queued plan (one received while the last was in hand counts as queued); None on STOP."""
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
                plan_t = WorkerPlan.iteration
                if current is None or plan_t(self.plans[slot]) > plan_t(self.plans[current]):
                    current = slot
                continue          # drain: more plans may be queued behind this one
            if current is not None:
                self.current = current
                self.in_place = False        # messages staged for a dropped plan are never sent
                if self.ring is not None:
                    self.ring.rewind()
                return P.unpack_plan(self.plans[current], self.capacity, self.shared)
            if time.perf_counter() > limit:
                raise MasterLost(f"no plan and no STOP from {who([0])} within {self.patience:g} s (2 n + 2 times "
                                 f"[run] grace){self.peers.states([0])}")
            self.peers.check()
            self.bell.wait(P.RECHECK, poll=P.IDLE_POLL)

    def newer_plan(self, issued_by: float = math.inf) -> bool:
        """Has a newer plan been issued by the wall time ``issued_by``? Plans that came are received now, into the
        buffer the plan in hand does not use (the newest kept: plans come in order), for :meth:`next_plan`.
        By their issue time, not their arrival: the worker looks when it wakes, a moment after a chunk boundary,
        and a plan issued in that moment came after the boundary, as the simulator has it."""
        status = MPI.Status()
        while P.probe(self.comm, 0, MPI.ANY_TAG, status) and status.Get_tag() != P.CTRL_TAG:
            spare = 1 - self.current
            self._wait(self.comm.Irecv(self.plans[spare], source=0, tag=status.Get_tag()), "a plan")
            self.pending = spare
        return self.pending is not None and WorkerPlan.issued(self.plans[self.pending]) <= issued_by

    def model(self, plan: WorkerPlan) -> np.ndarray:
        """The model to compute on: where it arrived, or a copy when a result may go out before the last chunk is
        computed (the master may then rewrite the slot: ``streaming.Unread``)."""
        if not self.streaming:
            return plan.w
        w = np.array(plan.w)
        P.check_model(self.shared, plan.slot, plan.t)
        return w

    def model_read(self, plan: WorkerPlan) -> None:
        """After a read of the model where it arrived: it must still be the plan's (``protocol.check_model``)."""
        if not self.streaming:
            P.check_model(self.shared, plan.slot, plan.t)

    def stage(self, t: int, payload: np.ndarray) -> Staged:
        """A message to send later, written now (before the wait, so that only the header is left to write when
        it is due): into the ring, else into the send buffer if no other staged message is there, else a copy."""
        m = -1 if self.ring is None else self.ring.stage(payload)
        if m >= 0:
            staged = Staged(seq=m, inline=self.ring.segments[m % len(self.ring.segments)])
        elif self.in_place:
            staged = Staged(inline=payload.copy())
        else:
            self.in_place = True
            staged = Staged(inline=self.result[P.RESULT_HEADER:], in_place=True)
            np.copyto(staged.inline, payload)
        self.faults.maybe_poison(t, staged.inline)
        return staged

    def send(self, header: Result, staged: Staged | None) -> float:
        """Send a result: ``header`` (its send time set now) and the staged message, if any. Returns the send
        time."""
        out = self.result[:P.RESULT_HEADER]
        if staged is not None and staged.seq >= 0:      # in the shared ring: only the header travels
            self.ring.sending(staged.seq)
        elif staged is not None:
            out = self.result[:P.RESULT_HEADER + len(staged.inline)]
            if staged.in_place:
                self.in_place = False
            else:
                out[P.RESULT_HEADER:] = staged.inline
        header = dataclasses.replace(header, sent_at=time.time(), seq=-1 if staged is None else staged.seq)
        header.pack(out)
        self._wait(self.comm.Isend(out, dest=0, tag=P.RESULT_TAG), f"a result of iteration {header.t}")
        self.bell.ring(0)
        return header.sent_at

    def stop_came(self) -> bool:
        """Has a STOP arrived while this worker waits? (Then it answers ACK.)"""
        if P.probe(self.comm, 0, P.CTRL_TAG):
            self._stop()
            self.stopped = True
            return True
        self.peers.check()     # the master died meanwhile: say so now, not after the emulated delay
        return False

    def _stop(self) -> None:
        """Receive the STOP and answer ACK (on the data communicator, so it follows every result sent before)."""
        self._wait(self.comm.Irecv(self.ctrl, source=0, tag=P.CTRL_TAG), "the STOP")
        self._wait(self.comm.Isend(self.ctrl, dest=0, tag=P.CTRL_TAG), "the ACK")

    def _wait(self, request: MPI.Request, what: str) -> None:
        """Complete a transfer with the master, bounded (the master polls for it unless it is busy elsewhere)."""
        try:
            P.wait(request, timeout=self.patience, watch=self.peers.check)
        except TimeoutError:
            raise MasterLost(f"{what}: {who([0])} did not complete the transfer within {self.patience:g} s"
                             f"{self.peers.states([0])}") from None

    def close(self) -> None:
        """Free the shared window: collective with the master, which has every ACK."""
        if self.shared:
            self.shared.close()
