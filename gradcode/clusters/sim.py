"""The simulated cluster: a scheme, a workload and a delay model on a virtual clock.

Each iteration the master hands every free worker the scheme's plan; worker ``i`` starts it at
``begin_i = max(start, free_i)`` and its message arrives at ``begin_i + P_i(load_i) + C_i``, the delay model's draw
for ``(seed, t, i, load)`` (common random numbers: every scheme given the same seed sees the same world). The
iteration ends at the first arrival after which the scheme's stop rule holds (or at its deadline); the master
combines, updates the model and starts the next iteration at once (zero master overhead: the simulated end time is
also the ideal end time).

``late_workers`` says what a late worker does when the next iteration starts (``docs/design.md#chunked-workers``):

- ``"finish"`` (default, what a real cluster and ``mpi_runtime`` do): it completes the work in hand, its message is
  discarded by iteration tag, and only then picks up the newest plan, so it can be late again;
- ``"abandon"``: it drops the old work at once, as in the textbook analysis where every iteration takes
  ``T_(k:n)`` of fresh i.i.d. draws; a worker of a ``chunked`` plan (interruptible at chunk boundaries) first
  finishes the chunk in progress, then takes the newest plan;
- ``"between_chunks"``: it drops the old work where a real worker can look up from it: a chunked plan after the
  chunk in progress (as ``abandon``), an unchunked plan, one piece of work, not at all (as ``finish``). The rule to
  compare chunked and unchunked schemes on (``docs/guide.md#partial-work-chunked-workers-and-partial_coded``).

Work is counted as done: a worker that abandons has computed the share of its load it got through (chunk by chunk
in a chunked plan), and ``wasted`` is what it computed and no combine used.

Every plan runs as chunks with one speed per worker and iteration (the draw for the whole plan, split over the
chunks; an unchunked plan is one chunk), and every worker sends after the chunks the scheme names: once, after its
last, unless the scheme streams (``partial_coded``): :mod:`gradcode.clusters.iteration`.

Decentralized schemes (DropCompute) run a synchronous All-Reduce step instead: every worker follows the scheme's
schedule of chunks, the step ends at ``max_i (compute_i + comm_i)``.

With ``workload=None`` only times are simulated (no gradients); schemes that adapt on gradients then keep their
initial state. The loop and the stop policy are :mod:`gradcode.clusters.driver`'s, the records
:mod:`gradcode.clusters.records`' (``docs/design.md#records``); training runs add ``busy``, each worker's
``[begin, arrival]`` in the iteration (None if it did not take up the plan), from which timelines are drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..deaths import all_reduce_text, dead_field, planned_deaths
from ..delays import make_delay
from ..errors import ConfigError, check_float
from ..network import bind
from ..schemes import Scheme
from ..schemes._base import Combined, Plan, Received
from ..spec import LATE_WORKERS, RunOptions
from ..workloads import make_workload
from .driver import (
    Driver,
    SimulationError,
    StopPolicy,
    all_reduce_schedule,
    gather_record,
    late_rule,
    whole_unit,
)
from .footprint import check_memory
from .iteration import Iteration, arrival_order, begins, iteration
from .records import WORKER_TIMES_MAX_N, RecordWriter, build_record, spans, summarize, worker_times, write_summary

__all__ = ["LATE_WORKERS", "SimResult", "SimulationError", "check_simulable", "simulate"]


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
        with RecordWriter(out / "records.jsonl") as writer:
            for rec in self.records:
                writer.write(rec)
        write_summary(out, self.summary)
        return out


def simulate(scheme: Scheme, delay, workload=None, options: RunOptions | None = None, *, progress: bool = False,
             on_record=None, **keywords) -> SimResult:
    """Run ``scheme`` under ``delay`` on ``workload`` (``None``: timing only) as the run ``options`` say
    (:class:`gradcode.spec.RunOptions`): ``iterations`` iterations (default 100), or until the loss reaches
    ``target_loss`` or the virtual time ``time_budget`` is spent, with ``seed``, ``lr``, ``late_workers``, the
    optimizer and the held-out evaluation. The options may be given as keywords, ``simulate(scheme, delay,
    workload, iterations=200, seed=0)``, checked the same way; keywords with ``options`` change those options.

    ``on_record(record)`` is called after every iteration (the harness flushes records to disk with it).
    """
    if not isinstance(scheme, Scheme):
        raise ConfigError(f"simulate needs a scheme object (see gradcode.make_scheme), got {type(scheme).__name__}")
    options = RunOptions.of(options, **keywords)
    delay = make_delay(delay)
    check_simulable(delay)
    delay.check_workers(scheme.n)
    workload = None if workload is None else make_workload(workload)
    if options.lr is None and workload is not None:   # the workload's own step size (a given lr was checked)
        check_float("the workload's lr", workload.lr, low=0.0)
    if options.target_loss is not None and workload is None:
        raise ConfigError("target_loss needs a workload (timing-only runs have no loss)")

    iterations, seed = options.iterations, options.seed
    deaths = planned_deaths(options, scheme.n)
    scheme.bind(delay=delay)
    scheme.reset()
    check_memory(scheme, iterations, workload)   # before the work: a clear refusal, not a MemoryError or swap
    if _vectorizable(scheme, workload, options) and not deaths:
        records = _vectorized_timing(scheme, delay, iterations, seed)
        if on_record is not None:
            for rec in records:
                on_record(rec)
        return SimResult(records, summarize(records), params=None)
    if _finish_vectorizable(scheme, workload, options) and not deaths:
        links = bind(options.network, scheme.n, None, options.time_scale)
        records = _timing_finish(scheme, delay, iterations, seed, on_record, _progress(progress, iterations), links)
        return SimResult(records, summarize(records), params=None)
    cluster = SimulatedCluster(scheme, delay, workload, options, on_record=on_record, progress=progress)
    records = cluster.run()
    cluster.close()
    return SimResult(records, cluster.summary(), params=cluster.w)


def check_simulable(delay, where: str = "[delay]") -> None:
    """Natural timing (the ``none`` delay model) times real work: the simulator has none, so it refuses it (zero
    times everywhere would make every scheme look free) and says what to do instead."""
    if not make_delay(delay).injects:
        raise ConfigError(f"{where} name = \"none\": natural timing is MPI-only (workers' real compute and transfer "
                          "times); the simulator needs a delay model: capture an MPI run's times and replay them "
                          "with the trace delay model, or pick one of gradcode.list_delays()")


def _progress(enabled: bool, total: int):
    if not enabled:
        return None
    from ..plumbing.progress import progress_bar

    return progress_bar(total, unit="it", leave=False)


def _vectorizable(scheme: Scheme, workload, options: RunOptions) -> bool:
    """Timing only, fresh draws every iteration, a fixed "first m arrivals" rule: one vectorised pass suffices."""
    if (workload is not None or scheme.decentralized or scheme.streams or options.time_budget is not None
            or options.network is not None):
        return False
    plan = scheme.plan(0)
    if plan.chunked or late_rule(options.late_workers, plan) != "abandon":
        return False
    # an exact code's stop depends on who arrived, not on when: stop_counts finds it per iteration
    return (scheme.stop_count() is not None or scheme.exact) and not math.isfinite(plan.deadline)


def stop_counts(scheme: Scheme, plan: Plan, order: np.ndarray, response: np.ndarray) -> np.ndarray:
    """How many first arrivals end each iteration of the timing-only pass: row ``j`` of ``order`` is iteration
    ``j``'s workers by arrival (``response`` their times). ``stop_count()`` when the rule is "the first m";
    otherwise the stop policy on each row, as the per-iteration path and the MPI master apply it (an exact code:
    its first decodable prefix, the decodes remembered per responder set; all that ever answer if none decodes)."""
    m = scheme.stop_count()
    if m is not None:
        return np.full(len(order), m, dtype=np.int64)
    policy = StopPolicy(scheme)
    counts = np.empty(len(order), dtype=np.int64)
    for j, row in enumerate(order):
        row = row[np.isfinite(response[j, row])]
        counts[j] = policy.count(Received(row), response[j, row], 0.0, plan)
    return counts


def _finish_vectorizable(scheme: Scheme, workload, options: RunOptions) -> bool:
    """Timing only, late workers finish, one message per plan: the delays are drawn ahead, a block of iterations at
    a time (they depend on ``(seed, t, i, load)`` only, and a timing-only run never changes a plan's load); the
    iterations themselves stay one after the other (a late worker begins when it is free)."""
    if workload is not None or scheme.decentralized or scheme.streams or options.time_budget is not None:
        return False
    plan = scheme.plan(0)
    return not plan.chunked and late_rule(options.late_workers, plan) == "finish"


# draws per vectorised block: 4 MB an array (52 rows at n = 10,000). Larger blocks (20 MB an array at 256 rows) make
# a fresh process page-fault every block in afresh (docs/benchmarks.md).
_BLOCK = 1 << 19


def block_rows(n: int, most: int = 256) -> int:
    """Iterations a vectorised block holds at ``n`` workers: ``most``, fewer where a row is long (``_BLOCK``)."""
    return max(1, min(most, _BLOCK // n))


def _vectorized_timing(scheme: Scheme, delay, iterations: int, seed: int, chunk: int = 256) -> list[dict]:
    """Iteration ``t`` lasts ``T_(m:n)`` of its own draws; iterations are sampled and sorted ``chunk`` at a time
    (fewer at large ``n``: a block holds at most ``_BLOCK`` draws)."""
    plan = scheme.plan(0)
    n = scheme.n
    chunk = block_rows(n, chunk)
    records: list[dict] = []
    clock = 0.0
    load = np.broadcast_to(np.asarray(plan.load, dtype=float), (n,))
    unit = whole_unit(load)
    for t0 in range(0, iterations, chunk):
        ts = np.arange(t0, min(t0 + chunk, iterations))
        compute, comm = delay.sample(seed, ts, n, plan.load)
        T = compute + comm
        order = arrival_order(T)
        m = stop_counts(scheme, plan, order, T)
        order = order[:, :m.max()]     # the responders' rows (build_record keeps a copy of each)
        kth = np.take_along_axis(T, order[np.arange(len(m)), m - 1][:, None], axis=1)[:, 0]
        if not np.all(np.isfinite(kth)):
            raise SimulationError(f"{scheme.name}: the stop rule cannot be met; some workers never answer")
        ends = clock + np.cumsum(kth)
        # abandon: a worker stops at the end, having done kth / compute of its load (iteration._work's rule)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where((compute > 0) & (compute > kth[:, None]), kth[:, None] / compute, 1.0)
        computed_t = (share * load).sum(axis=1)
        starts = np.concatenate(([clock], ends[:-1]))
        for j, t in enumerate(ts):
            end = float(ends[j])
            times = _vector_times(float(starts[j]), compute[j], T[j], float(kth[j]))
            responders = order[j, :m[j]]
            used = unit * int(m[j]) if unit is not None else float(load[responders].sum())
            records.append(build_record(
                scheme, int(t), float(starts[j]), end, ideal_end=end, responders=responders, load=plan.load,
                messages=n, computed=float(computed_t[j]), wasted=float(computed_t[j]) - used,
                combined=None, loss=None, grad_error=None, measured={"used": used, **times}))
        clock = float(ends[-1])
    return records


def _timing_finish(scheme: Scheme, delay, iterations: int, seed: int, on_record, bar, links=None,
                   chunk: int = 256) -> list[dict]:
    """:meth:`SimulatedCluster.gather` of a timing-only run with late workers finishing, the same functions
    (:func:`iteration`, :func:`gather_record`) without a cluster object, and the delays drawn ``chunk`` iterations
    at a time (they depend on ``(seed, t, i, load)`` only, and a timing-only run never changes a plan's load)."""
    n = scheme.n
    policy = StopPolicy(scheme)
    chunk = block_rows(n, chunk)
    records: list[dict] = []
    clock, free = 0.0, np.zeros(n)
    for t0 in range(0, iterations, chunk):
        plans = [scheme.plan(t) for t in range(t0, min(t0 + chunk, iterations))]
        loads = plans[0].load
        if not all(p.load is loads for p in plans):
            loads = np.stack([np.broadcast_to(np.asarray(p.load, dtype=float), (n,)) for p in plans])
        compute, comm = delay.sample(seed, np.arange(t0, t0 + len(plans)), n, loads)
        unit = whole_unit(loads)
        for j, plan in enumerate(plans):
            start = clock
            it = iteration(policy, plan, start, np.maximum(start, free), compute[j], comm[j], "finish", links)
            free = np.where(it.started, it.free, free)
            clock = it.end
            rec = gather_record(scheme, plan, it, start, it.end, ideal_end=it.end, combined=None, loss=None,
                                grad_error=None, measured=it.worker_times(compute[j], comm[j]),
                                state=scheme.record(), metrics={}, d=None, unit=unit)
            records.append(rec)
            if on_record is not None:
                on_record(rec)
        if bar is not None:
            bar.update(len(plans))
    if bar is not None:
        bar.close()
    return records


class SimulatedCluster(Driver):
    """The virtual clock: when each worker is free, and the gradients of the real workload computed in-process
    (every partition once per iteration, which also gives the full gradient for ``grad_error`` for free)."""

    def __init__(self, scheme: Scheme, delay, workload, options: RunOptions, *, on_record=None,
                 progress: bool = False):
        super().__init__(scheme, workload, options)
        self.delay, self.seed, self.late = delay, options.seed, options.late_workers
        self.on_record = on_record
        self.bar = _progress(progress, self.iterations)
        self.clock = 0.0
        self.free = np.zeros(self.n)
        self._block: tuple | None = None     # (first t, load, compute, comm): the last draws (_draws)
        self.planned = planned_deaths(options, self.n)     # [faults]: {worker: the first plan it never takes}

    def emit(self, rec: dict[str, Any]) -> None:
        if self.on_record is not None:
            self.on_record(rec)
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def _partials(self, t: int, plan: Plan) -> np.ndarray:
        """The ``(n_parts, d)`` gradients of every partition at the current model."""
        return self.workload.gradients(self.w, t, range(plan.n_parts), plan.n_parts, plan.batch)

    def _combine(self, partials: np.ndarray, it: Iteration, plan: Plan) -> tuple[Combined, np.ndarray]:
        """The estimate from the received messages, and the full gradient (``grad_error``'s truth). From the
        partials where the scheme can: a scheme that combines from the messages' plain sum (``sums_messages``),
        each message a sum of partitions (``message_weights``), gets both from one product ``(2, n_parts) @
        (n_parts, d)``, one pass over the partials instead of a copy of the responders' rows and two sums; a scheme
        with its own shortcut (``combine_partials``) the estimate without making the messages. The same numbers up
        to rounding (the order of the additions)."""
        scheme, received = self.scheme, it.received
        weights = scheme.message_weights(received, plan) if scheme.sums_messages else None
        if weights is not None:
            total, truth = np.stack([weights, np.ones(plan.n_parts)]) @ partials
            return scheme.combine_sum(total, len(received), plan), truth
        combined = scheme.combine_partials(partials, received, plan)
        if combined is None:
            combined = scheme.combine(scheme.messages(partials, received, plan), received, plan)
        return combined, partials.sum(axis=0)

    def _draws(self, t: int, load) -> tuple[np.ndarray, np.ndarray]:
        """Iteration ``t``'s ``(1, n)`` compute and communication times. While the plans' load stays the same they
        are drawn a block of iterations ahead: a draw depends on ``(seed, t, i, load)`` only, so these are the
        numbers one call per iteration gives, for one call per block (two seeded generators a call: 6-7% of an
        iteration of a small training run)."""
        block = self._block
        steady = block is not None and _same_load(block[1], load)    # the load of the last draws
        if steady and block[0] <= t < block[0] + len(block[2]):
            j = t - block[0]
            return block[2][j:j + 1], block[3][j:j + 1]
        load = np.array(load, dtype=float)     # a copy: a scheme may change its load array in place
        rows = min(block_rows(self.n, 64), self.iterations - t) if steady else 1
        compute, comm = self.delay.sample(self.seed, np.arange(t, t + rows), self.n, load)
        self._block = (t, load, compute, comm)
        return compute[:1], comm[:1]

    def _deaths(self, t: int) -> np.ndarray | None:
        """The workers dead by iteration ``t`` (a mask; None if none), those planned for ``t`` added now."""
        for worker, at in self.planned.items():
            if at <= t:
                self.dead.setdefault(worker, at)
        if not self.dead:
            return None
        dead = np.zeros(self.n, dtype=bool)
        dead[list(self.dead)] = True
        return dead

    def gather(self, t: int, plan: Plan) -> dict[str, Any]:
        start = self.clock
        compute, comm = self._draws(t, plan.load)
        compute, comm = compute[0], comm[0]
        late = late_rule(self.late, plan)
        begin = begins(plan, late, start, self.free)
        dead = self._deaths(t)
        if dead is not None:      # a dead worker never begins a plan: no message, no work
            unmet = self.deaths_unmet(t, plan)
            if unmet:
                raise SimulationError(unmet)
            begin, compute = np.where(dead, np.inf, begin), np.where(dead, np.inf, compute)
        it = iteration(self.policy, plan, start, begin, compute, comm, late, self.links)
        self.free = np.where(it.started, it.free, self.free)
        self.clock = it.end
        self.scheme.observe_chunks(t, _chunk_seconds(plan, compute))
        combined = truth = None
        measured = {}
        if self.workload is not None:
            combined, truth = self._combine(self._partials(t, plan), it, plan)
            # per-worker spans for timelines (skipped in timing-only runs: n may be huge)
            measured["busy"] = spans(begin, _last_out(it, plan), it.started)
        measured.update(it.worker_times(compute, comm))
        measured.update(dead_field(self.dead))
        return self.conclude_gather(t, plan, start, it.end, ideal_end=it.end, it=it, combined=combined, truth=truth,
                                    **measured)

    def all_reduce(self, t: int, plan: Plan) -> dict[str, Any]:
        if self._deaths(t) is not None:
            raise SimulationError(all_reduce_text(self.scheme, t, self.dead))
        start = self.clock
        micro, schedule = all_reduce_schedule(self.scheme, self.delay, self.seed, t, plan, self.links)
        end = self.clock = start + schedule.duration
        combined = truth = None
        measured = {}
        if self.workload is not None:
            partials = self._partials(t, plan)
            kept = schedule.kept_parts(plan)
            combined = self.scheme.combine(partials[kept], kept, plan)
            truth = partials.sum(axis=0)
            measured["busy"] = spans(np.full(self.n, start), start + schedule.stop, np.ones(self.n, dtype=bool))
        ready = start + schedule.ready    # a worker joins the All-Reduce once its chunks and its comm are done
        measured.update(worker_times(start, plan_received=np.full(self.n, start), compute=schedule.stop,
                                     sent=ready, arrived=np.full(self.n, end), delay=schedule.ready))
        return self.conclude_all_reduce(t, plan, start, end, ideal_end=end, schedule=schedule, micro=micro,
                                        combined=combined, truth=truth, **measured)


def _last_out(it: Iteration, plan: Plan) -> np.ndarray:
    """When each worker is done with the plan, for its timeline span: an unchunked plan's message arrival; a chunked
    plan's last received message or the moment it was free, whichever is later."""
    if not plan.chunked:
        return it.times      # one message a worker, in worker order
    arrive = np.full(len(it.begin), -np.inf)
    np.maximum.at(arrive, it.senders, it.arrive)
    return np.where(it.started, np.maximum(it.free, arrive), np.inf)


def _chunk_seconds(plan: Plan, compute: np.ndarray) -> np.ndarray:
    """Each worker's time per chunk this iteration (its plan's compute time over its chunks)."""
    return compute / plan.chunk_counts


def _same_load(kept: np.ndarray, load) -> bool:
    return np.array_equal(kept, np.asarray(load, dtype=float))


def _vector_times(start: float, compute: np.ndarray, response: np.ndarray, kth: float) -> dict[str, Any]:
    """The vectorised timing path's worker times (every worker begins at ``start``; arrival by ``kth`` counts)."""
    if len(compute) >= WORKER_TIMES_MAX_N:
        return {}    # worker_times leaves them out
    answered = response <= kth
    return worker_times(start, plan_received=np.full(len(compute), start), compute=compute,
                        sent=np.where(answered, start + compute, np.nan),
                        arrived=np.where(answered, start + response, np.nan), delay=response)
