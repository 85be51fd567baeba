"""The simulated cluster: a scheme, a workload and a delay model on a virtual clock.

Each iteration the master hands every free worker the scheme's plan; worker ``i`` starts it at
``begin_i = max(start, free_i)`` and its message arrives at ``begin_i + P_i(load_i) + C_i``, the delay model's draw
for ``(seed, t, i, load)`` (common random numbers: every scheme given the same seed sees the same world). The
iteration ends at the first arrival after which the scheme's stop rule holds (or at its deadline); the master
combines, updates the model and starts the next iteration at once (zero master overhead: the simulated end time is
also the ideal end time).

``late_workers`` says what a late worker does when the next iteration starts:

- ``"finish"`` (default, what a real cluster and ``mpi_runtime`` do): it completes the work in hand, its message is
  discarded by iteration tag, and only then picks up the newest plan, so it can be late again;
- ``"abandon"``: it drops the old work at once, as in the textbook analysis where every iteration takes
  ``T_(k:n)`` of fresh i.i.d. draws.

Decentralized schemes (DropCompute) run a synchronous All-Reduce step instead: every worker computes micro-batches
until its local limit, the step ends at ``max_i (compute_i + comm_i)``.

With ``workload=None`` only times are simulated (no gradients); schemes that adapt on gradients then keep their
initial state. Records are the flat dicts of DESIGN.md; training runs add ``busy``, each worker's ``[begin, arrival]``
in the iteration (None if it did not take up the plan), from which timelines are drawn.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .delays import make_delay
from .errors import ConfigError, GradcodeError, check_float, check_int
from .schemes import Scheme
from .schemes._base import Combined, Plan
from .workloads import make_workload


class SimulationError(GradcodeError):
    """A run that cannot go on (for example, a scheme that waits for a worker that never answers)."""


@dataclass
class SimResult:
    """Per-iteration ``records``, the run's ``summary`` and the final parameters ``params`` (None: timing only)."""

    records: list[dict[str, Any]]
    summary: dict[str, Any]
    params: np.ndarray | None = None

    def write(self, out: str | Path) -> Path:
        """Write ``records.jsonl`` and ``summary.json`` into the folder ``out``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "records.jsonl", "w") as fh:
            for rec in self.records:
                fh.write(json.dumps(rec, default=_jsonable) + "\n")
        (out / "summary.json").write_text(json.dumps(self.summary, indent=2, default=_jsonable) + "\n")
        return out


def _jsonable(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


LATE_WORKERS = ("finish", "abandon")


def simulate(scheme: Scheme, delay, workload=None, *, iterations: int = 100, seed: int = 0, lr: float | None = None,
             target_loss: float | None = None, time_budget: float | None = None, late_workers: str = "finish",
             loss_every: int = 1, progress: bool = False, on_record=None) -> SimResult:
    """Run ``scheme`` under ``delay`` on ``workload`` (``None``: timing only) for ``iterations`` iterations, or until
    the loss reaches ``target_loss`` or the virtual time ``time_budget`` is spent.

    ``on_record(record)`` is called after every iteration (the harness flushes records to disk with it).
    """
    if not isinstance(scheme, Scheme):
        raise ConfigError(f"simulate needs a scheme object (see gradcode.make_scheme), got {type(scheme).__name__}")
    delay = make_delay(delay)
    workload = None if workload is None else make_workload(workload)
    iterations = check_int("iterations", iterations, low=1)
    seed = check_int("seed", seed, low=0)
    loss_every = check_int("loss_every", loss_every, low=1)
    if late_workers not in LATE_WORKERS:
        raise ConfigError(f"late_workers must be one of {', '.join(LATE_WORKERS)}, got {late_workers!r}")
    if lr is None:
        lr = workload.lr if workload is not None else 0.0
    lr = check_float("lr", lr, low=0.0)
    if target_loss is not None and workload is None:
        raise ConfigError("target_loss needs a workload (timing-only runs have no loss)")
    budget = math.inf if time_budget is None else check_float("time_budget", time_budget, low=0.0, low_open=True)

    scheme.bind(delay=delay)
    scheme.reset()
    if _vectorizable(scheme, workload, late_workers, budget):
        records = _vectorized_timing(scheme, delay, iterations, seed)
        if on_record is not None:
            for rec in records:
                on_record(rec)
        return SimResult(records, summarize(records), params=None)
    run = _Run(scheme, delay, workload, seed, lr, late_workers)
    records: list[dict[str, Any]] = []
    bar = _progress(progress, iterations)
    for t in range(iterations):
        rec = run.step(t, with_loss=evaluates_loss(t, iterations, loss_every))
        records.append(rec)
        if on_record is not None:
            on_record(rec)
        if bar is not None:
            bar.update(1)
        if run_finished(rec, target_loss, budget):
            break
    if bar is not None:
        bar.close()
    summary = summarize(records, target_loss=target_loss)
    return SimResult(records, summary, params=run.w)


def evaluates_loss(t: int, iterations: int, loss_every: int) -> bool:
    """Is the full loss evaluated after iteration ``t``? Every ``loss_every``-th iteration and the last (both
    clusters use this rule, so their records have losses at the same iterations)."""
    return t % loss_every == 0 or t == iterations - 1


def run_finished(rec: dict[str, Any], target_loss: float | None, time_budget: float | None) -> bool:
    """Does the run stop after this record: time budget spent, or target loss reached? (Both clusters.)"""
    if time_budget is not None and rec["end"] >= time_budget:
        return True
    return target_loss is not None and rec["loss"] is not None and rec["loss"] <= target_loss


def relative_error(estimate: np.ndarray, truth: np.ndarray) -> float:
    """``||estimate - truth|| / ||truth||`` (0 when the truth is 0): the records' ``grad_error``."""
    norm = np.linalg.norm(truth)
    return float(np.linalg.norm(estimate - truth) / norm) if norm > 0 else 0.0


def _progress(enabled: bool, total: int):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="it", leave=False)


def _vectorizable(scheme: Scheme, workload, late_workers: str, budget: float) -> bool:
    """Timing only, fresh draws every iteration, a fixed "first m arrivals" rule: one vectorised pass suffices."""
    if workload is not None or late_workers != "abandon" or scheme.decentralized or math.isfinite(budget):
        return False
    plan = scheme.plan(0)
    return scheme.stop_count() is not None and not math.isfinite(plan.deadline)


def _vectorized_timing(scheme: Scheme, delay, iterations: int, seed: int, chunk: int = 256) -> list[dict]:
    """Iteration ``t`` lasts ``T_(m:n)`` of its own draws; iterations are sampled and sorted ``chunk`` at a time.

    Timing-only records (here and in :class:`_Run`) keep ``responders`` and ``load`` as numpy arrays (written out as
    lists), since at ``n = 10,000`` Python lists would cost more than the simulation itself.
    """
    plan = scheme.plan(0)
    m, n = scheme.stop_count(), scheme.n
    state = scheme.record()
    records: list[dict] = []
    clock = 0.0
    computed = float(plan.load.sum())
    for t0 in range(0, iterations, chunk):
        ts = np.arange(t0, min(t0 + chunk, iterations))
        compute, comm = delay.sample(seed, ts, n, plan.load)
        T = compute + comm
        order = np.argsort(T, axis=1, kind="stable")[:, :m]
        kth = np.take_along_axis(T, order[:, -1:], axis=1)[:, 0]
        if not np.all(np.isfinite(kth)):
            raise SimulationError(f"{scheme.name}: the stop rule cannot be met; some workers never answer")
        ends = clock + np.cumsum(kth)
        starts = np.concatenate(([clock], ends[:-1]))
        for j, t in enumerate(ts):
            rec = _record(scheme, int(t), float(starts[j]), float(ends[j]), order[j], plan.load, None,
                          messages=n, computed=computed, wasted=computed - float(plan.load[order[j]].sum()),
                          as_lists=False)
            rec.update(state)
            rec["loss"] = None
            rec["grad_error"] = None
            records.append(rec)
        clock = float(ends[-1])
    return records


class _Run:
    """The state of one simulated run: the clock, when each worker is free, the model."""

    def __init__(self, scheme: Scheme, delay, workload, seed: int, lr: float, late_workers: str):
        self.scheme, self.delay, self.workload = scheme, delay, workload
        self.seed, self.lr, self.late = seed, lr, late_workers
        self.n = scheme.n
        self.clock = 0.0
        self.free = np.zeros(self.n)
        self.w = None if workload is None else np.array(workload.init_params(), dtype=float)
        self._grad_error: float | None = None

    def step(self, t: int, with_loss: bool) -> dict[str, Any]:
        plan = self.scheme.plan(t)
        if plan.micro_batches:
            rec = self._allreduce_step(t, plan)
        else:
            rec = self._master_step(t, plan)
        rec.update(self.scheme.record())
        rec["loss"] = float(self.workload.loss(self.w)) if (self.workload is not None and with_loss) else None
        return rec

    # --- master/worker schemes -------------------------------------------------------------------------------
    def _master_step(self, t: int, plan: Plan) -> dict[str, Any]:
        start = self.clock
        compute, comm = self.delay.sample(self.seed, t, self.n, plan.load)
        begin = np.maximum(start, self.free) if self.late == "finish" else np.full(self.n, start)
        arrive = begin + compute[0] + comm[0]
        order = np.argsort(arrive, kind="stable")
        order = order[np.isfinite(arrive[order])]
        m = self._stop(order, arrive, start, plan)
        responders = order[:m]
        end = float(arrive[responders[-1]])
        started = begin < end
        if self.late == "finish":
            self.free = np.where(started, arrive, self.free)
        self.clock = end

        combined = self._combine(t, plan, responders) if self.workload is not None else None
        used = float(plan.load[responders].sum())
        computed = float(plan.load[started].sum())
        rec = _record(self.scheme, t, start, end, responders, plan.load, combined,
                      messages=int(started.sum()), computed=computed, wasted=computed - used,
                      as_lists=self.workload is not None)
        rec["grad_error"] = self._grad_error if combined is not None else None
        if self.workload is not None:   # per-worker spans for timelines (skipped in timing-only runs: n may be huge)
            rec["busy"] = _spans(begin, arrive, started)
        if combined is not None:
            self.scheme.adapt(t, combined, elapsed=end - start)
        return rec

    def _stop(self, order: np.ndarray, arrive: np.ndarray, start: float, plan: Plan) -> int:
        """How many first arrivals end the iteration."""
        m = self.scheme.stop_index(order)
        if math.isfinite(plan.deadline):
            in_time = int(np.searchsorted(arrive[order], start + plan.deadline, side="right"))
            m = max(1, min(m, in_time)) if m is not None else max(1, in_time)
            m = min(m, len(order))
        if m is None or m == 0:
            if len(order) and getattr(self.scheme, "exact", False):
                return len(order)  # all that ever answer: the decoder falls back (auto) and reports it
            silent = sorted(set(range(self.n)) - set(order.tolist()))
            raise SimulationError(
                f"{self.scheme.name}: the stop rule cannot be met; workers {silent} never answer (infinite delay)"
            )
        return m

    def _combine(self, t: int, plan: Plan, responders: np.ndarray) -> Combined:
        P = self.workload.gradients(self.w, t, range(plan.k_parts), plan.k_parts, plan.batch)
        messages = self.scheme.messages(P, responders, plan)
        combined = self.scheme.combine(messages, responders.tolist(), plan)
        self._apply(combined.gradient, P.sum(axis=0))
        return combined

    def _apply(self, estimate: np.ndarray, truth: np.ndarray) -> None:
        self._grad_error = relative_error(estimate, truth)
        self.w = self.w - self.lr * estimate

    # --- decentralized (All-Reduce) schemes ------------------------------------------------------------------
    def _allreduce_step(self, t: int, plan: Plan) -> dict[str, Any]:
        start = self.clock
        micro, comm = self.scheme.micro_times(self.delay, self.seed, t)
        counts, ctime = self.scheme.local_stop(micro, plan.tau)
        if not np.all(np.isfinite(ctime + comm)):
            silent = np.flatnonzero(~np.isfinite(ctime + comm)).tolist()
            raise SimulationError(f"{self.scheme.name}: All-Reduce cannot finish; workers {silent} never answer")
        end = start + float(np.max(ctime + comm))
        self.clock = end
        combined = None
        if self.workload is not None:
            M = plan.micro_batches
            P = self.workload.gradients(self.w, t, range(plan.k_parts), plan.k_parts, plan.batch)
            done = (np.arange(M)[None, :] < counts[:, None]).reshape(-1)
            combined = self.scheme.combine_sum(P[done].sum(axis=0), int(counts.sum()), plan)
            self._apply(combined.gradient, P.sum(axis=0))
        self.scheme.observe(t, micro, comm)
        responders = np.arange(self.n)
        units = counts * (plan.load / plan.micro_batches)   # load units computed by each worker
        rec = _record(self.scheme, t, start, end, responders, units, combined,
                      messages=self.n, computed=float(units.sum()), wasted=0.0, as_lists=self.workload is not None)
        rec["drop_rate"] = 1.0 - float(counts.sum()) / (self.n * plan.micro_batches)
        if self.workload is not None:
            rec["busy"] = _spans(np.full(self.n, start), start + ctime, np.ones(self.n, dtype=bool))
        rec["grad_error"] = self._grad_error if combined is not None else None
        return rec


def _spans(begin: np.ndarray, arrive: np.ndarray, started: np.ndarray) -> list:
    """``[begin, arrival]`` of every worker that took up this iteration's plan (None for the others)."""
    return [[float(b), float(a)] if ok and math.isfinite(a) else None
            for b, a, ok in zip(begin, arrive, started, strict=True)]


def _record(scheme: Scheme, t: int, start: float, end: float, responders, load, combined: Combined | None,
            *, messages: int, computed: float, wasted: float, as_lists: bool = True) -> dict[str, Any]:
    return {
        "scheme": scheme.name,
        "iteration": t,
        "start": start,
        "end": end,
        "ideal_end": end,   # a virtual clock has no overhead
        "responders": [int(i) for i in responders] if as_lists else responders,
        "load": [float(x) for x in load] if as_lists else load,
        "messages": messages,
        "computed": computed,
        "wasted": wasted,
        "residual": None if combined is None else float(combined.residual),
        "method": None if combined is None else combined.method,
    }


def summarize(records: list[dict[str, Any]], *, target_loss: float | None = None) -> dict[str, Any]:
    """Aggregate a run's records (never recomputes what the cluster measured)."""
    if not records:
        return {"iterations": 0}
    durations = np.array([r["end"] - r["start"] for r in records])
    losses = [r["loss"] for r in records if r.get("loss") is not None]
    residuals = [r["residual"] for r in records if r.get("residual") is not None]
    summary: dict[str, Any] = {
        "scheme": records[0]["scheme"],
        "iterations": len(records),
        "total_time": float(records[-1]["end"] - records[0]["start"]),
        "ideal_total_time": float(sum(r["ideal_end"] - r["start"] for r in records)),
        "mean_iteration_time": float(durations.mean()),
        "p50_iteration_time": float(np.percentile(durations, 50)),
        "p95_iteration_time": float(np.percentile(durations, 95)),
        "computed": float(sum(r["computed"] for r in records)),
        "wasted": float(sum(r["wasted"] for r in records)),
        "messages": int(sum(r["messages"] for r in records)),
        "mean_residual": float(np.mean(residuals)) if residuals else None,
        "final_loss": losses[-1] if losses else None,
    }
    ideal = summary["ideal_total_time"]
    # measured over ideal: 1 on the virtual clock; on MPI, the runtime's overhead
    summary["overhead_ratio"] = summary["total_time"] / ideal if ideal > 0 else None
    summary["median_overhead_ratio"] = float(np.median(
        [(r["end"] - r["start"]) / max(r["ideal_end"] - r["start"], 1e-12) for r in records]))
    if target_loss is not None:
        hit = next((r["end"] for r in records if r.get("loss") is not None and r["loss"] <= target_loss), None)
        summary["target_loss"] = target_loss
        summary["time_to_target"] = hit
    return summary
