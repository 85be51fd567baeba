"""What every cluster does the same way: the loop, the stop policy, evaluation, the record, its writing, the summary.

A cluster is "how time passes and how messages move": the simulated cluster (:mod:`gradcode.sim`) advances a virtual
clock, the MPI cluster (:mod:`mpi_runtime`) reads the wall clock and moves bytes. Both subclass :class:`Driver`, which
runs one loop (``docs/design.md#clusters``)::

    plan -> the cluster executes it (gather / all_reduce) -> stop policy -> combine -> w -= lr * g -> adapt ->
    evaluate -> record -> write -> run finished? -> summary

so a record field (``docs/design.md#records``) or a stop rule changes here, once. The virtual clock's arithmetic of
one iteration (:func:`master_iteration`, :func:`all_reduce_schedule`) is public: the MPI cluster computes its ideal,
zero-overhead times with it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import GradcodeError
from .optim import Optimizer
from .schemes._base import Combined, Plan, Schedule, Scheme

HELDOUT_KEYS = ("test_loss", "test_accuracy", "test_auc")   # a record's held-out metrics (``Workload.heldout``)


class SimulationError(GradcodeError):
    """A run that cannot go on (for example, a scheme that waits for a worker that never answers)."""


# --- run rules ------------------------------------------------------------------------------------------------
def default_lr(lr: float | None, workload) -> float:
    """The step size: ``lr`` if given, else the workload's own (0 for a timing-only run)."""
    if lr is not None:
        return lr
    return workload.lr if workload is not None else 0.0


def evaluates_loss(t: int, iterations: int, loss_every: int) -> bool:
    """Is the full loss evaluated after iteration ``t``? Every ``loss_every``-th iteration and the last (both
    clusters use this rule, so their records have losses at the same iterations)."""
    return t % loss_every == 0 or t == iterations - 1


def run_finished(rec: dict[str, Any] | None, target_loss: float | None, time_budget: float | None,
                 target_accuracy: float | None = None) -> bool:
    """Does the run stop after this record: time budget spent, target loss reached, or target held-out accuracy
    reached (on an iteration that evaluated it, ``eval_every``)?"""
    if rec is None:
        return False
    if time_budget is not None and rec["end"] >= time_budget:
        return True
    if (target_accuracy is not None and rec.get("test_accuracy") is not None
            and rec["test_accuracy"] >= target_accuracy):
        return True
    return target_loss is not None and rec["loss"] is not None and rec["loss"] <= target_loss


def relative_error(estimate: np.ndarray, truth: np.ndarray) -> float:
    """``||estimate - truth|| / ||truth||`` (0 when the truth is 0): the records' ``grad_error``."""
    norm = np.linalg.norm(truth)
    return float(np.linalg.norm(estimate - truth) / norm) if norm > 0 else 0.0


# --- the stop policy ------------------------------------------------------------------------------------------
class StopPolicy:
    """When a master iteration ends: when the scheme's stop rule holds (``done`` / ``stop_index``), or at the plan's
    deadline once a message has arrived. An exact code whose workers that ever answer cannot decode takes them all
    (the decoder falls back and the record's ``method`` says so); any other unmeetable rule is an error.

    :meth:`count` is the virtual clock's form (every arrival time known in advance), :meth:`holds` and
    :meth:`out_of_time` the wall clock's (arrivals one at a time, with the fallback set the virtual clock found).
    """

    def __init__(self, scheme: Scheme):
        self.scheme = scheme

    def count(self, order: np.ndarray, arrive: np.ndarray, start: float, plan: Plan) -> int:
        """How many first arrivals of ``order`` (workers by arrival time ``arrive``) end the iteration."""
        m = self.scheme.stop_index(order)
        if math.isfinite(plan.deadline):
            in_time = int(np.searchsorted(arrive[order], start + plan.deadline, side="right"))
            m = max(1, min(m, in_time)) if m is not None else max(1, in_time)
            m = min(m, len(order))
        if m is None or m == 0:
            if len(order) and self.scheme.exact:
                return len(order)  # all that ever answer: the decoder falls back (auto) and reports it
            silent = sorted(set(range(self.scheme.n)) - set(order.tolist()))
            raise SimulationError(
                f"{self.scheme.name}: the stop rule cannot be met; workers {silent} never answer (infinite delay)"
            )
        return m

    def fallback(self, responders: list[int]) -> set[int] | None:
        """The responders the virtual clock ended with, if they are an exact code's fallback (not decodable)."""
        return set(responders) if self.scheme.exact and not self.scheme.done(responders) else None

    def holds(self, responders: list[int], fallback: set[int] | None) -> bool:
        """May the iteration end with these responders (in arrival order)?"""
        if self.scheme.done(responders):
            return True
        return fallback is not None and fallback <= set(responders)

    def count_stream(self, received: list[tuple[int, int]], arrive: np.ndarray, start: float, plan: Plan) -> int:
        """:meth:`count` for streamed messages ``(worker, chunks)`` in arrival order (arrival times ``arrive``)."""
        m = self.scheme.stream_stop_index(received, plan)
        if math.isfinite(plan.deadline):
            in_time = int(np.searchsorted(arrive, start + plan.deadline, side="right"))
            m = max(1, min(m, in_time)) if m is not None else max(1, in_time)
            m = min(m, len(received))
        if m is None or m == 0:
            if received and self.scheme.exact:
                return len(received)  # everything that ever arrives: the decoder falls back and says so
            raise SimulationError(f"{self.scheme.name}: the stop rule cannot be met; the messages that ever "
                                  f"arrive ({len(received)}) never suffice (infinite delays?)")
        return m

    def stream_fallback(self, received: list[tuple[int, int]], plan: Plan) -> set | None:
        """The messages the virtual clock ended with, if they are an exact scheme's fallback (not decodable)."""
        if self.scheme.exact and not self.scheme.stream_done(received, plan):
            return set(received)
        return None

    def stream_holds(self, received: list[tuple[int, int]], plan: Plan, fallback: set | None) -> bool:
        """May a streamed iteration end with these messages (in arrival order)?"""
        if self.scheme.stream_done(received, plan):
            return True
        return fallback is not None and fallback <= set(received)

    @staticmethod
    def out_of_time(responders: list[int], elapsed: float, plan: Plan) -> bool:
        """Has the plan's deadline passed, ``elapsed`` after the start, with at least one responder?"""
        return bool(responders) and elapsed >= plan.deadline


# --- the virtual clock's arithmetic of one iteration ----------------------------------------------------------
@dataclass
class Arrivals:
    """One master iteration on the virtual clock: worker ``i`` begins at ``begin[i]``, its message arrives at
    ``arrive[i]``; the first ``responders`` end it at ``end``; ``started`` workers took up the plan before then."""

    start: float
    end: float
    begin: np.ndarray
    arrive: np.ndarray
    responders: np.ndarray
    started: np.ndarray


def master_iteration(policy: StopPolicy, plan: Plan, start: float, begin: np.ndarray, compute: np.ndarray,
                     comm: np.ndarray) -> Arrivals:
    """Arrivals ``begin + compute + comm`` (the delay model's draws), ended by the stop policy."""
    arrive = begin + compute + comm
    order = np.argsort(arrive, kind="stable")
    order = order[np.isfinite(arrive[order])]
    responders = order[:policy.count(order, arrive, start, plan)].copy()   # not a view: records keep it
    end = float(arrive[responders[-1]])
    return Arrivals(start, end, begin, arrive, responders, took_up(begin, arrive, end))


def work_done(plan: Plan, begin: np.ndarray, compute: np.ndarray, end: float, started: np.ndarray,
              late: str) -> np.ndarray:
    """Load each worker computed on a one-message plan: all of it under ``finish`` (it completes the plan), what it
    did by ``end`` under ``abandon`` (it drops the rest at once: ``load * (end - begin) / compute``, capped at 1)."""
    load = np.broadcast_to(np.asarray(plan.load, dtype=float), begin.shape)
    if late == "finish":
        return np.where(started, load, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(compute > 0, np.clip((end - begin) / compute, 0.0, 1.0), 1.0)
    share[begin + compute <= end] = 1.0    # finished (exactly: not 1 - 1e-16 from the subtraction's round-off)
    return np.where(started, load * share, 0.0)


def took_up(begin: np.ndarray, arrive: np.ndarray, end: float) -> np.ndarray:
    """The workers that took up the plan before the iteration ended at ``end``: those that began before it, and
    those whose message had arrived by then. The second term matters at zero (or tiny, absorbed by round-off)
    delays, where everyone begins and answers at the very instant the iteration ends: ``begin < end`` alone would
    count no message and no work, and the responders' load as negative waste."""
    return (begin < end) | (arrive <= end)


# --- chunked, streaming workers on the virtual clock ------------------------------------------------------------
@dataclass
class Stream:
    """One iteration of a streaming scheme (``scheme.streams``) on the virtual clock.

    Worker ``i`` runs its ``L_i`` chunks at one speed through the iteration (the delay model's draw ``compute_i``
    for the whole plan, split in proportion to the chunks' loads), so chunk ``j`` ends at ``chunk_end[i, j] = begin_i
    + compute_i (j + 1) / L_i``; it starts chunk ``j >= 1`` only while ``chunk_end[i, j - 1] - begin_i < tau``
    (its local deadline). Its message after ``c`` chunks (``c`` in ``scheme.emits``) arrives ``comm_i`` after chunk
    ``c`` ends (sending overlaps the next chunk). ``received`` are the messages, in arrival order, that ended the
    iteration at ``end``; ``done[i]`` the chunks worker ``i`` computes on this plan (all it started under
    ``finish``; under ``abandon`` those begun by ``end``: the chunk in progress is finished, then the worker
    drops the rest), ``free[i]`` when it can take the next plan.
    """

    start: float
    end: float
    begin: np.ndarray
    chunk_end: np.ndarray
    received: list[tuple[int, int]]
    arrive: np.ndarray
    started: np.ndarray
    done: np.ndarray
    free: np.ndarray
    sent: np.ndarray

    def computed(self, plan: Plan) -> np.ndarray:
        """Load units each worker computed on this plan."""
        return self.done * _chunk_load(plan, len(self.done))

    def used(self, scheme: Scheme, plan: Plan) -> np.ndarray:
        """Load units each worker delivered in the received messages (a chunk delivered twice counts twice)."""
        used = np.zeros(len(self.done))
        unit = _chunk_load(plan, len(self.done))
        for i, c in self.received:   # the chunks since the worker's previous message
            used[i] += (c - max((e for e in scheme.emits(i, plan) if e < c), default=0)) * unit[i]
        return used


def _chunk_load(plan: Plan, n: int) -> np.ndarray:
    chunks = np.array([plan.chunks(i) for i in range(n)], dtype=float)
    return np.broadcast_to(np.asarray(plan.load, dtype=float), (n,)) / chunks


def chunk_ends(plan: Plan, begin: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(chunk_end, started)``: when each worker's chunks end (``inf`` past its last) and how many it starts before
    its local deadline ``plan.tau``."""
    n = len(begin)
    counts = np.array([plan.chunks(i) for i in range(n)])
    j = np.arange(1, counts.max() + 1)[None, :]
    ends = np.where(j <= counts[:, None], begin[:, None] + compute[:, None] * j / counts[:, None], np.inf)
    # chunk j (0-based) starts at the end of chunk j - 1; it is started only before the local deadline
    starts = np.concatenate([begin[:, None], ends[:, :-1]], axis=1)
    may = (starts - begin[:, None] < plan.tau) | (j == 1)
    started = np.minimum(counts, np.cumprod(may, axis=1).sum(axis=1))
    return ends, started


def stream_iteration(policy: StopPolicy, plan: Plan, start: float, begin: np.ndarray, compute: np.ndarray,
                     comm: np.ndarray, late: str) -> Stream:
    """The messages of every worker's chunks, ended by the stop policy (see :class:`Stream`)."""
    scheme = policy.scheme
    ends, started = chunk_ends(plan, begin, compute)
    ids, times = [], []
    for i in range(len(begin)):
        for c in scheme.emits(i, plan):
            if c <= started[i]:
                ids.append((i, int(c)))
                times.append(ends[i, c - 1] + comm[i])
    times = np.array(times, dtype=float)
    order = np.argsort(times, kind="stable")
    order = order[np.isfinite(times[order])]
    sorted_ids = [ids[k] for k in order]
    m = policy.count_stream(sorted_ids, times[order], start, plan)
    received, end = sorted_ids[:m], float(times[order[m - 1]])
    chunk_start = np.concatenate([begin[:, None], ends[:, :-1]], axis=1)
    first = np.array([ends[i, 0] for i in range(len(begin))])
    took = (begin < end) | (first <= end)
    if late == "finish":
        done = np.where(took, started, 0)
        last = ends[np.arange(len(begin)), np.maximum(done - 1, 0)]
        free = np.where(took, last, begin)
    else:
        # a chunk that starts at the very instant the iteration ends is started: the worker cannot know yet
        done = np.where(took, np.minimum(started, (chunk_start <= end).sum(axis=1)), 0)
        free = np.where(took, ends[np.arange(len(begin)), np.maximum(done - 1, 0)], begin)
    sent = np.zeros(len(begin), dtype=int)
    for i, c in ids:
        if c <= done[i] and (late == "finish" or ends[i, c - 1] <= end):
            sent[i] += 1
    # a worker is free once its last message is out, too
    for k in range(len(ids)):
        i, c = ids[k]
        if c == done[i] and (late == "finish"):
            free[i] = max(free[i], times[k])
    return Stream(start, end, begin, ends, received, times[order[:m]], took, done, free, sent)


def all_reduce_schedule(scheme, delay, seed: int, t: int, plan: Plan) -> tuple[np.ndarray, Schedule]:
    """Step ``t``'s chunk times and the scheme's schedule for them; an error if the All-Reduce can never end."""
    micro, comm = scheme.micro_times(delay, seed, t)
    schedule = scheme.schedule(micro, comm, plan.tau)
    if not np.all(np.isfinite(schedule.ready)):
        silent = np.flatnonzero(~np.isfinite(schedule.ready)).tolist()
        raise SimulationError(f"{scheme.name}: All-Reduce cannot finish; workers {silent} never answer")
    return micro, schedule


# --- records --------------------------------------------------------------------------------------------------
def build_record(scheme: Scheme, t: int, start: float, end: float, *, ideal_end: float, responders, load,
                 messages: int, computed: float, wasted: float, combined: Combined | None, loss: float | None,
                 grad_error: float | None, measured: dict[str, Any], state: dict[str, Any] | None = None,
                 metrics: dict[str, Any] | None = None, as_lists: bool = True) -> dict[str, Any]:
    """The one record of iteration ``t`` (``docs/design.md#records``): times, responders, loads, work, decoding,
    what the cluster ``measured`` besides, the scheme's state (``state``, taken when the iteration ended; by default
    ``scheme.record()`` now), loss and gradient error, and the held-out ``metrics``.

    Timing-only records keep ``responders`` (and a non-uniform ``load``) as numpy arrays (``as_lists=False``,
    written out as lists): at ``n = 10,000`` Python lists would cost more than the simulation itself. ``load`` is
    one number when every worker carries the same load (:func:`per_worker`, read back by :func:`record_load`), and
    the responders of a huge cluster by the stragglers when they are fewer (:func:`compact_responders`).
    """
    rec = {
        "scheme": scheme.name,
        "iteration": t,
        "start": start,
        "end": end,
        "ideal_end": ideal_end,
        "responders": compact_responders(responders, scheme.n, as_lists),
        "load": compact_load(load, as_lists),
        "messages": messages,
        "computed": computed,
        "wasted": wasted,
        "residual": None if combined is None else float(combined.residual),
        "method": None if combined is None else combined.method,
    }
    rec.update(measured)
    rec.update(scheme.record() if state is None else state)
    rec["loss"] = loss
    rec["grad_error"] = grad_error
    rec.update(metrics or {})
    return rec


def complete_record(head: dict[str, Any], fill: Callable[[], dict[str, Any]]) -> None:
    """Make ``head`` (returned early by :meth:`Driver.record_later`, perhaps with fields added since) the whole record
    in place: ``fill()``'s fields in their order, then the ones only ``head`` has."""
    rec = fill()
    rec.update(head)
    head.clear()
    head.update(rec)


def work_fields(computed: np.ndarray | None, used: np.ndarray, sent: np.ndarray | None,
                floats_per_message: int) -> dict[str, Any]:
    """Per-worker work of one iteration for its record: load units computed and used (delivered in a combined
    message), messages sent and the floats they carried (``floats`` in total). Each list is one number when every
    worker has the same value (:func:`per_worker`; read back with :func:`worker_values`)."""
    out: dict[str, Any] = {"worker_used": per_worker(used)}
    if computed is not None:
        out["worker_computed"] = per_worker(computed)
    if sent is not None:
        out["worker_messages"] = per_worker(sent, dtype=int)
        out["floats"] = int(np.sum(sent)) * floats_per_message
    return out


PER_WORKER_LIMIT = 10_000   # workers: above it a record stores responders by their complement when that is shorter


def per_worker(values, as_list: bool = True, *, dtype=float):
    """A record's per-worker list, compactly: one number when every worker has the same value (an ``n``-long list
    of equal numbers costs 5 MB a record at ``n = 10^6``), else the values in worker order (a list, or the numpy
    array itself with ``as_list=False``: timing-only records, written out as lists). Read back by
    :func:`worker_values`.

    >>> per_worker([2.0, 2.0, 2.0]), per_worker([1, 0, 1], dtype=int)
    (2.0, [1, 0, 1])
    """
    values = np.asarray(values, dtype=dtype)
    if values.size and (values.strides == (0,) or np.all(values == values.flat[0])):   # a broadcast number, or equal
        return values.flat[0].item()
    return values.tolist() if as_list else values


def worker_values(rec: dict[str, Any], key: str, n: int) -> np.ndarray | None:
    """Every worker's value of the per-worker field ``key`` of a record (``n`` workers), whether it was stored as
    one number or as a list (:func:`per_worker`); None if the record has no such field."""
    if rec.get(key) is None:
        return None
    values = np.asarray(rec[key])
    return np.full(n, values.item()) if values.ndim == 0 else values


# per-worker times of one iteration (``docs/design.md#records``); from this many workers on they are left out
WORKER_TIMES_MAX_N = PER_WORKER_LIMIT     # one threshold for huge-n records (responders compacted, times omitted)
WORKER_TIME_KEYS = ("worker_plan_received", "worker_compute", "worker_sent", "worker_arrived", "worker_delay")


def worker_times(start: float, *, plan_received, compute, sent, arrived, delay, as_lists: bool = True
                 ) -> dict[str, Any]:
    """The record's per-worker timing: every argument an ``n``-long array with NaN for a worker that took no part
    (or where the cluster cannot know, e.g. on MPI a message that had not arrived when the iteration ended);
    ``plan_received``, ``sent`` and ``arrived`` are absolute times on the record's clock (stored relative to
    ``start``), ``compute`` and ``delay`` durations; ``delay=None``: nothing injected (natural timing).

    Stored as lists with None (``as_lists``), or kept as float arrays with NaN (timing-only records, written out
    as lists with null by :func:`jsonable`); left out entirely at ``n >= WORKER_TIMES_MAX_N`` (huge timing-only
    runs: five ``n``-long arrays a record would dwarf the rest). Read them back with :func:`record_worker_times`.

    >>> f = worker_times(1.0, plan_received=np.array([1.0, np.nan]), compute=np.array([0.5, np.nan]),
    ...                  sent=np.array([1.5, np.nan]), arrived=np.array([1.75, np.nan]), delay=None)
    >>> f["worker_sent"], f["worker_delay"]
    ([0.5, None], [None, None])
    """
    n = len(compute)
    if n >= WORKER_TIMES_MAX_N:
        return {}
    nan = np.full(n, np.nan)
    values = (np.asarray(plan_received, dtype=float) - start, np.asarray(compute, dtype=float),
              np.asarray(sent, dtype=float) - start, np.asarray(arrived, dtype=float) - start,
              nan if delay is None else np.asarray(delay, dtype=float))
    if not as_lists:
        return dict(zip(WORKER_TIME_KEYS, values, strict=True))
    return {key: [None if math.isnan(x) else x for x in v.tolist()]
            for key, v in zip(WORKER_TIME_KEYS, values, strict=True)}


def record_worker_times(rec: dict[str, Any], key: str) -> np.ndarray | None:
    """One per-worker timing field of a record as a float array (NaN where it is null); None if absent."""
    value = rec.get(key)
    if value is None:
        return None
    return np.array([np.nan if x is None else x for x in value], dtype=float)


def compact_load(load, as_list: bool = True):
    """A record's ``load``: :func:`per_worker` of every worker's load units."""
    return per_worker(load, as_list)


def record_load(rec: dict[str, Any], n: int) -> np.ndarray:
    """Every worker's load in a record (``n`` workers), whether it was stored as one number or as a list."""
    return np.asarray(worker_values(rec, "load", n), dtype=float)


def compact_responders(responders, n: int, as_list: bool = True):
    """A record's ``responders`` in arrival order; at more than :data:`PER_WORKER_LIMIT` workers, when most of
    them answered (a sync step at ``n = 10^6``: 7.9 MB of JSON a record), by what is missing instead:
    ``{"count": m, "stragglers": [sorted workers that did not answer], "last": the responder that arrived last}``.
    The arrival order of the others is not kept (the timeline needs only the set and the last one).
    Read back by :func:`record_responders`.

    >>> compact_responders([2, 0, 1], 3)
    [2, 0, 1]
    >>> compact_responders(list(range(20_000, 0, -1)) + [0], 20_002)
    {'count': 20001, 'stragglers': [20001], 'last': 0}
    """
    responders = np.asarray(responders, dtype=np.int64)
    m = len(responders)
    if n > PER_WORKER_LIMIT and 2 * m > n:
        present = np.zeros(n, dtype=bool)
        present[responders] = True
        return {"count": m, "stragglers": np.flatnonzero(~present).tolist(), "last": int(responders[-1])}
    return responders.tolist() if as_list else responders


def record_responders(rec: dict[str, Any], n: int) -> list[int]:
    """The responders of a record: the list as stored, or, from the compact form of :func:`compact_responders`,
    every worker not among the stragglers in worker order with the last to arrive moved to the end."""
    responders = rec["responders"]
    if not isinstance(responders, dict):
        return list(responders)
    missing = set(responders["stragglers"])
    last = responders["last"]
    return [i for i in range(n) if i not in missing and i != last] + [last]


def jsonable(x):
    """``json.dumps``'s ``default``: numpy arrays and scalars as Python lists and numbers."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "f" and np.isnan(x).any():    # NaN marks "no value" (worker_times): JSON null
            return [None if v != v else v for v in x.tolist()]
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


class RecordWriter:
    """Appends records to a JSONL file, one flushed line each, so a run cut short keeps every finished iteration."""

    def __init__(self, path: str | Path):
        self.file = open(path, "w")

    def write(self, rec: dict[str, Any]) -> None:
        self.file.write(json.dumps(rec, default=jsonable) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_summary(folder: str | Path, summary: dict[str, Any]) -> Path:
    """``summary.json`` in ``folder``."""
    path = Path(folder) / "summary.json"
    path.write_text(json.dumps(summary, indent=2, default=jsonable) + "\n")
    return path


def summarize(records: list[dict[str, Any]], *, target_loss: float | None = None,
              target_accuracy: float | None = None, resolution: float = 0.0) -> dict[str, Any]:
    """Aggregate a run's records (never recomputes what the cluster measured). ``time_to_target``: the ``end`` of
    the first record whose loss reaches ``target_loss``; ``time_to_target_accuracy``: of the first whose held-out
    ``test_accuracy`` reaches ``target_accuracy`` (None if never). ``resolution``: see :func:`overhead_ratios`."""
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
        "floats": (int(sum(r["floats"] for r in records)) if all("floats" in r for r in records) else None),
        "messages": int(sum(r["messages"] for r in records)),
        "mean_residual": float(np.mean(residuals)) if residuals else None,
        # exact-code decodes that fell back to least squares (residual > tol): approximate gradients
        "fallback_decodes": sum(1 for r in records if r.get("method") == "fallback"),
        "final_loss": losses[-1] if losses else None,
    }
    summary["wasted_fraction"] = summary["wasted"] / summary["computed"] if summary["computed"] > 0 else None
    summary.update(overhead_ratios(records, durations, resolution))
    if target_loss is not None:
        hit = next((r["end"] for r in records if r.get("loss") is not None and r["loss"] <= target_loss), None)
        summary["target_loss"] = target_loss
        summary["time_to_target"] = hit
    tested = [r for r in records if r.get("test_accuracy") is not None or r.get("test_loss") is not None]
    if tested:
        summary.update({f"final_{k}": tested[-1].get(k) for k in HELDOUT_KEYS})
    if target_accuracy is not None:
        hit = next((r["end"] for r in tested if r.get("test_accuracy") is not None
                    and r["test_accuracy"] >= target_accuracy), None)
        summary["target_accuracy"] = target_accuracy
        summary["time_to_target_accuracy"] = hit
    return summary


def overhead_ratios(records: list[dict[str, Any]], durations: np.ndarray, resolution: float = 0.0
                    ) -> dict[str, Any]:
    """Measured over ideal time (1 on the virtual clock; on MPI, the runtime's overhead): ``overhead_ratio`` of the
    totals and ``median_overhead_ratio`` of the iterations. An ideal time of zero (zero injected delay, natural
    timing) has no ratio: such iterations are left out (None if all are, with ``overhead_ratio_note`` saying why).
    Zero means at most the cluster's ``resolution`` (in record time units; on MPI about a millisecond of wall
    time, the runtime's own per-iteration cost, so a ratio over less would measure the runtime alone) or the
    round-off of the clock readings (1e-12 of the largest ``end``). Above it a small ideal time gives a large
    ratio, and rightly: the overhead is that many times the work emulated."""
    ideal = np.array([r["ideal_end"] - r["start"] for r in records])
    floor = max(1e-12 * max(abs(r["end"]) for r in records), resolution)
    timed = ideal > floor
    total, total_ideal = float(records[-1]["end"] - records[0]["start"]), float(ideal.sum())
    out: dict[str, Any] = {
        "overhead_ratio": total / total_ideal if total_ideal > floor else None,
        "median_overhead_ratio": float(np.median(durations[timed] / ideal[timed])) if timed.any() else None}
    if not timed.all():
        out["overhead_ratio_note"] = (f"{int((~timed).sum())} of {len(records)} iterations have an ideal time of 0 "
                                      "(zero injected delay, or natural timing) or below the cluster's resolution "
                                      f"({floor:.3g} time units): no ratio for them")
    return out


# --- the driver -----------------------------------------------------------------------------------------------
class Driver:
    """The loop of every cluster. A subclass says how time passes and how messages move: :meth:`gather` runs a
    master/worker iteration and :meth:`all_reduce` a decentralized step, each ending with :meth:`conclude_gather` /
    :meth:`conclude_all_reduce` (update, adapt, evaluate, record); it may override :meth:`emit` (where records go),
    :meth:`finished` and :meth:`summary_extras`.

    ``w`` is the model (``None`` for a timing-only run); ``recording`` is False in a process that takes part but
    keeps no records (an All-Reduce peer other than rank 0): it updates its model but evaluates nothing.
    """

    recording = True
    resolution = 0.0    # ideal times up to this (record time units) have no overhead ratio (overhead_ratios)

    def __init__(self, scheme: Scheme, workload, *, iterations: int, lr: float | None = None, loss_every: int = 1,
                 target_loss: float | None = None, time_budget: float | None = None, optimizer: str = "sgd",
                 momentum: float = 0.9, eval_every: int | None = None, target_accuracy: float | None = None):
        self.scheme, self.workload = scheme, workload
        self.n = scheme.n
        self.iterations, self.loss_every = iterations, loss_every
        self.eval_every = loss_every if eval_every is None else eval_every
        self.target_loss, self.time_budget = target_loss, time_budget
        self.target_accuracy = target_accuracy
        self.lr = default_lr(lr, workload)
        self.optimizer = Optimizer(optimizer, momentum)
        self.w = None if workload is None else np.array(workload.init_params(), dtype=float)
        self.heldout = workload is not None and getattr(workload, "X_test", None) is not None
        self.policy = StopPolicy(scheme)
        self.records: list[dict[str, Any]] = []

    # --- the loop -----------------------------------------------------------------------------------------------
    def run(self) -> list[dict[str, Any]]:
        """Iterations until ``iterations`` are done, the time budget is spent or the target loss is reached."""
        for t in range(self.iterations):
            if self.finished(self.step(t)):
                break
        return self.records

    def step(self, t: int) -> dict[str, Any] | None:
        """One iteration: the plan, executed by the cluster; its record (None where nothing is recorded)."""
        plan = self.scheme.plan(t)
        rec = self.all_reduce(t, plan) if self.scheme.decentralized else self.gather(t, plan)
        if rec is not None:
            self.records.append(rec)
            self.emit(rec)
        return rec

    def finished(self, rec: dict[str, Any] | None) -> bool:
        return run_finished(rec, self.target_loss, self.time_budget, self.target_accuracy)

    def emit(self, rec: dict[str, Any]) -> None:
        """A finished record leaves the loop (to a file, a callback, ...)."""

    def summary(self) -> dict[str, Any]:
        summary = summarize(self.records, target_loss=self.target_loss, target_accuracy=self.target_accuracy,
                            resolution=self.resolution)
        if self.records:
            summary.update(self.summary_extras())
        return summary

    def summary_extras(self) -> dict[str, Any]:
        """What the cluster adds to the summary (counts of what it measured)."""
        return {}

    # --- what the cluster does ------------------------------------------------------------------------------------
    def gather(self, t: int, plan: Plan) -> dict[str, Any] | None:
        raise NotImplementedError(f"{type(self).__name__} runs no master/worker scheme")

    def all_reduce(self, t: int, plan: Plan) -> dict[str, Any] | None:
        raise NotImplementedError(f"{type(self).__name__} runs no decentralized scheme")

    # --- the common tail of an iteration --------------------------------------------------------------------------
    def conclude_gather(self, t: int, plan: Plan, start: float, end: float, *, ideal_end: float, responders,
                        messages: int, computed: float, combined: Combined | None, truth: np.ndarray | None = None,
                        worker_computed: np.ndarray | None = None, **measured) -> dict[str, Any] | None:
        """After a master iteration: update, adapt, evaluate, and the record. ``computed`` is the load the workers
        took up (``messages`` plans); what the responders did not carry was ``wasted``."""
        loss, grad_error, metrics = self._update(t, plan, combined, truth)
        if combined is not None:
            self.scheme.adapt(t, combined, elapsed=end - start)
        if not self.recording:
            return None
        state = self.scheme.record()

        def fill() -> dict[str, Any]:
            load = np.broadcast_to(np.asarray(plan.load, dtype=float), (self.n,))
            used_w = np.zeros(self.n)
            used_w[np.asarray(responders, dtype=int)] = load[np.asarray(responders, dtype=int)]
            total = computed if worker_computed is None else float(np.sum(worker_computed))
            if self.w is not None:   # per worker only where n is small enough to list (a training run)
                measured.update(work_fields(worker_computed, used_w, None, self.scheme.message_size(self.w.size)))
            used = float(used_w.sum())
            return build_record(self.scheme, t, start, end, ideal_end=ideal_end, responders=responders,
                                load=plan.load, messages=messages, computed=total, wasted=total - used,
                                combined=combined, loss=loss, grad_error=grad_error,
                                measured={"used": used, **measured}, state=state, metrics=metrics,
                                as_lists=self.w is not None)
        return self.record_later({"end": end, "loss": loss, **metrics}, fill)

    def conclude_stream(self, t: int, plan: Plan, start: float, end: float, *, ideal_end: float, stream: Stream,
                        combined: Combined | None, truth: np.ndarray | None = None, **measured):
        """After a streamed master iteration: as :meth:`conclude_gather`, with the work counted chunk by chunk
        (``worker_computed``, ``worker_used``) and the messages each worker sent (``worker_messages``, ``floats``)."""
        loss, grad_error, metrics = self._update(t, plan, combined, truth)
        if combined is not None:
            self.scheme.adapt(t, combined, elapsed=end - start)
        if not self.recording:
            return None
        state = self.scheme.record()

        def fill() -> dict[str, Any]:
            computed_w, used_w = stream.computed(plan), stream.used(self.scheme, plan)
            d = self.w.size if self.w is not None else 1
            fields = work_fields(computed_w, used_w, stream.sent, self.scheme.message_size(d))
            if self.w is None:   # timing only: totals alone (n may be large; no model size, so no floats)
                fields = {}
            responders = list(dict.fromkeys(i for i, _ in stream.received))
            computed, used = float(computed_w.sum()), float(used_w.sum())
            return build_record(self.scheme, t, start, end, ideal_end=ideal_end, responders=responders,
                                load=plan.load, messages=int(stream.sent.sum()), computed=computed,
                                wasted=computed - used, combined=combined, loss=loss, grad_error=grad_error,
                                measured={"used": used, "received": [list(m) for m in stream.received], **fields,
                                          **measured}, state=state, metrics=metrics, as_lists=self.w is not None)
        return self.record_later({"end": end, "loss": loss, **metrics}, fill)

    def record_later(self, head: dict[str, Any], fill: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The record of a master iteration: ``fill()``. ``head`` holds what the loop needs at once (:meth:`finished`:
        ``end``, ``loss``, the held-out metrics); a cluster whose next iteration waits for this (the MPI master, whose
        next plans go out after it) may return ``head`` now and make it whole later with
        :func:`complete_record`. By default the whole record at once."""
        return fill()

    def conclude_all_reduce(self, t: int, plan: Plan, start: float, end: float, *, ideal_end: float,
                            schedule: Schedule, micro: np.ndarray, combined: Combined | None,
                            truth: np.ndarray | None = None, **measured) -> dict[str, Any] | None:
        """After a decentralized step: update, observe, evaluate, and the record (every worker responds; its load
        is what it kept, ``drop_rate`` the share of chunks dropped)."""
        loss, grad_error, metrics = self._update(t, plan, combined, truth)
        self.scheme.observe(t, micro, schedule.comm_time)
        if not self.recording:
            return None
        units = schedule.units(plan.load)
        if self.w is not None:
            measured.update(work_fields(units, units, None, 0))
        return build_record(self.scheme, t, start, end, ideal_end=ideal_end, responders=np.arange(self.n),
                            load=units, messages=self.n, computed=float(units.sum()), wasted=0.0, combined=combined,
                            loss=loss, grad_error=grad_error,
                            measured={"used": float(units.sum()), "drop_rate": schedule.drop_rate, **measured},
                            metrics=metrics, as_lists=self.w is not None)

    def _update(self, t: int, plan: Plan, combined: Combined | None, truth: np.ndarray | None):
        """The optimizer's step ``w -= lr * s`` (:mod:`gradcode.optim`; ``s = g`` for plain gradient descent);
        returns ``(loss, grad_error, held-out metrics)`` ((None, None, {}) in a timing-only run)."""
        if combined is None:
            return None, None, {}
        g = combined.gradient
        step = self.optimizer.direction(g)
        result = self.evaluate(t, plan, g, truth, step)
        self.w -= self.lr * step     # in place: no new model-sized array per iteration
        return result

    def evaluate(self, t: int, plan: Plan, g: np.ndarray, truth: np.ndarray | None, step: np.ndarray | None = None):
        """``(loss after the update, relative error of g, held-out metrics)``: the loss on evaluation iterations
        (:func:`evaluates_loss`); the gradient error whenever the cluster had the full gradient ``truth`` for free,
        else on evaluation iterations (it costs a gradient over all partitions); the held-out metrics
        (``test_loss``, ``test_accuracy``, ``test_auc``: ``Workload.heldout``) every ``eval_every`` iterations and
        the last, None in between, absent if the workload holds out nothing. A cluster keeps this off its clock."""
        if not self.recording:
            return None, None, {}
        step = g if step is None else step
        with_loss = evaluates_loss(t, self.iterations, self.loss_every)
        if truth is None and with_loss:
            truth = self.workload.gradients(self.w, t, range(plan.n_parts), plan.n_parts, plan.batch).sum(axis=0)
        grad_error = None if truth is None else relative_error(g, truth)
        with_test = self.heldout and evaluates_loss(t, self.iterations, self.eval_every)
        after = self.w - self.lr * step if with_loss or with_test else None
        metrics = {}
        if self.heldout:
            metrics = dict.fromkeys(HELDOUT_KEYS)
            if with_test:
                metrics.update(self.workload.heldout(after))
        return (float(self.workload.loss(after)) if with_loss else None), grad_error, metrics
