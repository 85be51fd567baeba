"""Decentralized schemes (DropCompute): no master in the data path, an All-Reduce per step.

Every rank holds the model and the scheme. Worker ``i`` (rank ``i + 1``) runs its ``M`` micro-batches (micro-batch
``m`` is partition ``i*M + m`` of ``n*M``), each a real gradient followed by sleeping out the rest of its emulated
time, the draws of ``scheme.micro_times`` (the simulator's, common random numbers) times ``time_scale``. The
schedule is absolute: every rank starts step ``t + 1`` at the same wall-clock instant, the moment the last worker
finished step ``t`` (exchanged in the All-Gather), and micro-batch ``m`` ends at ``begin + sum of the emulated
times before it``, so real compute and the collectives' latency count toward the emulated times instead of
piling up (an overrun is flagged when the real work alone is longer). It
checks its step timer exactly where the scheme says (``scheme.check``): ``official``, before each micro-batch and
again between its forward (``forward_share`` of it) and backward pass, a micro-batch interrupted there being
wasted; ``before_microbatch``; ``idealized``, stopping exactly at ``tau``. Then it waits out its emulated
communication time and joins a non-blocking All-Reduce (``Iallreduce``, polled) of ``[gradient sum, micro-batches
computed]``; every rank applies ``scheme.combine_sum`` and ``w -= lr * g``.

The automatic ``tau``: each step every rank contributes a row ``[computed, compute time, overrun, non-finite,
micro-batch times (M), communication]`` to an ``Iallgather``, so every rank calls ``scheme.observe(t, micro, comm)``
with the same data and chooses the same ``tau``. Rank 0 takes part with zero contribution and writes the records
(``end`` is when its All-Reduce and All-Gather completed; ``ideal_end`` = ``start + max_i(compute_i + comm_i)`` of
the simulator's arithmetic on the same draws). A worker whose gradient sum is not finite contributes nothing that
step (an erasure, logged by rank 0). Floating-point note: MPI does not promise bit-identical All-Reduce results on
every rank, so the models of different ranks may drift apart by round-off; rank 0's is the one recorded.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from gradcode.sim import _jsonable, relative_error, summarize

from . import protocol as P
from .config import RunConfig
from .faults import Faults
from .protocol import RunFailure
from .worker import _hang

INFO = 5   # computed, compute time (model units), overrun, non-finite, wall time when done (time.time)


class Decentralized:
    def __init__(self, comm: MPI.Comm, cfg: RunConfig, scheme, delay, workload, out: Path | None):
        self.comm, self.cfg, self.scheme, self.delay, self.workload = comm, cfg, scheme, delay, workload
        self.rank = comm.Get_rank()
        self.i = self.rank - 1
        self.n = cfg.workers
        self.M = scheme.M
        self.scale = cfg.time_scale
        self.lr = workload.lr if cfg.lr is None else cfg.lr
        self.w = np.array(workload.init_params(), dtype=float)
        d = workload.dim
        self.d = d
        self.send = np.zeros(d + 1)
        self.total = np.zeros(d + 1)
        self.row = np.zeros(INFO + self.M + 1)
        self.rows = np.zeros((comm.Get_size(), INFO + self.M + 1))
        self.faults = Faults(self.rank)
        self.out = out
        self.records: list[dict] = []

    def run(self) -> int:
        fh = None
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            fh = open(self.out / "records.jsonl", "w")
        P.wait(self.comm.Ibarrier())
        self.t0 = time.perf_counter()
        self.step_begin = time.time()
        self.next_start = 0.0
        error = None
        try:
            for t in range(self.cfg.iterations):
                if self.step(t, fh):
                    break
        except RunFailure as err:
            error = str(err)
        finally:
            if fh is not None:
                fh.close()
        if self.rank == 0:
            np.save(self.out / "params.npy", self.w)
            self.write_summary(error)
        if error is not None:
            raise RunFailure(error)
        return 0

    def now(self) -> float:
        return (time.perf_counter() - self.t0) / self.scale

    def step(self, t: int, fh) -> bool:
        """One step; True if the run should stop (target loss / time budget, decided by rank 0)."""
        plan = self.scheme.plan(t)
        start = self.next_start
        self.faults.maybe_crash(t)
        micro, comm = self.scheme.micro_times(self.delay, self.cfg.seed, t)
        silent = np.flatnonzero(~np.isfinite(micro.sum(axis=1) + comm)).tolist()
        if silent:
            # the simulator's verdict, reached by every rank from the same draws: fail now rather than hang
            raise RunFailure(f"step {t}: {self.scheme.name}: All-Reduce cannot finish; workers {silent} "
                             f"(ranks {[i + 1 for i in silent]}) never answer (infinite delay)")
        self.send[:] = 0.0
        self.row[:] = 0.0
        if self.rank > 0:
            self._compute(t, plan, micro[self.i], float(comm[self.i]))
        self._wait(self.comm.Iallreduce(self.send, self.total, op=MPI.SUM), t)
        combined = self.scheme.combine_sum(self.total[:self.d], int(round(self.total[self.d])), plan)
        grad_error = self._grad_error(t, plan, combined.gradient) if self.rank == 0 else None
        self.w -= self.lr * combined.gradient
        self._wait(self.comm.Iallgather(self.row, self.rows), t)
        end = self.next_start = self.now()
        workers = self.rows[1:]
        # every rank starts the next step's emulated schedule at the same instant: when the last worker was done
        self.step_begin = max(float(workers[:, 4].max()), self.step_begin)
        self.scheme.observe(t, workers[:, INFO:INFO + self.M], workers[:, INFO + self.M])
        stop = False
        if self.rank == 0:
            rec = self._record(t, plan, start, end, micro, comm, combined, grad_error)
            fh.write(json.dumps(rec, default=_jsonable) + "\n")
            fh.flush()
            stop = self.cfg.finished(rec)
        if self.cfg.target_loss is not None or self.cfg.time_budget is not None:
            flag = np.array([1.0 if stop else 0.0])
            self._wait(self.comm.Ibcast(flag, root=0), t)
            stop = bool(flag[0])
        return stop

    def _wait(self, request: MPI.Request, t: int) -> None:
        try:
            P.wait(request, timeout=self.cfg.grace)
        except TimeoutError:
            raise RunFailure(f"step {t}: a collective did not complete within [run] grace = {self.cfg.grace:g} s; "
                             "some rank stopped answering") from None

    # --- one worker's micro-batches -------------------------------------------------------------------------
    def _compute(self, t: int, plan, micro: np.ndarray, comm: float) -> None:
        """Run the micro-batches on the emulated schedule: micro-batch ``m`` spans ``[begin + e_m, begin + e_m +
        micro[m]]`` (``e_m`` the emulated time of those before it), from the step's common start ``begin``; real
        compute and the collectives' own time count toward it instead of adding to it (an overrun is flagged)."""
        if not (np.all(np.isfinite(micro)) and math.isfinite(comm)):
            _hang()
        begin = self.step_begin
        tau = plan.tau * self.scale
        elapsed, count, overrun = 0.0, 0, False     # emulated seconds since begin
        for m in range(self.M):
            if elapsed >= tau and self.scheme.check != "idealized":
                break
            part = self.i * self.M + m
            g = self.workload.gradients(self.w, t, [part], self.n * self.M, plan.batch)[0]
            length = micro[m] * self.scale
            overrun |= time.time() > begin + elapsed + length
            stop = self._stop_inside(elapsed, length, tau)
            if stop is not None:
                elapsed = stop
                P.sleep_until(begin + elapsed)
                break
            elapsed += length
            P.sleep_until(begin + elapsed)
            self.send[:self.d] += g
            count += 1
        P.sleep_until(begin + elapsed + comm * self.scale)
        self.faults.maybe_poison(t, self.send[:self.d])
        bad = not np.all(np.isfinite(self.send[:self.d]))
        if bad:
            self.send[:] = 0.0    # an erasure: contribute nothing this step
            count = 0
        self.send[self.d] = count
        self.row[:INFO] = (count, elapsed / self.scale, float(overrun), float(bad), time.time())
        self.row[INFO:INFO + self.M] = micro
        self.row[INFO + self.M] = comm

    def _stop_inside(self, elapsed: float, length: float, tau: float) -> float | None:
        """Where the timer stops a micro-batch that starts at ``elapsed`` (its work is then dropped), or None if it
        completes: ``idealized`` stops exactly at ``tau``; ``official`` checks after the forward pass."""
        check = self.scheme.check
        if check == "idealized" and elapsed + length > tau:
            return tau
        if check == "official" and elapsed + self.scheme.forward_share * length >= tau:
            return elapsed + self.scheme.forward_share * length   # interrupted after its forward: wasted
        return None

    # --- rank 0 ---------------------------------------------------------------------------------------------
    def _grad_error(self, t: int, plan, g: np.ndarray) -> float | None:
        if not self.cfg.evaluates_loss(t):
            return None
        k = plan.k_parts
        return relative_error(g, self.workload.gradients(self.w, t, range(k), k, plan.batch).sum(axis=0))

    def _record(self, t, plan, start, end, micro, comm, combined, grad_error) -> dict:
        workers = self.rows[1:]
        counts = workers[:, 0]
        _, ctime = self.scheme.local_stop(micro, plan.tau)
        erasures = [int(i) for i in np.flatnonzero(workers[:, 3])]
        for i in erasures:
            print(f"mpi_runtime: rank 0: step {t}: worker {i} (rank {i + 1}) computed non-finite values; "
                  "treated as an erasure", file=sys.stderr, flush=True)
        rec = {
            "scheme": self.scheme.name, "iteration": t, "start": start, "end": end,
            "ideal_end": start + float(np.max(ctime + comm)),
            "responders": list(range(self.n)), "load": [float(c) * self.scheme.micro_load for c in counts],
            "messages": self.n, "computed": float(counts.sum()) * self.scheme.micro_load, "wasted": 0.0,
            "residual": float(combined.residual), "method": combined.method,
            "drop_rate": 1.0 - float(counts.sum()) / (self.n * plan.micro_batches),
            "grad_error": grad_error,
        }
        rec.update(self.scheme.record())
        rec["loss"] = float(self.workload.loss(self.w)) if self.cfg.evaluates_loss(t) else None
        rec.update(erasures=erasures, overruns=[int(i) for i in np.flatnonzero(workers[:, 2])],
                   compute_times=[float(x) for x in workers[:, 1]])
        self.records.append(rec)
        return rec

    def write_summary(self, error: str | None = None) -> None:
        summary = summarize(self.records)
        if self.records:
            summary["erasures"] = int(sum(len(r["erasures"]) for r in self.records))
            summary["overruns"] = int(sum(len(r["overruns"]) for r in self.records))
        summary.update(cluster="mpi", time_scale=self.scale,
                       time_unit="model time units (wall seconds / time_scale)",
                       unresponsive_workers=[], unresponsive_ranks=[])
        if error is not None:
            summary["error"] = error
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2, default=_jsonable) + "\n")
