"""Decentralized schemes (DropCompute): no master in the data path, an All-Reduce per step.

Every rank holds the model and the scheme. Each step every rank draws the chunk times of all workers
(``scheme.micro_times``, the simulator's draws: common random numbers) and asks the scheme for its
:class:`~gradcode.schemes._base.Schedule`; worker ``i`` (rank ``i + 1``) executes its row: for each chunk it starts, a
real gradient of that chunk's partition, then sleeping until the chunk's emulated end (times ``time_scale``); the
gradients of the chunks it keeps are summed, an interrupted chunk's work is dropped. The local rule (DropCompute's
timer checks) lives in the scheme alone: this module never reads it. The schedule is absolute: every rank starts
step ``t + 1`` at the same wall-clock instant, the moment the last worker finished step ``t`` (exchanged in the
All-Gather), and chunk ends count from there, so real compute and the collectives' latency count toward the emulated
times instead of piling up (an overrun is flagged when the real work alone is longer). Then the worker waits out
its emulated communication time and joins the step's exchange (``exchange.py``): the All-Reduce of ``[gradient sum,
chunks kept]`` (through shared memory on one node, rank 0 adding the contributions as they land; else MPI's
``Iallreduce``); every rank applies ``scheme.combine_sum`` and ``w -= lr * g``, and calls ``scheme.observe`` with the
step's times (the same on every rank, so an automatic ``tau`` is the same everywhere).

Each step every rank contributes a row ``[kept, compute time, overrun, non-finite, wall time when done, real
compute seconds, seconds to joining]`` to the same exchange (an All-Gather); the last two give the records'
per-worker times.
Rank 0 takes part with zero contribution and writes the records (``end`` is when its All-Reduce and All-Gather
completed; ``ideal_end = start + max_i(compute_i + comm_i)`` of the same schedule); its evaluation for the records
is off the clock, and every rank begins the next step once it is done (:meth:`Decentralized.finished`). A worker whose
gradient sum is not finite contributes nothing that step (an erasure, logged by rank 0). Floating-point note: MPI
does not promise bit-identical All-Reduce results on every rank, so across hosts the models of different ranks may
drift apart by round-off (on one node the shared-memory sum is the same everywhere); rank 0's is the one recorded.
The loop, the update, the evaluation and the record are :class:`gradcode.clusters.driver.Driver`'s. Every collective is
waited for without spinning and bounded (until the step's emulated end plus ``[run] grace``); rank 0 then names the
ranks that stopped answering (``peers.py``).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from gradcode.clusters.driver import Driver, SimulationError, all_reduce_schedule, evaluates_loss
from gradcode.clusters.records import RecordWriter, worker_times, write_summary
from gradcode.schemes._base import Schedule

from . import protocol as P
from .config import RunConfig
from .exchange import open_exchange
from .faults import Faults
from .peers import MasterLost, Peers, who
from .protocol import RunFailure

INFO = 7   # kept, compute time (model units), overrun, non-finite, wall time when done (time.time), real compute
#           seconds, seconds from this rank's start of the step to joining the All-Reduce (its own clock)


# said when a rank dies: measured (2026-12-08), the PyPI Open MPI 5.0.11 wheel under `mpirun --with-ft ulfm` reports the
# death to the survivors' Allreduce (MPI_ERR_PROC_FAILED) within a second, and Comm.Shrink gives them a communicator
# on which an Allreduce completes; MPICH's mpi4py stand-ins cannot (docs/mpi.md#workers-that-die)
ULFM_NOTE = ("; an All-Reduce needs every rank and MPICH cannot shrink a communicator: the run ends here (Open MPI "
             "with ULFM, mpirun --with-ft ulfm, could go on with the survivors; this runtime does not do that yet)")


class Decentralized(Driver):
    def __init__(self, comm: MPI.Comm, cfg: RunConfig, scheme, delay, workload, out: Path | None, peers: Peers,
                 faults: Faults):
        super().__init__(scheme, workload, cfg.options)
        self.comm, self.cfg, self.delay = comm, cfg, delay
        self.peers, self.faults = peers, faults
        peers.note = ULFM_NOTE
        self.rank = comm.Get_rank()
        self.recording = self.rank == 0
        self.i = self.rank - 1
        self.scale = cfg.options.time_scale
        self.resolution = P.RESOLUTION / self.scale   # no overhead ratio over ideal times below (clusters/records.py)
        self.d = workload.dim
        # the step's collectives, through shared memory on one node (exchange.py); collective to set up
        self.exchange = open_exchange(comm, self.d + 1, INFO,
                                      lambda: peers.checkpoint("shared memory", self.options.startup_timeout),
                                      peers.local)
        ex = self.exchange
        self.send, self.row, self.rows = ex.send, ex.row, ex.rows    # filled / read in place; the sum: ex.total
        self.out = out
        self.writer: RecordWriter | None = None
        self.t = 0
        self.off_clock = 0.0   # seconds rank 0 spent in evaluate: not counted by now()
        self.due = 0.0     # wall time (time.time) at which the current step's schedule ends

    def run(self) -> bool:
        """The run (False: nothing is left to abort). A failure is raised (``__main__`` then calls
        :meth:`write_failure` on rank 0); the records so far are on disk."""
        if self.recording:
            self.out.mkdir(parents=True, exist_ok=True)
        self.faults.maybe_crash("warmup")
        self.peers.checkpoint("clock start", self.cfg.options.startup_timeout)
        if self.recording:
            self.writer = RecordWriter(self.out / "records.jsonl")
        self.t0 = time.perf_counter()
        self.step_begin = time.time()
        self.next_start = 0.0
        try:
            super().run()
        finally:
            if self.writer is not None:
                self.writer.close()
        self._write_summary(None)
        self.peers.checkpoint("shutdown", self.cfg.options.grace)
        self.exchange.close()      # collective: every rank got here
        return False

    def write_failure(self, error: str) -> None:
        """The summary of a run that failed at any point, with the error (rank 0)."""
        self._write_summary(error)

    def _write_summary(self, error: str | None) -> None:
        if self.recording:
            np.save(self.out / "params.npy", self.w)
            write_summary(self.out, {**self.summary(), **self.cfg.summary_fields([], error)})

    def now(self) -> float:
        """Model time units since the run start, without rank 0's evaluations (:meth:`evaluate`)."""
        return (time.perf_counter() - self.t0 - self.off_clock) / self.scale

    def evaluate(self, *args):
        """The driver's evaluation for the records (rank 0), timed and kept off the clock (``now``), as the master
        and the virtual clock keep it: every rank waits for it before the next step (:meth:`finished`)."""
        tick = time.perf_counter()
        result = super().evaluate(*args)
        self.off_clock += time.perf_counter() - tick
        return result

    def evaluated(self, t: int) -> bool:
        """Does rank 0 evaluate after step ``t`` (the loss or the held-out metrics: :meth:`Driver.evaluate`)? The
        same answer on every rank."""
        return self.w is not None and (evaluates_loss(t, self.iterations, self.loss_every)
                                       or (self.heldout and evaluates_loss(t, self.iterations, self.eval_every)))

    def emit(self, rec: dict[str, Any]) -> None:
        self.writer.write(rec)

    def finished(self, rec: dict[str, Any] | None) -> bool:
        """Rank 0 decides (target loss / time budget) and tells every rank. After a step that rank 0 evaluated it
        also tells them when the next step begins: once the evaluation is done (wall time), so that it delays no
        step. (Without this every rank waited for rank 0 in the next All-Reduce, the evaluation on the clock:
        measured 0.7-3.2 s a step at d = 1e6 on 3 emulated hosts, against 0.2-0.5 s for the All-Reduce.)"""
        stop = super().finished(rec)
        decides = self.target_loss is not None or self.time_budget is not None or self.target_accuracy is not None
        if decides or self.evaluated(self.t):
            flag = np.array([1.0 if stop else 0.0, max(self.step_begin, time.time())])
            self.due = time.time()
            self._wait(self.comm.Ibcast(flag, root=0).Test, "the stop decision and the next step's start (Ibcast)")
            stop, self.step_begin = bool(flag[0]), float(flag[1])
        return stop

    def summary_extras(self) -> dict[str, Any]:
        return {"erasures": int(sum(len(r["erasures"]) for r in self.records)),
                "overruns": int(sum(len(r["overruns"]) for r in self.records))}

    def all_reduce(self, t: int, plan) -> dict[str, Any] | None:
        self.t = t
        began = time.time()      # this rank's start of the step (its previous collectives are done)
        start = self.next_start
        self.faults.maybe_crash(t)
        try:
            # the simulator's verdict, reached by every rank from the same draws: fail now rather than hang
            micro, schedule = all_reduce_schedule(self.scheme, self.delay, self.cfg.options.seed, t, plan,
                                                  self.links)
        except SimulationError as err:
            raise RunFailure(f"step {t}: {err} (infinite delay)") from None
        self.send[:] = 0.0
        self.row[:] = 0.0
        self.due = self.step_begin + schedule.duration * self.scale
        if self.rank > 0:
            self._compute(t, plan, schedule, began)
        self.exchange.exchange(self._wait)     # the All-Reduce of send into total, the All-Gather of row into rows
        total = self.exchange.total            # valid until the next step's exchange
        combined = self.scheme.combine_sum(total[:self.d], int(round(total[self.d])), plan)
        end = self.next_start = self.now()
        workers = self.rows[1:]
        # every rank starts the next step's emulated schedule at the same instant: when the last worker was done
        self.step_begin = max(float(workers[:, 4].max()), self.step_begin)
        measured = self._measured(t, workers, start, end, schedule) if self.recording else {}
        return self.conclude_all_reduce(t, plan, start, end, ideal_end=start + schedule.duration,
                                        schedule=dataclasses.replace(schedule, kept=workers[:, 0]), micro=micro,
                                        combined=combined, **measured)

    def _wait(self, done, what: str, idle=None) -> None:
        """Wait until ``done()`` (a request's ``Test``, or exchange.py's flags) holds, bounded: every rank may be busy
        until the step's emulated end, then ``grace`` s
        more. Rank 0 then pings the others and names those that do not answer (a rank answers while it waits in
        the collective, see :meth:`Peers.check`); the other ranks wait longer, so that rank 0's naming comes first,
        then name rank 0. A rank that died on this host is named at once."""
        grace = self.cfg.options.grace
        limit = max(self.due - time.time(), 0.0) + grace + (0 if self.rank == 0 else 2 * grace + 1)
        try:
            P.wait_for(done, timeout=limit, watch=self.peers.check, idle=idle)
            return
        except TimeoutError:
            pass
        where = (f"step {self.t}: {what} did not complete within {limit:g} s ([run] grace = {grace:g} s after the "
                 "step's emulated end)")
        if self.rank > 0:
            raise MasterLost(f"{where}; {who([0])} named no rank that stopped{self.peers.states([0])}")
        silent = self.peers.ping(list(range(1, self.comm.Get_size())), grace)
        if not silent:
            raise RunFailure(f"{where}, though every rank answers")
        raise RunFailure(f"{where}: {who(silent)} stopped answering{self.peers.states(silent)}")

    # --- one worker's chunks --------------------------------------------------------------------------------
    def _compute(self, t: int, plan, schedule: Schedule, began: float) -> None:
        """Run this worker's row of the schedule from the step's common start ``begin``: each chunk it starts is a
        real gradient, then a sleep until the chunk's emulated end (real compute and the collectives' own time
        count toward it instead of adding to it; an overrun is flagged); only the kept chunks are summed. Under
        ``[run] inject = "add"`` every emulated time comes after the real compute instead (shifted by it)."""
        i, begin = self.i, self.step_begin
        overrun = False
        real = 0.0
        for m in range(int(schedule.started[i])):
            tick = time.time()
            g = self.workload.gradients(self.w, t, [plan.parts[i][m]], plan.n_parts, plan.batch)[0]
            real += time.time() - tick
            if self.cfg.options.inject == "add":
                begin = self.step_begin + real
            until = begin + schedule.chunk_end[i, m] * self.scale
            emulated = schedule.chunk_end[i, m] - (schedule.chunk_end[i, m - 1] if m else 0.0)
            overrun |= P.overran(emulated * self.scale, until, self.cfg.options.inject == "add")
            P.sleep_until(until)
            if m < schedule.kept[i]:
                self.send[:self.d] += g
        P.sleep_until(begin + schedule.ready[i] * self.scale)
        self.faults.maybe_poison(t, self.send[:self.d])
        bad = not np.all(np.isfinite(self.send[:self.d]))
        kept = 0 if bad else int(schedule.kept[i])
        if bad:
            self.send[:] = 0.0    # an erasure: contribute nothing this step
        self.send[self.d] = kept
        done = time.time()
        self.row[:] = (kept, schedule.stop[i], float(overrun), float(bad), done, real, done - began)

    # --- rank 0 ---------------------------------------------------------------------------------------------
    def _measured(self, t: int, workers: np.ndarray, start: float, end: float, schedule: Schedule
                  ) -> dict[str, Any]:
        """What the workers reported, for the record: erasures (logged), overruns, compute times, and the
        per-worker times (:func:`gradcode.clusters.records.worker_times`): every worker takes the step up at its start
        (the previous All-Reduce's result is its plan), joins the All-Reduce after its own measured duration
        (its clock's difference, no offset between ranks; at most the step's end), and its contribution is in at
        the end, when rank 0's collectives complete."""
        erasures = [int(i) for i in np.flatnonzero(workers[:, 3])]
        # a worker may take the step up a little before rank 0 does (the exchange releases every rank at once and
        # rank 0 may be descheduled): its durations are clipped to rank 0's step
        joined = np.minimum(workers[:, 6] / self.scale, end - start)
        for i in erasures:
            print(f"mpi_runtime: rank 0: step {t}: worker {i} (rank {i + 1}) computed non-finite values; "
                  "treated as an erasure", file=sys.stderr, flush=True)
        return {"erasures": erasures, "overruns": [int(i) for i in np.flatnonzero(workers[:, 2])],
                "compute_times": [float(x) for x in workers[:, 1]],
                **worker_times(start, plan_received=np.full(self.n, start),
                               compute=np.minimum(workers[:, 5] / self.scale, joined), sent=start + joined,
                               arrived=np.full(self.n, end),
                               delay=schedule.ready if self.delay.injects else None)}
