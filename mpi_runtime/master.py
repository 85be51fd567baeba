"""The master rank of a master/worker scheme (sync, fastest_k, backup, adaptive_k, adaptive_k_load, coded).

Iteration ``t``:

1. ``plan = scheme.plan(t)``; the master hands it, with the model, to every **idle** worker (one that has answered
   its last plan) by a non-blocking buffer send (``Isend``) from that worker's own send buffer, and posts a receive
   for its answer into that worker's pre-allocated receive buffer. A worker still busy with an older plan is not
   sent anything now: when its late message arrives (recognised by the iteration in its header, and discarded,
   never mixed into this iteration) it becomes idle and gets the current plan at once. This is the simulator's
   ``late_workers = "finish"``: a late worker starts the newest plan when it is free, ``begin = max(start,
   free)``. Every worker has at most one plan and one receive outstanding, so no buffer is ever written while a
   request points at it. When the ranks share a node, the model is written once per iteration into a shared slot
   that no busy worker reads, the plans name the slot, and the workers' messages come back through shared memory
   too: only headers travel (``protocol.py``, :class:`~mpi_runtime.protocol.ModelSlots`).
2. It polls the receives (``Testsome`` + short sleep) and appends responders in arrival order until the stop
   policy holds (:class:`gradcode.clusters.driver.StopPolicy`, the simulator's: ``scheme.done(received, plan)``, or the
   plan's deadline passed with at least one responder, or an exact code's fallback set is in). A message with non-finite
   values is an erasure: logged, never combined. Messages arriving after the stop are discarded.
3. ``scheme.combine`` over the responders' messages, ``w -= lr * g``, ``scheme.adapt``, one record (written and
   flushed once the next iteration's plans are out, or when the run ends). A scheme whose combine is a weighted
   sum with weights fixed on arrival (``scheme.sums_on_arrival``: the averaging schemes, partial_coded's streamed
   chunks) has its messages added up as they arrive, during the wait, and ``scheme.combine_weighted`` finishes the
   estimate.

**Times.** ``start``/``end`` in the records are wall-clock seconds since the run start (after a barrier of all
ranks) divided by ``time_scale``, i.e. in model time units, comparable with the simulator. ``start`` is when the
master begins handing out plan ``t``, ``end`` when the stop rule held; the master's own work (decode, update,
sends) lies between one ``end`` and the next ``start``; the loss evaluation for the records is bookkeeping and is
kept off the clock (``now``), as on the virtual clock. ``ideal_end = start + D_t`` with ``D_t`` the duration the
simulator's arithmetic (:func:`gradcode.clusters.iteration.iteration`) gives iteration ``t`` with the same draws and
zero overhead, starting from where the workers are: a worker still busy is taken to be free when it would finish its
plan with zero overhead (the begin of that plan plus its emulated time). So ``sum(ideal_end - start)`` is the ideal
total time, the summary's ``overhead_ratio`` is measured over ideal, and each iteration is charged its own overhead only
(see ``_ideal``).

**Shutdown.** ``STOP`` to every worker, then wait up to ``[run] grace`` seconds for their ``ACK`` (and meet them at
a checkpoint before the shared window is freed, a collective). Receives still pending are cancelled (``Cancel``,
wait, ``Is_cancelled``; a message that won the race is received and dropped).
Workers that never acknowledged are reported on stderr and in the summary, and :meth:`Master.run` returns True:
``__main__`` then aborts the job (``MPI_Abort`` with code 0: the run itself completed; its records and summary are
on disk before the abort).

The loop, the stop policy, the update, the evaluation and the record are :class:`gradcode.clusters.driver.Driver`'s;
this class adds how messages move and how the wall clock is read.

**Failures.** If the stop rule can never hold because a worker's model delay is infinite (e.g. ``sync`` with an
unresponsive worker), the shadow clock says so and the master fails at once with the simulator's reason; if it
cannot hold because every worker has answered (an erasure under ``sync``), at once too, naming the erased workers.
A worker that reports a failure or whose process is gone (``peers.py``) is named at once; if no message arrives for
``grace`` seconds while the stop rule is unmet (a hung or stopped process), the master fails naming the workers it
waits for and their processes' state. Either way the records so far are on disk, ``__main__`` writes the summary
with the error (:meth:`Master.write_failure`) and the job exits non-zero.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from gradcode.clusters.driver import Driver, SimulationError, late_rule
from gradcode.clusters.iteration import Iteration, iteration
from gradcode.clusters.records import RecordWriter, complete_record, write_summary
from gradcode.schemes._base import Received

from . import protocol as P
from . import streaming as S
from .config import RunConfig
from .doorbell import NO_DOORBELL, job_doorbell
from .faults import Faults
from .heard import Heard
from .peers import Peers, who
from .protocol import RunFailure


class Master(Driver):
    def __init__(self, comm: MPI.Comm, cfg: RunConfig, scheme, delay, workload, capacity: int, out: Path,
                 peers: Peers, faults: Faults):
        super().__init__(scheme, workload, cfg.options)
        self.comm, self.cfg, self.delay = comm, cfg, delay
        self.peers, self.faults = peers, faults
        self.capacity = capacity
        self.scale = cfg.options.time_scale
        self.resolution = P.RESOLUTION / self.scale   # no overhead ratio over ideal times below (clusters/records.py)
        d = workload.dim
        self.late = cfg.options.late_workers
        # the payloads in node-local shared memory if possible (protocol.py); collective, like warm_up
        self.length, self.is_complex, self.streaming, self.shared = P.open_payloads(comm, cfg, scheme, d, peers)
        self.slots = P.ModelSlots(self.shared)
        # on one node: ring a worker's doorbell after its plan, and wait on ours for results (doorbell.py)
        self.bell = job_doorbell("plans", 0, self.n + 1, peers.local) if self.shared else NO_DOORBELL
        self.slot_of = np.full(self.n, -1)        # the model slot named by the plan each worker holds
        # buffers written once here (np.full, not np.empty): the page faults of first use do not land in iteration 0
        self.send_bufs = [np.full(P.plan_size(capacity, d), 0.0) for _ in range(self.n)]
        # chunk by chunk, several results per plan (a streaming scheme, or late workers that abandon): see
        # _gather_stream; the payloads come through each worker's ring in shared memory, or inline (a full ring)
        self.unread = S.Unread(self.n)        # the model slots that workers may still read
        self.read = np.zeros(self.n, dtype=int)   # ring messages read from each worker
        self.inbox = np.zeros((0, self.length))   # this iteration's messages, copied out as they arrive
        inline = self.length if (self.streaming or not self.shared) else 0
        self.recv_bufs = [np.full(P.RESULT_HEADER + inline, 0.0) for _ in range(self.n)]
        self.payloads = ([buf[P.RESULT_HEADER:] for buf in self.recv_bufs] if inline else self.shared.messages)
        # running (weighted) sum of the messages, added up as they arrive (scheme.sums_on_arrival)
        self.total = np.zeros(self.length) if scheme.sums_on_arrival else None
        self.send_reqs = [MPI.REQUEST_NULL] * self.n
        self.recv_reqs = [MPI.REQUEST_NULL] * self.n
        self.busy = np.full(self.n, -1)          # iteration of the plan a worker holds; -1: idle
        # when each worker would be free with zero overhead: the begin of the plan it holds + its emulated time, in
        # wall-clock seconds like the workers' own schedule (the master's model clock stops during evaluations)
        self.expected_free = np.zeros(self.n)
        self.out = out
        self.writer: RecordWriter | None = None
        # the last record, completed and written once the next iteration's plans are out
        self.unwritten: dict[str, Any] | None = None
        self.fill = None     # what completes it (Driver.record_later)
        self.t0 = 0.0
        self.off_clock = 0.0     # seconds spent in evaluate so far: not counted by now()
        self.evaluation_s = 0.0  # ... and in this iteration
        self.log = _Log()
        self.heard = Heard(self.n, self.scale)   # per-worker times of the current iteration (worker_* fields)

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
        P.warm_up(self.comm, [(buf, i + 1) for i, buf in enumerate(self.send_bufs)],
                  [(buf, i + 1) for i, buf in enumerate(self.recv_bufs)], setup, self.peers.check)
        self.peers.checkpoint("clock start", setup)
        self.t0 = time.perf_counter()
        self.writer = RecordWriter(self.out / "records.jsonl")
        try:
            super().run()
        finally:
            self._write_record()
            self.writer.close()
        unresponsive = self.shutdown()
        if self.shared and not unresponsive:
            self.peers.checkpoint("shutdown", self.options.grace)
            self.shared.close()     # collective: every worker has acknowledged the STOP and met the checkpoint
        self._write_summary(unresponsive, None)
        if unresponsive:
            ranks = [i + 1 for i in unresponsive]
            self.log(f"workers {unresponsive} (ranks {ranks}) did not answer within the grace period of "
                     f"{self.options.grace:g} s{self.peers.states(ranks)}: aborting them (records and summary are "
                     "written)")
            time.sleep(0.3)    # let the launcher forward the message before MPI_Abort
        return bool(unresponsive)

    def write_failure(self, error: str) -> None:
        """The summary of a run that failed at any point, with the error; the workers that still held a plan are
        listed as unresponsive."""
        self._write_summary(sorted(int(i) for i in np.flatnonzero(self.busy >= 0)), error)

    def _write_summary(self, unresponsive: list[int], error: str | None) -> None:
        np.save(self.out / "params.npy", self.w)
        write_summary(self.out, {**self.summary(), **self.cfg.summary_fields(unresponsive, error)})

    def gather(self, t: int, plan) -> dict[str, Any]:
        if self.streaming:
            return self._gather_stream(t, plan)
        self.faults.maybe_crash(t)
        start = self.now()
        self.stamp = time.time()      # workers count their emulated time from here (see worker.py)
        tick = time.perf_counter()
        self.slot = self.slots.publish(t, self.w, self.slot_of[self.busy >= 0])
        self.stats = {"stale": 0, "erasures": [], "overruns": []}
        self.heard.new(t)
        # in model units from this start; an idle worker's answer is in, so it was free by now
        free = np.where(self.busy < 0, start, start + (self.expected_free - self.stamp) / self.scale)
        idle = np.flatnonzero(self.busy < 0)
        for i in idle:
            self._send_plan(int(i), t, plan, ring=False)
        self._ring(idle)        # after every plan is out: a woken worker may take the CPU from the master
        send_s = time.perf_counter() - tick
        # while the workers compute, off the critical path: their emulated times, and the ideal
        compute, comm_time = self.delay.sample(self.options.seed, t, self.n, plan.load)
        self.emulated = compute[0] + comm_time[0]     # each worker's response time this iteration (model units)
        self.expected_free[idle] = self.stamp + self.emulated[idle] * self.scale
        ideal = self._ideal(t, plan, start, free, compute[0], comm_time[0])
        ideal_responders = [int(i) for i in ideal.responders]
        self._write_record()
        responders = self._collect(t, plan, start, self.policy.fallback(ideal_responders, plan))
        end = self.now()
        tick = time.perf_counter()
        self.evaluation_s = 0.0
        # the work counted is the ideal's on the same draws (as for a stream); what was used is what arrived
        measured = replace(ideal, end=end, received=Received(responders))
        rec = self.conclude_gather(t, plan, start, end, ideal_end=start + (ideal.end - ideal.start), it=measured,
                                   combined=self._combine(plan, responders),
                                   stale=self.stats["stale"], erasures=self.stats["erasures"],
                                   overruns=self.stats["overruns"], ideal_responders=ideal_responders,
                                   **self.heard.fields(t, start, self.delay.injects))
        master_s = send_s + time.perf_counter() - tick - self.evaluation_s
        rec.update(master_us=master_s * 1e6, evaluation_us=self.evaluation_s * 1e6)
        return rec

    def emit(self, rec: dict[str, Any]) -> None:
        self.unwritten = rec

    def record_later(self, head: dict[str, Any], fill) -> dict[str, Any]:
        # the record's bookkeeping (~0.3 ms) is done once the next plans are out, with its writing (_write_record)
        self.fill = fill
        return head

    # --- streaming: chunk by chunk, several results per plan ----------------------------------------------------
    def _gather_stream(self, t: int, plan) -> dict[str, Any]:
        """One iteration of chunked workers (``scheme.streams``, or ``late_workers = "abandon"``).

        The plan goes to every idle worker, and under ``abandon`` to the busy ones too (they drop their stale plan
        at their next chunk boundary, or at once if it is not chunked; ``between_chunks`` is ``abandon`` for a
        chunked plan, :func:`gradcode.clusters.driver.late_rule`). Every worker has one receive posted on
        :data:`~mpi_runtime.protocol.STREAM_TAG`, reposted after each result; a result names its iteration and
        the chunks done, so stale ones are dropped by header and the messages ``(worker, chunks)`` of this
        iteration go to the stop policy (:meth:`gradcode.clusters.driver.StopPolicy.holds`). The
        ideal end and the work counted (``worker_computed``) come from the simulator's arithmetic on the same draws
        (:func:`gradcode.clusters.iteration.iteration`); what was used is what arrived. On one node the model goes
        into a shared slot no worker may still read (:class:`~mpi_runtime.streaming.Unread`) and the payloads come
        through the workers' rings (:class:`~mpi_runtime.streaming.Ring`): only headers travel, as on the one-message
        path."""
        self.faults.maybe_crash(t)
        start = self.now()
        self.stamp = time.time()
        tick = time.perf_counter()
        self.slot = self.slots.publish(t, self.w, self.unread.held())
        self.stats = {"stale": 0, "erasures": [], "overruns": []}
        self.heard.new(t)
        for i in range(self.n):
            if self.recv_reqs[i] == MPI.REQUEST_NULL:
                self._post(i)
        free = np.where(self.busy < 0, start, start + (self.expected_free - self.stamp) / self.scale)
        late = late_rule(self.late, plan)
        targets = range(self.n) if late == "abandon" else np.flatnonzero(self.busy < 0)
        sent = []
        for i in targets:
            if self.busy[i] >= 0 and not self.send_reqs[i].Test():
                continue   # it has not taken its last plan yet (a large model mid-transfer): it gets this one later
            self._send_plan(int(i), t, plan, ring=False)
            sent.append(int(i))
        self._ring(sent)        # after every plan is out (see _gather)
        send_s = time.perf_counter() - tick
        compute, comm_time = self.delay.sample(self.options.seed, t, self.n, plan.load)
        self.emulated = compute[0] + comm_time[0]
        begin = np.maximum(start, free) if late == "finish" or plan.chunked else np.full(self.n, start)
        try:
            ideal = iteration(self.policy, plan, start, begin, compute[0], comm_time[0], late)
        except SimulationError as err:
            raise RunFailure(f"iteration {t}: {err}") from None
        self.expected_free[:] = np.where(ideal.started, self.stamp + (ideal.free - start) * self.scale,
                                         self.expected_free)
        self.scheme.observe_chunks(t, compute[0] / plan.chunk_counts)
        self._write_record()
        received = self._collect_stream(t, plan, start, self.policy.fallback(ideal.received, plan))
        end = self.now()
        tick = time.perf_counter()
        self.evaluation_s = 0.0
        measured = replace(ideal, end=end, received=received)
        if self.total is not None:     # summed as they arrived (_keep)
            combined = self.scheme.combine_weighted(self.total, received, plan)
        else:
            combined = self.scheme.combine(P.from_payload(self.inbox[:len(received)], self.is_complex),
                                                  received, plan)
        rec = self.conclude_gather(t, plan, start, end, ideal_end=start + (ideal.end - ideal.start), it=measured,
                                   combined=combined, stale=self.stats["stale"], erasures=self.stats["erasures"],
                                   overruns=self.stats["overruns"],
                                   ideal_responders=ideal.responders.tolist(),
                                   **self.heard.fields(t, start, self.delay.injects))
        master_s = send_s + time.perf_counter() - tick - self.evaluation_s
        rec.update(master_us=master_s * 1e6, evaluation_us=self.evaluation_s * 1e6)
        return rec

    def _post(self, i: int) -> None:
        self.recv_reqs[i] = self.comm.Irecv(self.recv_bufs[i], source=i + 1, tag=P.STREAM_TAG)

    def _collect_stream(self, t: int, plan, start: float, fallback) -> list:
        """Messages ``(worker, chunks)`` of iteration ``t`` in arrival order, until the stop rule holds, their
        payloads kept as they arrive (:meth:`_keep`); results that complete a worker's plan make it idle (under
        ``finish`` it gets plan ``t``)."""
        received: list[tuple[int, int]] = []
        last = time.perf_counter()
        while True:
            held = False       # the stop rule holds: later messages of this poll are not used
            for i in self._stream_arrivals():
                last = time.perf_counter()
                hdr = self.recv_bufs[i]
                t_msg, c, kind = int(hdr[0]), int(hdr[6]), int(hdr[7])
                heard = self.heard.read(hdr)    # read before the buffer is reposted
                sent_at = float(hdr[5])
                if t_msg == t and hdr[4] and i not in self.stats["overruns"]:
                    self.stats["overruns"].append(i)    # a chunk's real compute outlasted its emulated time
                self.unread.answered(i, t_msg)   # it has copied the model of plan t_msg, and skipped older ones
                use = t_msg == t and kind != P.MARKER and not held
                payload = self._payload(i, hdr)
                erased = use and not _finite(payload)
                if use and not erased:
                    self._keep(payload, received + [(i, c)], plan)
                self._release(i, hdr)
                self._post(i)          # the buffer is read: the worker's next result may come in
                if kind != P.MESSAGE and self.busy[i] == t_msg:
                    self.busy[i] = -1
                    if t_msg != t:
                        self._send_plan(i, t, plan)      # late and free now: it takes the current plan
                        # it begins when it sent this result (worker.py: its free), or at the stamp if later, as on
                        # the one-message path (_accept); the master's time.time() here, later by its reaction,
                        # made the ideal of its next plan late and iterations end before it (issue 28: -3 to -45 ms)
                        self.expected_free[i] = max(self.stamp, sent_at) + self.emulated[i] * self.scale
                if t_msg != t:
                    self.stats["stale"] += 1
                if not use:
                    continue           # stale, a marker, or after the stop in the same poll: not used
                if erased:
                    self.stats["erasures"].append(i)
                    self.log(f"iteration {t}: worker {i} (rank {i + 1}) sent non-finite values; an erasure")
                    continue
                received.append((i, c))
                self.heard.stamp(i, heard, self.now())     # its last message received so far
                # the stop rule changes only with a new message (the deadline is out_of_time's): asked once for each
                held = self.policy.holds(received, plan, fallback)
            if held:
                return received
            if self.policy.out_of_time(received, self.now() - start, plan):
                return received
            if not (self.busy >= 0).any():
                raise RunFailure(self._unmet(t, [i for i, _ in received],
                                             "every worker has answered and none is computing"))
            if time.perf_counter() - last > self.options.grace:
                raise RunFailure(self._unmet(t, [i for i, _ in received],
                                             f"no message for {self.options.grace:g} s ([run] grace)"))
            self.peers.check()
            self._nap(plan, start)

    def _stream_arrivals(self) -> list[int]:
        """Workers whose result completed since the last call, in the order they were sent."""
        done = P.testsome(self.recv_reqs)
        if not done:
            return []
        for i in done:
            self.recv_reqs[i] = MPI.REQUEST_NULL
        if self.shared:
            self.shared.sync()     # ring payloads were written before the headers that announce them were sent
        return sorted(done, key=lambda i: self.recv_bufs[i][5])

    def _payload(self, i: int, hdr: np.ndarray) -> np.ndarray | None:
        """Worker ``i``'s payload announced by ``hdr``, where it lies (the worker's ring segment, or the receive
        buffer after the header); None for a marker."""
        if int(hdr[7]) == P.MARKER:
            return None
        seq = int(hdr[9])
        if seq < 0:
            return P.from_payload(self.recv_bufs[i][P.RESULT_HEADER:], self.is_complex)
        if seq != self.read[i]:     # a guard on the ring's discipline, never expected to fire
            raise RunFailure(f"worker {i} (rank {i + 1}) announced ring message {seq}, expected {self.read[i]}")
        return P.from_payload(self.shared.rings[i][seq % P.STREAM_RING], self.is_complex)

    def _keep(self, payload: np.ndarray, received: list, plan) -> None:
        """A used message, the last of ``received``: added to the running sum with its weight (a scheme that sums on
        arrival, ``scheme.arrival_weight``: after the stop only the deciding message is left to add, and a message
        of weight 0 is not even read), else copied into the next row of ``inbox`` for ``scheme.combine``."""
        values = P.as_payload(payload, self.is_complex)     # float64, as it travelled
        row = len(received) - 1
        if self.total is not None:
            a = self.scheme.arrival_weight(received, plan)
            if row == 0:
                np.multiply(values, a, out=self.total)
            elif a == 1.0:
                self.total += values
            elif a:
                self.total += a * values
            return
        if row >= len(self.inbox):
            grown = np.zeros((max(2 * len(self.inbox), self.n), self.length))
            grown[:len(self.inbox)] = self.inbox
            self.inbox = grown
        np.copyto(self.inbox[row], values)

    def _release(self, i: int, hdr: np.ndarray) -> None:
        """A ring message is read (used or not): count it, so that the worker may write that segment again."""
        if int(hdr[7]) != P.MARKER and int(hdr[9]) >= 0:
            self.read[i] += 1
            self.shared.sync()     # the reads are done before the worker may see the count and rewrite the segment
            self.shared.consumed[i] = self.read[i]

    def _write_record(self) -> None:
        """Complete the last record and append it to records.jsonl, flushed. Called once the next iteration's plans
        are out (so neither is on the critical path) and when the run ends, so every record reaches the disk."""
        if self.unwritten is not None:
            complete_record(self.unwritten, self.fill)
            self.writer.write(self.unwritten)
            self.unwritten = None

    # --- the shadow clock -----------------------------------------------------------------------------------
    def _ideal(self, t: int, plan, start: float, free: np.ndarray, compute: np.ndarray,
               comm_time: np.ndarray) -> Iteration:
        """The simulator's arithmetic for iteration ``t`` (same draws, zero overhead), from where the workers are:
        the virtual clock is set to this iteration's ``start`` and each worker's free time to when it would finish
        the plan it holds with zero overhead (``expected_free``), so that the ideal charges this iteration's
        overhead alone. (A free-running virtual clock would drift from the real one, and under ``finish`` a late
        worker that catches a plan on one clock and misses it on the other makes the two differ by a whole delay.)"""
        try:
            return iteration(self.policy, plan, start, np.maximum(start, free), compute, comm_time, "finish")
        except SimulationError as err:
            raise RunFailure(f"iteration {t}: {err}") from None

    # --- sending and receiving ------------------------------------------------------------------------------
    def _send_plan(self, i: int, t: int, plan, ring: bool = True) -> None:
        try:       # the worker answered its previous plan, so it took it: its buffer is free again
            P.wait(self.send_reqs[i], timeout=self.options.grace, watch=self.peers.check)
        except TimeoutError:
            raise RunFailure(f"iteration {t}: {who([i + 1])} did not take its plan within {self.options.grace:g} s "
                             f"([run] grace){self.peers.states([i + 1])}") from None
        slot = self.slot
        message = P.pack_plan(self.send_bufs[i], t, float(plan.load[i]), plan.batch, plan.n_parts, plan.parts[i],
                              self.w, self.capacity, self.stamp, slot, plan.chunked, plan.tau)
        if self.streaming:
            self.unread.sent(i, t, slot)
        tag = P.data_tag(t)
        if not self.streaming:     # streaming: the receive on STREAM_TAG stays posted
            self.recv_reqs[i] = self.comm.Irecv(self.recv_bufs[i], source=i + 1, tag=tag)
        # the departure, read before the send: a worker rung now may take the CPU and its plan up at once
        self.heard.plan_sent(i, t, self.now())
        self.send_reqs[i] = self.comm.Isend(message, dest=i + 1, tag=tag)
        if ring:
            self._ring([i])
        self.busy[i], self.slot_of[i] = t, self.slot

    def _collect(self, t: int, plan, start: float, fallback: set[int] | None) -> list[int]:
        """Responders of iteration ``t`` in arrival order, until the stop rule holds."""
        responders: list[int] = []
        last = time.perf_counter()
        while True:
            arrived = self._arrivals()
            if arrived:
                last = time.perf_counter()
            for i in arrived:
                if self._accept(i, t, plan):
                    responders.append(i)
                    self._add(i, first=len(responders) == 1)
                    if self.policy.holds(responders, plan, fallback):
                        self._late_ones(arrived[arrived.index(i) + 1:], t)
                        return responders
            if self.policy.out_of_time(responders, self.now() - start, plan):
                return responders
            if not (self.busy >= 0).any():
                raise RunFailure(self._unmet(t, responders, "every worker has answered and none is computing"))
            if time.perf_counter() - last > self.options.grace:
                raise RunFailure(self._unmet(t, responders, f"no message for {self.options.grace:g} s ([run] grace)"))
            self.peers.check()      # a worker that failed or died: name it now, not after grace
            self._nap(plan, start)

    def _ring(self, workers) -> None:
        """Wake these workers (their doorbells; nothing without doorbells)."""
        for i in workers:
            self.bell.ring(int(i) + 1)

    def _nap(self, plan, start: float) -> None:
        """Between two looks for results: on our doorbell (a worker rings it after each result) for up to
        IDLE_POLL, never past the plan's deadline; without a doorbell a POLL sleep."""
        left = (plan.deadline - (self.now() - start)) * self.scale
        self.bell.wait(min(P.IDLE_POLL, max(left, 0.0)), poll=P.POLL)

    def _unmet(self, t: int, responders: list[int], why: str) -> str:
        """Why iteration ``t`` cannot end: the workers waited for (and their processes' state), the erasures."""
        waiting = sorted(int(i) for i in np.flatnonzero(self.busy >= 0))
        ranks = [i + 1 for i in waiting]
        text = f"iteration {t}: the stop rule of {self.scheme.name} does not hold and {why}; "
        if waiting:
            text += f"waiting for workers {waiting} (ranks {ranks}){self.peers.states(ranks)}; "
        erased = self.stats["erasures"]
        if erased:
            text += (f"erasures (non-finite messages, never combined) from workers {erased} "
                     f"(ranks {[i + 1 for i in erased]}); ")
        return text + f"responders {responders}"

    def _arrivals(self) -> list[int]:
        """Workers whose message completed since the last call, in the order they were sent."""
        done = P.testsome(self.recv_reqs)
        if not done:
            return []
        for i in done:
            self.busy[i] = -1
            self.recv_reqs[i] = MPI.REQUEST_NULL
            if int(self.recv_bufs[i][0]) == self.heard.t:
                self.heard.stamp(i, self.heard.read(self.recv_bufs[i]), self.now())
        if self.shared:
            self.shared.sync()     # their payloads were written before the headers that announce them were sent
        return sorted(done, key=lambda i: self.recv_bufs[i][5])

    def _accept(self, i: int, t: int, plan) -> bool:
        """True if worker ``i``'s message is a valid answer to iteration ``t``."""
        hdr = self.recv_bufs[i]
        if int(hdr[0]) != t:
            # a late answer to an older plan: drop it; the worker is free, so it takes the current plan now
            self.stats["stale"] += 1
            self._send_plan(i, t, plan)
            # it begins when it sent this answer (worker.py), or at the stamp if that is later
            self.expected_free[i] = max(self.stamp, hdr[5]) + self.emulated[i] * self.scale
            return False
        if hdr[4]:
            self.stats["overruns"].append(i)
        payload = self.payloads[i]
        if not _finite(payload):
            self.stats["erasures"].append(i)
            self.log(f"iteration {t}: worker {i} (rank {i + 1}) sent non-finite values; treated as an erasure")
            return False
        return True

    def _add(self, i: int, first: bool) -> None:
        """A scheme that combines the plain sum: add the message now, while the master waits for the others, so
        that after the stop rule holds only the last one is left to add."""
        if self.total is None:
            return
        payload = self.payloads[i]
        if first:
            np.copyto(self.total, payload)
        else:
            self.total += payload

    def _late_ones(self, arrived: list[int], t: int) -> None:
        """Messages that completed in the same poll as the deciding one but after it: not used."""
        for i in arrived:
            hdr = self.recv_bufs[i]
            if int(hdr[0]) != t:
                self.stats["stale"] += 1

    # --- combine and update ---------------------------------------------------------------------------------
    def _combine(self, plan, responders: list[int]):
        """The scheme's estimate from the responders' messages."""
        if self.total is not None:
            return self.scheme.combine_sum(self.total, len(responders), plan)   # summed as they arrived (_add)
        messages = np.stack([P.from_payload(self.payloads[i], self.is_complex) for i in responders])
        return self.scheme.combine(messages, responders, plan)

    def evaluate(self, *args):
        """The driver's evaluation, timed: bookkeeping for the records, not part of any scheme, so its time is kept
        off the clock (``now``), as the virtual clock does not count it either. Workers still late from this
        iteration run on meanwhile."""
        tick = time.perf_counter()
        result = super().evaluate(*args)
        self.evaluation_s = time.perf_counter() - tick
        self.off_clock += self.evaluation_s
        return result

    # --- shutdown -------------------------------------------------------------------------------------------
    def shutdown(self) -> list[int]:
        """STOP every worker; wait up to ``grace`` s for ACKs; return the workers that never answered."""
        stop = np.zeros(1)
        acks = [np.zeros(1) for _ in range(self.n)]
        stops = [self.comm.Isend(stop, dest=i + 1, tag=P.CTRL_TAG) for i in range(self.n)]
        self._ring(range(self.n))
        ack_reqs = [self.comm.Irecv(acks[i], source=i + 1, tag=P.CTRL_TAG) for i in range(self.n)]
        limit = time.perf_counter() + self.options.grace
        acked = np.zeros(self.n, dtype=bool)
        while not acked.all() and time.perf_counter() < limit:
            for i in MPI.Request.Testsome(ack_reqs) or []:
                acked[i] = True
                self.peers.forget(i + 1)    # done: it may exit
            for i in MPI.Request.Testsome(self.recv_reqs) or []:    # late results: received and dropped
                if self.streaming and not acked[i]:
                    self._post(i)       # a streaming worker may have more in flight before its ACK
            time.sleep(P.POLL)
        for i in np.flatnonzero(acked):
            # every result sent before the ACK has been matched: a pending receive can only be cancelled
            P.cancel_receive(self.recv_reqs[i])
            P.wait_all([self.send_reqs[i], stops[i]], self.options.grace)   # both were received: already complete
        return [int(i) for i in np.flatnonzero(~acked)]

    def summary_extras(self) -> dict[str, Any]:
        return {"master_us_median": float(np.median([r["master_us"] for r in self.records])),
                "stale_messages": int(sum(r["stale"] for r in self.records)),
                "erasures": int(sum(len(r["erasures"]) for r in self.records)),
                "overruns": int(sum(len(r["overruns"]) for r in self.records))}


def _finite(x: np.ndarray) -> bool:
    """All finite? A sum is finite unless some entry is NaN or infinite (or it overflows: then check properly)."""
    with np.errstate(all="ignore"):
        if math.isfinite(float(np.add.reduce(x))):
            return True
    return bool(np.isfinite(x).all())


class _Log:
    def __call__(self, text: str) -> None:
        print(f"mpi_runtime: master (rank 0): {text}", file=sys.stderr, flush=True)
