"""The master rank of a master/worker scheme (sync, fastest_k, backup, adaptive_k, adaptive_k_load, coded,
partial_coded, ...): the simulator's loop on the wall clock. Iteration ``t``:

1. **Plan and publish.** ``plan = scheme.plan(t)``; the model goes into a shared slot no worker may still read (on
   one node; else it travels in the plans) and every **idle** worker (one that has answered its last plan) gets
   its share of the plan. A worker still busy with an older plan gets nothing now: when its last result of that
   plan arrives (recognised by the iteration in its header, and never mixed into this iteration) it becomes idle
   and takes the current plan at once, the simulator's ``late_workers = "finish"`` (``begin = max(start,
   free)``). Under ``abandon`` busy workers get the plan too and drop theirs (``worker.py``). How plans and
   results move is the transport's (``transport.py``).
2. **Poll until the policy holds.** Every arrival is a message ``(worker, chunks)`` (a plan that is not chunked
   sends one, after its single chunk); the messages of iteration ``t``, in arrival order, go to the stop policy
   (:meth:`gradcode.clusters.driver.StopPolicy.holds`: the scheme's stop rule, or an exact code's fallback
   set is in) until it holds or the plan's deadline passes with at least one. A message with non-finite values is
   an erasure: logged, never combined. Messages arriving after the stop are not used.
3. **Conclude.** The scheme's estimate from the messages, ``w -= lr * g``, ``scheme.adapt``, one record (written
   and flushed once the next iteration's plans are out, or when the run ends). A scheme whose estimate is a
   weighted sum with weights fixed on arrival (``scheme.sums_on_arrival``) has its messages added up as they
   arrive, during the wait; the others' are copied out as they arrive.

**Times.** ``start``/``end`` in the records are wall-clock seconds since the run start (after a barrier of all
ranks) over ``time_scale``: model units, comparable with the simulator; ``start`` when the master begins handing
out plan ``t``, ``end`` when the stop rule held; the loss evaluation for the records is kept off the clock
(``now``), as on the virtual clock. ``ideal_end = start + D_t``, ``D_t`` the simulator's duration of iteration
``t`` with the same draws and zero overhead from where the workers are (:meth:`Master._shadow`), so each
iteration is charged its own overhead only.

**Shutdown.** ``STOP`` to every living worker, then up to ``[run] grace`` seconds for their ``ACK``. Workers that
never acknowledged are reported on stderr and in the summary; if any, or if a worker died, :meth:`Master.run`
returns True and ``__main__`` aborts the job (``MPI_Abort(0)``: the run completed, its files are on disk).

**Deaths and failures.** A worker that reports a failure or whose process is gone is an erasure (``deaths.py``):
never sent a plan again, the run goes on while the stop rule can hold with the living. A rule that can never hold
(the dead, an infinite model delay, every worker answered and an erasure leaves it unmet) fails at once with the
reason; no message for ``grace`` seconds while the rule is unmet fails naming the workers waited for and their
processes' state. The records so far are on disk, ``__main__`` writes the summary with the error
(:meth:`Master.write_failure`) and the job exits non-zero.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from gradcode.clusters.driver import Driver, SimulationError, late_rule
from gradcode.clusters.iteration import Iteration, begins, iteration
from gradcode.clusters.records import RecordWriter, complete_record, write_summary
from gradcode.deaths import dead_field

from . import protocol as P
from .config import RunConfig
from .deaths import Burials
from .faults import Faults
from .heard import Heard
from .peers import Peers
from .protocol import Result, RunFailure
from .transport import MasterPort


@dataclass
class _Iteration:
    """What the master knows of the iteration in progress."""

    t: int
    start: float        # model units, the master's clock
    stamp: float        # wall time (time.time) of its start: the workers count their emulated time from it
    slot: int           # the shared model slot its plans name (-1: the model travels in them)
    late: str           # the rule its late workers follow (driver.late_rule)
    received: list[tuple[int, int]] = field(default_factory=list)    # used messages (worker, chunks), in order
    fallback: set | None = None       # an exact code's fallback messages, from the shadow clock
    emulated: np.ndarray | None = None     # each worker's response time on this plan (model units)
    stale: int = 0          # results of older plans
    erasures: list[int] = field(default_factory=list)
    overruns: list[int] = field(default_factory=list)


class Master(Driver):
    def __init__(self, comm: MPI.Comm, cfg: RunConfig, scheme, delay, workload, capacity: int, out: Path,
                 peers: Peers, faults: Faults):
        super().__init__(scheme, workload, cfg.options)
        self.cfg, self.delay, self.peers, self.faults, self.out = cfg, delay, peers, faults, out
        self.scale = cfg.options.time_scale
        self.resolution = P.RESOLUTION / self.scale   # no overhead ratio over ideal times below (clusters/records.py)
        self.port = MasterPort(comm, cfg, scheme, workload.dim, capacity, peers)
        length = self.port.length
        # the messages of the iteration: added up as they arrive (scheme.sums_on_arrival), or copied out
        self.total = np.zeros(length) if scheme.sums_on_arrival else None
        self.inbox = np.zeros((0, length))
        self.busy = np.full(self.n, -1)          # iteration of the plan a worker holds; -1: idle
        # when each worker would be free with zero overhead: the begin of the plan it holds + its emulated time, in
        # wall-clock seconds like the workers' own schedule (the master's model clock stops during evaluations)
        self.expected_free = np.zeros(self.n)
        self.writer: RecordWriter | None = None
        self.unwritten: dict[str, Any] | None = None   # the last record, written once the next plans are out
        self.fill = None     # what completes it (Driver.record_later)
        self.t0 = 0.0
        self.off_clock = 0.0     # seconds spent in evaluate so far: not counted by now()
        self.evaluation_s = 0.0  # ... and in this iteration
        self.heard = Heard(self.n, self.scale)   # per-worker times of the current iteration (worker_* fields)
        self.burials = Burials(self)
        self.silent: list[int] = []     # the workers that left an iteration without a message for grace seconds

    def now(self) -> float:
        """Model time units since the run start, without the time spent evaluating the loss for the records."""
        return (time.perf_counter() - self.t0 - self.off_clock) / self.scale

    # --- the run --------------------------------------------------------------------------------------------
    def run(self) -> bool:
        """The run; True if workers never acknowledged the STOP, so that only ``MPI_Abort`` can end them. A failure
        is raised (``__main__`` then calls :meth:`write_failure`); the records so far are on disk."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.faults.maybe_crash("warmup")
        # until the clock starts, waits are bounded by startup_timeout (a loaded machine is slow to set up)
        setup = self.options.startup_timeout
        self.peers.checkpoint("warm-up", setup)     # names a missing worker; the warm-up's Idup cannot
        self.port.warm_up(setup)
        self.peers.checkpoint("clock start", setup)
        self.peers.tolerant = True       # from now on a worker's death is an erasure (deaths.py)
        self.t0 = time.perf_counter()
        self.writer = RecordWriter(self.out / "records.jsonl")
        try:
            super().run()
        finally:
            self._write_record()
            self.writer.close()
        unresponsive = self.port.shutdown()
        if self.port.shared and not unresponsive and not self.dead:
            self.peers.checkpoint("shutdown", self.options.grace)
            self.port.close()     # collective: every worker has acknowledged the STOP and met the checkpoint
        self._write_summary(unresponsive, None)
        if unresponsive:
            ranks = [i + 1 for i in unresponsive]
            _log(f"workers {unresponsive} (ranks {ranks}) did not answer within the grace period of "
                 f"{self.options.grace:g} s{self.peers.states(ranks)}: aborting them (records and summary are "
                 "written)")
        if unresponsive or self.dead:     # MPI_Finalize would wait for them for ever (deaths.py)
            time.sleep(0.3)    # let the launcher forward the message before MPI_Abort
        return bool(unresponsive or self.dead)

    def write_failure(self, error: str) -> None:
        """The summary of a run that failed at any point, with the error; the workers that left the last iteration
        without a message for ``grace`` seconds are listed as unresponsive."""
        self._write_summary(self.silent, error)

    def _write_summary(self, unresponsive: list[int], error: str | None) -> None:
        np.save(self.out / "params.npy", self.w)
        write_summary(self.out, {**self.summary(), **self.cfg.summary_fields(unresponsive, error)})

    # --- one iteration: plan, publish, poll until the policy holds, conclude --------------------------------
    def gather(self, t: int, plan) -> dict[str, Any]:
        self.faults.maybe_crash(t)
        self.burials.bury(t, plan)
        tick = time.perf_counter()
        start, stamp = self.now(), time.time()
        it = _Iteration(t, start, stamp, self.port.publish(t, self.w), late_rule(self.options.late_workers, plan))
        self.heard.new(t)
        # in model units from this start; an idle worker's answer is in, so it was free by now
        free = np.where(self.busy < 0, it.start, it.start + (self.expected_free - it.stamp) / self.scale)
        # under abandon the busy workers too, unless one has not taken its last plan yet (a large model
        # mid-transfer): it gets this one when it answers
        targets = [int(i) for i in range(self.n) if i not in self.dead and (
            self.busy[i] < 0 or (it.late == "abandon" and self.port.taken(i)))]
        for i in targets:
            self._send_plan(it, plan, i, ring=False)
        self.port.ring(targets)      # after every plan is out: a woken worker may take the CPU from the master
        send_s = time.perf_counter() - tick
        ideal = self._shadow(it, plan, free, targets)   # while the workers compute, off the critical path
        self._write_record()
        self._poll(it, plan)
        end = self.now()
        tick = time.perf_counter()
        self.evaluation_s = 0.0
        rec = self._conclude(it, plan, end, ideal)
        master_s = send_s + time.perf_counter() - tick - self.evaluation_s
        rec.update(master_us=master_s * 1e6, evaluation_us=self.evaluation_s * 1e6)
        return rec

    def _send_plan(self, it: _Iteration, plan, i: int, ring: bool = True) -> None:
        message = self.port.prepare(i, it.t, plan, self.w, it.stamp, it.slot)
        # the departure, read before the send: a worker rung now may take the CPU and its plan up at once
        self.heard.plan_sent(i, it.t, self.now())
        self.port.send(i, it.t, message, ring)
        self.busy[i] = it.t

    def _poll(self, it: _Iteration, plan) -> None:
        """Take the messages as they come until the stop policy holds (``it.received``)."""
        last = time.perf_counter()
        while True:
            held = False       # the stop rule holds: later messages of this poll are not used
            for i, res in self.port.arrivals():
                last = time.perf_counter()
                held = self._take(it, plan, i, res, held)
            if held or self.policy.out_of_time(it.received, self.now() - it.start, plan):
                return
            if not (self.busy >= 0).any():
                raise RunFailure(self._unmet(it, "every worker has answered and none is computing"))
            if time.perf_counter() - last > self.options.grace:
                self.silent = sorted(int(i) for i in np.flatnonzero(self.busy >= 0))
                raise RunFailure(self._unmet(it, f"no message for {self.options.grace:g} s ([run] grace)"))
            self.peers.check()      # a worker that failed or died: an erasure now, not a silence of grace seconds
            self.burials.bury(it.t, plan, it.received)
            self.port.nap((plan.deadline - (self.now() - it.start)) * self.scale)

    def _take(self, it: _Iteration, plan, i: int, res: Result, held: bool) -> bool:
        """Worker ``i``'s result ``res``: used if it is a message of this iteration before the stop; a worker whose
        plan it ends is idle, and if late takes the current plan. True if the stop rule holds now (or did)."""
        current = res.t == it.t
        if current and res.overrun and i not in it.overruns:
            it.overruns.append(i)    # the real compute outlasted the emulated time
        if current and res.kind != P.MARKER:
            self.heard.stamp(i, self.heard.read(res), self.now())     # its last message received so far
        use = current and res.kind != P.MARKER and not held and self._keep(it, plan, i, res)
        self.port.done(i, res)     # read: the worker's next result may come in
        if res.kind != P.MESSAGE and self.busy[i] == res.t:
            self.busy[i] = -1
            if not current:
                self._send_plan(it, plan, i)      # late and free now: it takes the current plan
                # it begins when it sent this result, or at the stamp if that is later (worker.py: free)
                self.expected_free[i] = max(it.stamp, res.sent_at) + it.emulated[i] * self.scale
        if not current:
            it.stale += 1
        # the stop rule changes only with a new message (the deadline is out_of_time's): asked once for each
        return held or (use and self.policy.holds(it.received, plan, it.fallback))

    def _keep(self, it: _Iteration, plan, i: int, res: Result) -> bool:
        """A message of this iteration: unless an erasure, appended to ``it.received`` and added to the running
        sum with its weight (``scheme.arrival_weight``; a message of weight 0 is not even read), or copied into
        the next row of ``inbox``. False for an erasure."""
        payload = self.port.payload(i, res)
        if not P.finite(payload):
            it.erasures.append(i)
            _log(f"iteration {it.t}: worker {i} (rank {i + 1}) sent non-finite values; treated as an erasure")
            return False
        it.received.append((i, res.chunks))
        values = payload     # float64, as it travelled (a complex message as its float64 view: 2 values an entry)
        row = len(it.received) - 1
        if self.total is not None:
            a = self.scheme.arrival_weight(it.received, plan)
            if row == 0:
                np.multiply(values, a, out=self.total)
            elif a == 1.0:
                self.total += values
            elif a:
                self.total += a * values
            return True
        if row >= len(self.inbox):
            grown = np.zeros((max(2 * len(self.inbox), self.n), self.port.length))
            grown[:len(self.inbox)] = self.inbox
            self.inbox = grown
        np.copyto(self.inbox[row], values)
        return True

    def _unmet(self, it: _Iteration, why: str) -> str:
        """Why the iteration cannot end: the workers waited for (and their processes' state), the erasures."""
        waiting = sorted(int(i) for i in np.flatnonzero(self.busy >= 0))
        ranks = [i + 1 for i in waiting]
        text = f"iteration {it.t}: the stop rule of {self.scheme.name} does not hold and {why}; "
        if waiting:
            text += f"waiting for workers {waiting} (ranks {ranks}){self.peers.states(ranks)}; "
        if it.erasures:
            text += (f"erasures (non-finite messages, never combined) from workers {it.erasures} "
                     f"(ranks {[i + 1 for i in it.erasures]}); ")
        return text + f"responders {[i for i, _ in it.received]}"

    # --- the shadow clock -----------------------------------------------------------------------------------
    def _shadow(self, it: _Iteration, plan, free: np.ndarray, sent: list[int]) -> Iteration:
        """The simulator's arithmetic for the iteration (same draws, zero overhead), from where the workers are:
        the virtual clock is set to this iteration's ``start`` and each worker's free time to when it would finish
        the plan it holds with zero overhead (``expected_free``), so that the ideal charges this iteration's
        overhead alone. (A free-running virtual clock would drift from the real one, and under ``finish`` a late
        worker that catches a plan on one clock and misses it on the other makes the two differ by a whole delay.)
        Sets the workers' expected free times and the policy's fallback; returns the ideal."""
        compute, comm = (x[0] for x in self.delay.sample(self.options.seed, it.t, self.n, plan.load))
        start = it.start
        begin = begins(plan, it.late, start, free)
        if self.dead:     # the simulator's dead worker: it never begins a plan (gradcode.deaths)
            dead = np.isin(np.arange(self.n), list(self.dead))
            begin, compute = np.where(dead, np.inf, begin), np.where(dead, np.inf, compute)
        it.emulated = compute + comm
        try:
            ideal = iteration(self.policy, plan, start, begin, compute, comm, it.late, self.links)
        except SimulationError as err:
            raise RunFailure(f"iteration {it.t}: {err}") from None
        if self.port.streaming:     # a worker takes a newer plan where the simulator says it is free
            self.expected_free[:] = np.where(ideal.started, it.stamp + (ideal.free - start) * self.scale,
                                             self.expected_free)
        else:       # the workers sent this plan now; a busy one is given it when its late answer comes (_take)
            busy = it.emulated[sent] if self.links is None else ideal.free[sent] - start    # links: plan and message
            self.expected_free[sent] = it.stamp + busy * self.scale
        self.scheme.observe_chunks(it.t, compute / plan.chunk_counts)
        it.fallback = self.policy.fallback(ideal.received, plan)
        return ideal

    # --- conclude -------------------------------------------------------------------------------------------
    def _conclude(self, it: _Iteration, plan, end: float, ideal: Iteration) -> dict[str, Any]:
        """The driver's tail of the iteration (update, adapt, evaluate, record) from the messages used."""
        if self.total is not None:     # summed as they arrived (_keep)
            combined = self.scheme.combine_weighted(self.total, it.received, plan)
        else:
            messages = P.from_payload(self.inbox[:len(it.received)], self.port.is_complex)
            combined = self.scheme.combine(messages, it.received, plan)
        fields = dict(ideal_end=it.start + (ideal.end - ideal.start), combined=combined, stale=it.stale,
                      erasures=it.erasures, overruns=it.overruns,
                      ideal_responders=[int(i) for i in ideal.responders], **dead_field(self.dead),
                      **self.heard.fields(it.t, it.start, self.delay.injects))
        # the work counted is the ideal's on the same draws; what was used is what arrived
        return self.conclude_gather(it.t, plan, it.start, end, it=replace(ideal, end=end, received=it.received),
                                    **fields)

    def emit(self, rec: dict[str, Any]) -> None:
        self.unwritten = rec

    def record_later(self, head: dict[str, Any], fill) -> dict[str, Any]:
        # the record's bookkeeping (~0.3 ms) is done once the next plans are out, with its writing (_write_record)
        self.fill = fill
        return head

    def _write_record(self) -> None:
        """Complete the last record and append it to records.jsonl, flushed. Called once the next iteration's plans
        are out (so neither is on the critical path) and when the run ends, so every record reaches the disk."""
        if self.unwritten is not None:
            complete_record(self.unwritten, self.fill)
            self.writer.write(self.unwritten)
            self.unwritten = None

    def evaluate(self, *args):
        """The driver's evaluation, timed: bookkeeping for the records, not part of any scheme, so its time is kept
        off the clock (``now``), as the virtual clock does not count it either. Workers still late from this
        iteration run on meanwhile."""
        tick = time.perf_counter()
        result = super().evaluate(*args)
        self.evaluation_s = time.perf_counter() - tick
        self.off_clock += self.evaluation_s
        return result

    def summary_extras(self) -> dict[str, Any]:
        return {"master_us_median": float(np.median([r["master_us"] for r in self.records])),
                "stale_messages": int(sum(r["stale"] for r in self.records)),
                "erasures": int(sum(len(r["erasures"]) for r in self.records)),
                "overruns": int(sum(len(r["overruns"]) for r in self.records))}


def _log(text: str) -> None:
    print(f"mpi_runtime: master (rank 0): {text}", file=sys.stderr, flush=True)
