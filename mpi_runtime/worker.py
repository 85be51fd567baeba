"""A worker rank of a master/worker scheme: take a plan, compute it chunk by chunk, send the scheme's messages when
their emulated time comes.

Worker ``i`` (rank ``i + 1``) loops:

1. **Take the newest plan** (``WorkerPort.next_plan``: on one node it blocks on its doorbell, which the master
   rings after sending plans; several queued plans are drained and only the newest kept). A ``STOP`` ends the loop
   (it answers ``ACK``). The model is read where it arrived (in the plan, or in the shared slot the plan names),
   or copied out at once when a message may leave before the last chunk is computed (a streaming run).
2. **Compute chunk by chunk.** A plan that is not chunked is one chunk: all of the worker's partitions at once.
   Chunk ``j`` is the real gradients of its partitions (``workload.gradients``); if the scheme wants a message
   after it (``scheme.emits``) the message is built and staged at once (``scheme.message``), written into the
   worker's shared ring where there is one. Every rank built the same workload and scheme from the spec.
3. **Emulate the time.** The delay model's draw for this worker and plan (``delay.sample(seed, t, n, load)``, the
   simulator's common random numbers) gives ``compute`` and ``comm`` model units; chunk ``j`` ends at ``begin +
   compute (j + 1) / L`` (times ``time_scale`` seconds) with ``begin = max(start of the iteration at the master,
   when this worker became free)``, the simulator's ``begin_i = max(start, free_i)``; the real compute and the
   plan's transit count toward that time instead of adding to it (the start travels in the plan as wall-clock
   time, exact on one host; on several hosts it needs clocks synchronised by NTP, and a stamp from the future is
   clipped to the receive time). A message leaves ``comm`` after its chunk ended; if the real compute of a chunk
   outlasted its emulated end, the results say so (``overrun``). Under ``[run] inject = "add"`` the emulated time
   comes after the real compute instead, counted from when the worker took the plan up. An infinite delay (the
   ``unresponsive`` model) makes the rank behave as a hung process: it never answers anything again.
4. **Between chunks** it answers a STOP, stops at the local deadline ``tau``, and under ``abandon`` drops the rest
   of its plan for a newer one by the newer plan's issue time, not by when it noticed it: at a chunk boundary only
   a plan issued by then counts, and a plan issued before the chunk in progress began interrupts that chunk, the
   worker counting as free from its start (the simulator's rule: a chunk begun by the iteration's end is
   finished). The plan's last result says it is the last (``LAST``, or a ``MARKER`` with no message); the worker
   counts as free from the moment it sent it (the simulator's ``free_i = arrival``).
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from gradcode.clusters.driver import late_rule
from gradcode.schemes._base import Plan
from gradcode.workloads._base import run_workload

from . import protocol as P
from .config import RunConfig
from .faults import Faults
from .peers import Peers
from .protocol import Result, WorkerPlan
from .transport import Staged, WorkerPort


class Outcome(enum.Enum):
    """How a wait ended."""

    ON = "on"            # its time came: go on with the plan
    STOP = "stop"        # a STOP came and was answered
    NEWER = "newer"      # a newer plan came and this one is dropped (abandon)


@dataclass
class _Queued:
    """A result waiting for its departure: after ``chunks`` chunks; ``staged`` None for a marker."""

    send_at: float
    chunks: int
    staged: Staged | None
    last: bool           # the plan's last result


@dataclass
class _Job:
    """The plan in hand: its emulated schedule (wall times) and what is done of it."""

    wp: WorkerPlan
    plan: Plan           # the scheme's view of it: only this worker's entry is filled in
    late: str            # "finish" or "abandon" (driver.late_rule)
    emits: set[int]      # after how many chunks a message goes out
    begin: float
    ends: list[float]    # when each chunk's emulated compute ends
    comm: float          # seconds from a chunk's end to its message's departure
    target: float        # the emulated response time in seconds (for the results' headers)
    taken_at: float      # when the worker took the plan up
    scale: float
    real: float = 0.0    # seconds of real compute so far
    overrun: bool = False
    partials: list[np.ndarray] = field(default_factory=list)
    queue: list[_Queued] = field(default_factory=list)
    done: int = 0        # chunks done
    ended: bool = False  # the plan's last result is queued

    def chunk_start(self, j: int) -> float:
        return self.ends[j - 1] if j else self.begin

    def more(self, j: int) -> bool:
        """Does another chunk follow chunk ``j`` (one is left, and the local deadline has not passed)?"""
        return j + 1 < len(self.ends) and (self.ends[j] - self.begin) / self.scale < self.wp.tau


class Worker:
    def __init__(self, comm: MPI.Comm, cfg: RunConfig, scheme, delay, workload, capacity: int, peers: Peers,
                 faults: Faults):
        self.cfg, self.scheme, self.delay = cfg, scheme, delay
        self.workload = run_workload(workload, cfg.options.seed)    # mini-batches as the master's Driver draws them
        self.peers, self.faults = peers, faults
        self.i = comm.Get_rank() - 1
        self.n = cfg.workers
        self.port = WorkerPort(comm, cfg, scheme, workload.dim, capacity, peers, faults)
        self.free = 0.0          # wall time at which this worker sent its last plan's last result
        self.add = cfg.options.inject == "add"   # the emulated delay after the real compute, not counted from the start

    def run(self) -> None:
        self.faults.maybe_crash("warmup")
        setup = self.cfg.options.startup_timeout     # the bound of every wait until the clock starts
        self.peers.checkpoint("warm-up", setup)
        # the master names a missing worker within that; this worker names the master after twice that
        self.port.warm_up(2 * setup + 1)
        self.peers.checkpoint("clock start", setup)    # the master starts its clock after this
        while (wp := self.port.next_plan()) is not None and self._work(wp):
            pass               # a STOP, answered with ACK, ends the loop
        if self.port.shared:
            self.peers.checkpoint("shutdown", self.cfg.options.grace)
            self.port.close()

    # --- one plan -------------------------------------------------------------------------------------------
    def _work(self, wp: WorkerPlan) -> bool:
        """The plan, chunk by chunk (see the module's docstring). False on STOP."""
        job = self._job(wp)
        w = self.port.model(wp)
        self.faults.maybe_crash(wp.t)
        for j in range(len(job.ends)):
            spent = self._compute(job, w, j)
            # a chunked plan is interruptible too, by a plan issued before this chunk began: in the model the worker
            # never began it (the plan came a moment after the boundary, which passed by with nothing to see)
            chunked = wp.chunked
            outcome = self._until(job, job.ends[j], interruptible=True,
                                  issued_by=job.chunk_start(j) if chunked else math.inf,
                                  free_at=job.chunk_start(j) if chunked else -math.inf)
            if outcome is not Outcome.ON:
                return outcome is not Outcome.STOP
            job.done = j + 1
            if not job.more(j):
                break
            # a plan issued after this boundary is noticed here when the worker wakes late: in the model the next
            # chunk has begun (the simulator's chunk_start <= end), so it is dropped only at the next boundary
            if job.late == "abandon" and self.port.newer_plan(issued_by=job.ends[j]):
                self.free = job.ends[j]   # free from this chunk boundary (its emulated end), the simulator's free_i
                return True   # drop the rest (and the messages not yet out): the newer plan is waiting
            # a message due before the next chunk's real work would be done goes out first, on time: behind that work
            # it would leave late by the whole real compute of a chunk (the next chunk still ends at ends[j + 1])
            if job.queue and job.queue[0].send_at + spent <= job.ends[j + 1]:
                outcome = self._until(job, job.queue[0].send_at, interruptible=False)
                if outcome is not Outcome.ON:
                    return outcome is not Outcome.STOP
        return self._finish(job)

    def _job(self, wp: WorkerPlan) -> _Job:
        """The plan's emulated schedule, from when the worker takes it up (now)."""
        taken_at = time.time()
        begin = taken_at if self.add else max(min(wp.stamp, taken_at), self.free)
        chunks = len(wp.parts) if wp.chunked else 1
        # the scheme only reads its own worker's entry of the plan
        own = tuple(tuple(wp.parts) if j == self.i else () for j in range(self.n))
        plan = Plan(t=wp.t, parts=own, n_parts=wp.n_parts, load=np.full(self.n, wp.load), batch=wp.batch,
                    tau=wp.tau, chunked=wp.chunked)
        compute, comm = self.delay.sample(self.cfg.options.seed, wp.t, self.n, np.full(self.n, wp.load))
        compute, comm = float(compute[0, self.i]), float(comm[0, self.i])
        if not (math.isfinite(compute) and math.isfinite(comm)):
            _hang(self.peers)
        scale = self.cfg.options.time_scale
        late = late_rule(self.cfg.options.late_workers, plan)
        return _Job(wp, plan, late, set(self.scheme.emits(self.i, plan)), begin,
                    [begin + compute * scale * (j + 1) / chunks for j in range(chunks)], comm * scale,
                    (compute + comm) * scale, taken_at, scale)

    def _compute(self, job: _Job, w: np.ndarray, j: int) -> float:
        """Chunk ``j``'s real gradients, and the message after it if the scheme wants one (built now, before the
        chunk's emulated end: it leaves when due, not after its making). Returns the seconds it took."""
        wp = job.wp
        tick = time.time()
        job.partials.extend(self.workload.gradients(w, wp.t, [wp.parts[j]] if wp.chunked else list(wp.parts),
                                                    wp.n_parts, wp.batch))
        spent = time.time() - tick
        self.port.model_read(wp)
        job.real += spent
        if self.add:     # this chunk's emulated time after its real compute: every later end moves too
            job.ends[j:] = [e + spent for e in job.ends[j:]]
        if j + 1 in job.emits:
            stacked = np.stack(job.partials)
            msg = self.scheme.message(self.i, j + 1, stacked, job.plan)
            job.ended = not job.more(j)
            staged = self.port.stage(wp.t, P.as_payload(msg, self.port.is_complex))
            job.queue.append(_Queued(job.ends[j] + job.comm, j + 1, staged, job.ended))
        job.overrun |= P.overran(job.ends[j] - job.chunk_start(j), job.ends[j], self.add)
        return spent

    def _finish(self, job: _Job) -> bool:
        """After the last chunk: the results still queued (a marker if the plan ended with no message due) go out
        when due. Abandoned meanwhile, the worker was free when its last chunk ended (unchunked: when the newer
        plan was issued, as in the compute phase). False on STOP."""
        last_end = job.ends[job.done - 1]
        if not job.ended:
            job.queue.append(_Queued(last_end + job.comm, job.done, None, True))
        outcome = self._until(job, math.inf, interruptible=job.late == "abandon",
                              free_at=last_end if job.wp.chunked else -math.inf)
        return outcome is not Outcome.STOP

    def _until(self, job: _Job, until: float, *, interruptible: bool, issued_by: float = math.inf,
               free_at: float = -math.inf) -> Outcome:
        """Wait until ``until`` (or until the queue is empty if ``until`` is inf), sending queued results when due.
        If ``interruptible`` under abandon, a newer plan issued by ``issued_by`` ends the wait (``NEWER``; the queue
        is dropped, and the worker counts as free from ``free_at``: by default as soon as the newer plan was
        issued, the simulator's ``begin = start`` for an unchunked plan; noticing it takes the worker up to a
        millisecond, which counts toward the next emulated time as the plan's transit does)."""
        abandon = interruptible and job.late == "abandon"
        port = self.port
        watch = (lambda: port.stop_came() or port.newer_plan(issued_by)) if abandon else port.stop_came
        while True:
            due = job.queue[0].send_at if job.queue else math.inf
            nxt = min(until, due)
            if not math.isfinite(nxt):
                return Outcome.ON
            if not P.sleep_until(nxt, watch, check_every=0.0 if abandon else 0.005, nap=port.bell.wait):
                if port.stopped:
                    return Outcome.STOP
                self.free = free_at
                return Outcome.NEWER
            if not (job.queue and due <= until):
                return Outcome.ON
            self._send(job, job.queue.pop(0))

    def _send(self, job: _Job, item: _Queued) -> None:
        kind = P.MARKER if item.staged is None else (P.LAST if item.last else P.MESSAGE)
        header = Result(job.wp.t, self.i, job.real, job.target, job.overrun, math.nan, item.chunks, kind,
                        job.taken_at, -1)
        sent_at = self.port.send(header, item.staged)
        if item.last:
            self.free = sent_at     # free from when it sent: the transfer counts toward the next plan's time


def _hang(peers: Peers) -> None:
    """An infinite emulated delay: behave as a hung process (no answer, ever). The master reports this rank after
    its grace period and aborts it; if the master dies first (on this host), this rank says so and fails."""
    while True:
        time.sleep(P.POLL * 100)
        peers.check()
