"""One iteration's record and a run's summary, the same for every cluster (``docs/design.md#records``).

:func:`build_record` makes the flat record of an iteration (its times, responders, load, work, decode residual,
loss and the scheme's state); large per-worker fields are stored compactly (:func:`per_worker`,
:func:`compact_responders`, :func:`worker_times`) and read back with the ``record_*`` functions. In memory a
per-worker field is a numpy array (NaN for "no value"), in a file a JSON list (null): turning ``n``-long arrays
into Python lists would cost a training run a large share of the simulator's own time, and the readers take
either. A :class:`RecordWriter` writes them as JSON lines, :func:`summarize` aggregates them (never recomputing
what a cluster measured) and :func:`write_summary` writes ``summary.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..schemes._base import Combined, Scheme

HELDOUT_KEYS = ("test_loss", "test_accuracy", "test_auc")   # a record's held-out metrics (``Workload.heldout``)

def build_record(scheme: Scheme, t: int, start: float, end: float, *, ideal_end: float, responders, load,
                 messages: int, computed: float, wasted: float, combined: Combined | None, loss: float | None,
                 grad_error: float | None, measured: dict[str, Any], state: dict[str, Any] | None = None,
                 metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one record of iteration ``t`` (``docs/design.md#records``): times, responders, loads, work, decoding,
    what the cluster ``measured`` besides, the scheme's state (``state``, taken when the iteration ended; by default
    ``scheme.record()`` now), loss and gradient error, and the held-out ``metrics``.

    ``responders`` (and a non-uniform ``load``) are numpy arrays, written out as lists. ``load`` is one number when
    every worker carries the same load (:func:`per_worker`, read back by :func:`record_load`), and the
    responders of a huge cluster by the stragglers when they are fewer (:func:`compact_responders`).
    """
    rec = {
        "scheme": scheme.name,
        "iteration": t,
        "start": start,
        "end": end,
        "ideal_end": ideal_end,
        "responders": compact_responders(responders, scheme.n),
        "load": per_worker(load),
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


def per_worker(values, *, dtype=float):
    """A record's per-worker field, compactly: one number when every worker has the same value (an ``n``-long list
    of equal numbers costs 5 MB a record at ``n = 10^6``), else the values in worker order (the numpy array,
    written out as a list). Read back by :func:`worker_values`.

    >>> per_worker([2.0, 2.0, 2.0]), per_worker([1, 0, 1], dtype=int)
    (2.0, array([1, 0, 1]))
    """
    values = np.asarray(values, dtype=dtype)
    if values.size and (values.strides == (0,) or np.all(values == values.flat[0])):   # a broadcast number, or equal
        return values.flat[0].item()
    return values.copy()     # the cluster's arrays (a plan's load, a stream's counts) live on


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


def worker_times(start: float, *, plan_received, compute, sent, arrived, delay) -> dict[str, Any]:
    """The record's per-worker timing: every argument an ``n``-long array with NaN for a worker that took no part
    (or where the cluster cannot know, e.g. on MPI a message that had not arrived when the iteration ended);
    ``plan_received``, ``sent`` and ``arrived`` are absolute times on the record's clock (stored relative to
    ``start``), ``compute`` and ``delay`` durations; ``delay=None``: nothing injected (natural timing).

    Kept as float arrays with NaN (written out as lists with null by :func:`jsonable`); left out entirely at
    ``n >= WORKER_TIMES_MAX_N`` (huge timing-only runs: five ``n``-long arrays a record would dwarf the rest).
    Read them back with :func:`record_worker_times`.

    >>> f = worker_times(1.0, plan_received=np.array([1.0, np.nan]), compute=np.array([0.5, np.nan]),
    ...                  sent=np.array([1.5, np.nan]), arrived=np.array([1.75, np.nan]), delay=None)
    >>> f["worker_sent"], f["worker_delay"]
    (array([0.5, nan]), array([nan, nan]))
    """
    n = len(compute)
    if n >= WORKER_TIMES_MAX_N:
        return {}
    nan = np.full(n, np.nan)
    # copies (np.array): a cluster refills its arrays the next iteration (the MPI master's Heard)
    values = (np.asarray(plan_received, dtype=float) - start, np.array(compute, dtype=float),
              np.asarray(sent, dtype=float) - start, np.asarray(arrived, dtype=float) - start,
              nan if delay is None else np.array(delay, dtype=float))
    return dict(zip(WORKER_TIME_KEYS, values, strict=True))


def record_worker_times(rec: dict[str, Any], key: str) -> np.ndarray | None:
    """One per-worker timing field of a record as a float array (NaN where it is null); None if absent."""
    value = rec.get(key)
    if value is None or isinstance(value, np.ndarray):     # absent, or in memory
        return value
    return np.array([np.nan if x is None else x for x in value], dtype=float)


def spans(begin: np.ndarray, arrive: np.ndarray, took: np.ndarray) -> np.ndarray:
    """A training record's ``busy``: the ``(n, 2)`` rows ``[begin, arrival]`` of the workers that took up the plan
    and whose message arrives at all, NaN rows for the others (null in a file). Read back by :func:`record_spans`.

    >>> spans(np.array([0.0, 1.0]), np.array([2.0, np.inf]), np.array([True, True])).tolist()
    [[0.0, 2.0], [nan, nan]]
    """
    out = np.stack([begin, arrive], axis=1).astype(float, copy=False)
    out[~(took & np.isfinite(arrive))] = np.nan
    return out


def record_spans(rec: dict[str, Any]) -> np.ndarray | None:
    """A record's ``busy`` spans as an ``(n, 2)`` float array, NaN rows for the workers without one (null in a
    file); None if the record has none."""
    value = rec.get("busy")
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return value
    return np.array([(np.nan, np.nan) if span is None else span for span in value], dtype=float).reshape(-1, 2)


def record_load(rec: dict[str, Any], n: int) -> np.ndarray:
    """Every worker's load in a record (``n`` workers), whether it was stored as one number or per worker."""
    return np.asarray(worker_values(rec, "load", n), dtype=float)


def compact_responders(responders, n: int):
    """A record's ``responders`` in arrival order; at more than :data:`PER_WORKER_LIMIT` workers, when most of
    them answered (a sync step at ``n = 10^6``: 7.9 MB of JSON a record), by what is missing instead:
    ``{"count": m, "stragglers": [sorted workers that did not answer], "last": the responder that arrived last}``.
    The arrival order of the others is not kept (the timeline needs only the set and the last one).
    Read back by :func:`record_responders`.

    >>> compact_responders([2, 0, 1], 3)
    array([2, 0, 1])
    >>> compact_responders(list(range(20_000, 0, -1)) + [0], 20_002)
    {'count': 20001, 'stragglers': [20001], 'last': 0}
    """
    responders = np.array(responders, dtype=np.int64)     # a copy: the record keeps it
    m = len(responders)
    if n > PER_WORKER_LIMIT and 2 * m > n:
        present = np.zeros(n, dtype=bool)
        present[responders] = True
        return {"count": m, "stragglers": np.flatnonzero(~present).tolist(), "last": int(responders[-1])}
    return responders


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
    """``json.dumps``'s ``default``: numpy arrays and scalars as Python lists and numbers; NaN, which marks "no
    value" in a per-worker field (a worker time, a ``busy`` row), as null.

    >>> json.dumps({"t": np.array([1.0, np.nan]), "busy": np.array([[0.0, 1.0], [np.nan, np.nan]])}, default=jsonable)
    '{"t": [1.0, null], "busy": [[0.0, 1.0], null]}'
    """
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "f" and np.isnan(x).any():
            if x.ndim == 2:     # busy: a worker without a span is a null row
                return [None if row[0] != row[0] else row for row in x.tolist()]
            return [None if v != v else v for v in x.tolist()]
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def as_written(x):
    """``x`` (a record, a list of them, any of their fields) as it reads back from a records file: arrays as lists,
    NaN as None. Records with arrays do not compare with ``==``; their written forms do.

    >>> as_written({"worker_sent": np.array([0.5, np.nan]), "responders": np.array([2, 0])})
    {'worker_sent': [0.5, None], 'responders': [2, 0]}
    """
    return json.loads(json.dumps(x, default=jsonable))


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


DIVERGENCE_FACTOR = 10.0   # a last loss this many times the first (or a non-finite one): the run diverged


def divergence(records: list[dict[str, Any]]) -> str | None:
    """Why a training run counts as diverged, or None: a non-finite loss, or a loss at least
    :data:`DIVERGENCE_FACTOR` times the first recorded one (after iteration 0's step), even if it came back down
    later (small first batches at a full-batch step: the run's times then measure a blow-up). The summary says so
    (``diverged``, ``divergence_note``), as do the terminal and the report: such a run's times are not a comparison
    of schemes (a loss that grew tenfold on the way says more about the step than about the scheme)."""
    losses = [(r["iteration"], r["loss"]) for r in records if r.get("loss") is not None]
    if not losses:
        return None
    hint = ("the step is too large for the batch: give a smaller [run] lr (or the scheme a larger batch or "
            "max_batch)")
    bad = next(((t, loss) for t, loss in losses if not math.isfinite(loss)), None)
    if bad is not None:
        return f"diverged: the loss is {bad[1]} at iteration {bad[0]}; {hint}"
    (t0, first), (t1, peak) = losses[0], max(losses, key=lambda tl: tl[1])
    if peak > DIVERGENCE_FACTOR * abs(first) and peak > 0:
        last = losses[-1]
        then = f", {last[1]:.3g} at the end (iteration {last[0]})" if last[0] != t1 else ""
        return (f"diverged: the loss grew from {first:.3g} (iteration {t0}) to {peak:.3g} (iteration {t1}){then}; "
                f"{hint}")
    return None


def iteration_durations(records: list[dict[str, Any]], updates: int = 1) -> np.ndarray:
    """Each iteration's duration, ``end - start``; with ``updates > 1`` (an asynchronous scheme's ``n``, whose
    record is one update) of each round of that many records, from its first one's start to its last one's end
    (a last partial round is left out unless it is the only one): the work of a synchronous iteration."""
    ends = np.array([r["end"] for r in records])
    starts = np.array([r["start"] for r in records])
    if updates <= 1:
        return ends - starts
    full = max(len(records) // updates, 1)
    last = np.minimum(np.arange(1, full + 1) * updates, len(records)) - 1
    return ends[last] - starts[np.arange(full) * updates]


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
    if losses:
        note = divergence(records)
        summary["diverged"] = note is not None
        if note is not None:
            summary["divergence_note"] = note
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


RECORD_NUMBERS = ("start", "end", "ideal_end", "computed", "wasted", "messages")


def read_records(path: Path) -> tuple[list[dict], bool]:
    """The records of ``records.jsonl``, and whether every line was whole: a line that is not JSON (cut short,
    binary garbage) or not a record (not an object with the numbers a summary needs) is dropped."""
    if not path.is_file():
        return [], False
    records, whole = [], True
    for line in path.read_text(errors="replace").splitlines():   # undecodable bytes: that line is damaged
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            rec = None
        if _is_record(rec):
            records.append(rec)
        else:
            whole = False
    return records, whole


def _is_record(rec) -> bool:
    return (isinstance(rec, dict) and isinstance(rec.get("scheme"), str)
            and all(_is_number(rec.get(key)) for key in RECORD_NUMBERS)
            and all(rec.get(key) is None or _is_number(rec[key]) for key in ("loss", "residual", "grad_error"))
            and _are_responders(rec.get("responders"))
            and (_is_number(rec.get("load")) or isinstance(rec.get("load"), list)
                 and all(_is_number(x) for x in rec["load"])))


def _are_responders(x) -> bool:
    """A list of worker indices, or the compact form of :func:`gradcode.clusters.records.compact_responders`."""
    if isinstance(x, dict):
        return (type(x.get("count")) is int and type(x.get("last")) is int and isinstance(x.get("stragglers"), list)
                and all(type(i) is int for i in x["stragglers"]))
    return isinstance(x, list) and all(type(i) is int for i in x)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
