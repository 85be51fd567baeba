"""Results of a comparison, rebuilt from the records alone: ``summary.csv``, ``summary.json``, ``report.md`` (and
the same as one page to browse, ``report.html``: :mod:`gradcode.output.report_html`), plots.

Design
------
The report reads each run folder written by :mod:`gradcode.study.harness` (``run.json``: labels and unit constants;
``records.jsonl``: what the cluster measured; ``COMPLETE``: the run finished) and turns every run into one summary
row with :func:`gradcode.clusters.records.summarize` plus unit conversions, so ``gradcode report FOLDER`` reproduces
``summary.csv`` / ``summary.json`` byte for byte. A run without its ``COMPLETE`` marker (interrupted, or failed), or
whose records do not match it (damaged), is reported with ``status = "partial"`` and flagged, with the reason,
wherever it appears; an unparsable line is dropped. A run folder whose ``run.json`` fingerprint is not the one
``experiment.json`` expects (left by another spec or other inputs, not redone yet) is left out.

Row fields (one row per scheme, delay model, seed and cluster; times in the delay model's units on both clusters:
the MPI cluster divides wall-clock seconds by ``[run] time_scale``):

- ``mean/p50/p95_iteration_time``, ``total_time``, ``ideal_total_time`` (the time the delays imply, summed),
  ``overhead_ratio = total_time / ideal_total_time`` (1 on the simulator; MPI: runtime overhead);
- ``time_to_target`` (end of the first iteration whose loss reaches ``[run] target_loss``; empty if never),
  ``final_loss``; ``time_to_accuracy`` (end of the first iteration whose held-out ``test_accuracy`` reaches
  ``[run] target_accuracy``; empty if never or not set) and ``final_test_accuracy`` (the last one evaluated);
- ``computed_units`` / ``wasted_units``: load units computed by every worker that started, including the late
  workers whose work was discarded (``wasted``); ``samples_computed`` / ``samples_wasted`` = units x samples per
  unit (``[run] batch`` or the scheme's ``batch``, adaptive_k_load's ``max_batch``; the partition size
  ``N / n_parts``, ``N`` samples, without mini-batches);
- ``wasted_fraction = wasted_units / computed_units``: the share of the computation no combine used;
- ``messages`` and ``bytes = messages x d x 8`` (a streaming scheme: the floats its records count x 8)
  (x 2 for complex codes, whose messages carry two reals per entry;
  DropCompute's All-Reduce counted as one d-vector per worker);
- ``mean_residual``: mean decoding residual (n/a in the table for a scheme that does not decode: it averages);
  ``mean_grad_error``: mean over iterations of ``||g_hat - g|| / ||g||``, the estimate against the full gradient
  (records' ``grad_error``; training runs only), for every scheme; ``fallback_decodes``: iterations whose exact
  code could not decode exactly and fell back to least-squares weights (residual above the code's ``tol``: an
  approximate gradient);
- ``speedup_iteration`` = sync's mean iteration time / this one, and ``speedup_target`` = sync's time to target /
  this one, against the ``sync`` run (the scheme whose class is the ``baseline``) on the same delay model, seed and
  cluster. An asynchronous scheme's iteration times are of rounds of ``n`` updates (:func:`round_times`): ``n``
  gradients, the work of a synchronous iteration.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..clusters.records import iteration_durations, read_records, summarize
from ..clusters.run_view import per_host, per_worker, read_hosts, worker_span
from ..errors import ConfigError
from ..network import describe_network
from ..plumbing.registry import SCHEMES
from .numfmt import fmt_ci, fmt_value
from .report_html import write_html

COLUMNS = ["scheme", "delay", "seed", "cluster", "status", "iterations", "mean_iteration_time",
           "p50_iteration_time", "p95_iteration_time", "total_time", "ideal_total_time", "overhead_ratio",
           "time_to_target", "final_loss", "time_to_accuracy", "final_test_accuracy", "computed_units",
           "wasted_units", "wasted_fraction", "samples_computed", "samples_wasted", "messages", "bytes",
           "mean_residual", "mean_grad_error", "fallback_decodes", "speedup_iteration", "speedup_target",
           "scheme_name", "run_id"]
# the key columns first (a wide table's left part is what a browser shows without scrolling)
AGGREGATED = [("time_to_target", "time to target"), ("speedup_target", "speedup to target"),
              ("mean_iteration_time", "mean it. time"), ("speedup_iteration", "speedup/it."),
              ("final_loss", "final loss"), ("mean_grad_error", "grad. error"), ("mean_residual", "residual"),
              ("p95_iteration_time", "p95 it. time"), ("time_to_accuracy", "time to accuracy"),
              ("final_test_accuracy", "test accuracy"), ("samples_computed", "samples computed"),
              ("wasted_fraction", "wasted"), ("bytes", "bytes sent")]
# the methods of a decode (a code's, partial_coded's), whose residual says how far the weights are from exact; the
# other schemes average what came (their records' residual is 0 by construction: "n/a", their grad. error says it)
DECODE_METHODS = ("exact", "optimal", "fallback", "approximate")
MPI_TOLERANCE = 0.10


@dataclass
class RunData:
    """One run folder read back: its metadata, its records, and whether it finished (``problem``: why not)."""

    meta: dict[str, Any]
    records: list[dict[str, Any]]
    complete: bool
    folder: Path
    problem: str | None = None


# --- reading --------------------------------------------------------------------------------------------------
# what summarize and the rows read from every record, and from every run.json
META_KEYS = ("run_id", "scheme", "delay", "seed", "cluster", "scheme_name")


def marker(run_dir: Path) -> dict[str, Any] | None:
    """The ``COMPLETE`` marker of a run folder (``None``: missing or unreadable)."""
    try:
        value = json.loads((run_dir / "COMPLETE").read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def run_problem(run_dir: Path) -> tuple[list[dict], str | None]:
    """A run folder's records and why it is not a finished run (``None``: it is)."""
    records, whole = read_records(run_dir / "records.jsonl")
    done = marker(run_dir)
    if not (run_dir / "COMPLETE").exists():
        return records, "no completion marker: interrupted or failed"
    if done is None or not isinstance(done.get("records"), int):
        return records, "its completion marker cannot be read"
    if not whole:
        return records, "records.jsonl holds an unparsable line (damaged)"
    if done["records"] != len(records):
        return records, f"its completion marker names {done['records']} records, records.jsonl holds {len(records)}"
    return records, None


def load_runs(folder: Path, skipped: list[str] | None = None) -> list[RunData]:
    """Every run of the experiment in ``folder`` that has records, in the experiment's order. A run folder written
    for another spec or other inputs than the experiment's (its ``run.json`` fingerprint differs) is left out; a run
    that cannot be read (a damaged ``run.json``, no readable record) too, and why is appended to ``skipped``."""
    info = _experiment(folder)
    ids = info.get("runs") or sorted(p.parent.name for p in (folder / "runs").glob("*/run.json"))
    expected = info.get("fingerprints") or {}
    runs = []
    for run_id in ids:
        run_dir = folder / "runs" / run_id
        meta, problem = _run_meta(run_dir / "run.json")
        if problem is not None:
            if skipped is not None:
                skipped.append(f"{run_id}: {problem}")
            continue
        if run_id in expected and meta.get("fingerprint") != expected[run_id]:
            continue     # written for another spec or other inputs
        records, problem = run_problem(run_dir)
        if not records:
            path = run_dir / "records.jsonl"
            if skipped is not None and path.is_file() and path.read_text(errors="replace").strip():
                skipped.append(f"{run_id}: records.jsonl holds no readable record (damaged)")
            continue
        runs.append(RunData(meta, records, problem is None, run_dir, problem))
    return runs


def _run_meta(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A run's ``run.json``, or why it cannot be used."""
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):   # ValueError: not JSON, or not UTF-8 text
        return None, "run.json is damaged (not JSON)"
    if not isinstance(meta, dict):
        return None, "run.json is damaged (not a JSON object)"
    missing = [key for key in META_KEYS if key not in meta]
    if missing:
        return None, f"run.json is damaged (no {', '.join(missing)})"
    wrong = [key for key in META_KEYS if not isinstance(meta[key], int if key == "seed" else str)]
    if wrong:
        return None, f"run.json is damaged ({', '.join(wrong)} of the wrong type)"
    return meta, None


def _experiment(folder: Path) -> dict[str, Any]:
    path = folder / "experiment.json"
    if not path.is_file():
        if not (folder / "runs").is_dir():
            raise ConfigError(f"{folder}: not a results folder of `gradcode compare` (no experiment.json, no runs/)")
        return {}
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as err:   # ValueError: not JSON, or not UTF-8 text
        raise ConfigError(f"{path} is damaged ({type(err).__name__}); rerun `gradcode compare` with the same spec "
                          "and --out to rewrite it") from None
    if not isinstance(info, dict) or not all(
            isinstance(info.get(key, []), list) and all(isinstance(x, str) for x in info.get(key, []))
            for key in ("runs", "notes", "clusters")):
        raise ConfigError(f"{path} is damaged: not an object whose 'runs', 'notes' and 'clusters' are lists of "
                          "strings; rerun `gradcode compare` with the same spec and --out to rewrite it")
    return info


# --- rows -----------------------------------------------------------------------------------------------------
def run_row(run: RunData) -> dict[str, Any]:
    """One summary row from a run's records (see the module docstring for the fields)."""
    meta, recs = run.meta, run.records
    s = summarize(recs, target_loss=meta.get("target_loss"), target_accuracy=meta.get("target_accuracy"))
    if scheme_class(meta).asynchronous:
        s.update(round_times(recs, meta.get("workers") or 1))
    per_unit, floats = meta.get("samples_per_unit"), meta.get("message_floats")
    ideal = s["ideal_total_time"]
    return {
        "scheme": meta["scheme"], "delay": meta["delay"], "seed": meta["seed"], "cluster": meta["cluster"],
        "status": "complete" if run.complete else "partial", "iterations": s["iterations"],
        "mean_iteration_time": s["mean_iteration_time"], "p50_iteration_time": s["p50_iteration_time"],
        "p95_iteration_time": s["p95_iteration_time"], "total_time": s["total_time"], "ideal_total_time": ideal,
        "overhead_ratio": s["overhead_ratio"],
        "time_to_target": s.get("time_to_target"), "final_loss": s["final_loss"],
        "time_to_accuracy": s.get("time_to_target_accuracy"), "final_test_accuracy": s.get("final_test_accuracy"),
        "computed_units": s["computed"], "wasted_units": s["wasted"], "wasted_fraction": s["wasted_fraction"],
        "samples_computed": None if per_unit is None else s["computed"] * per_unit,
        "samples_wasted": None if per_unit is None else s["wasted"] * per_unit,
        "messages": s["messages"],
        # a streaming scheme's messages differ in size: its records count the floats sent
        "bytes": s["floats"] * 8 if s.get("floats") is not None else None if floats is None
        else s["messages"] * floats * 8,
        "mean_residual": s["mean_residual"], "mean_grad_error": _mean_of(recs, "grad_error"),
        "decodes": any(r.get("method") in DECODE_METHODS for r in recs),
        "fallback_decodes": s.get("fallback_decodes"),
        "diverged": s.get("divergence_note"),
        "speedup_iteration": None, "speedup_target": None,
        "scheme_name": meta["scheme_name"], "run_id": meta["run_id"],
    }


def round_times(records: list[dict[str, Any]], n: int) -> dict[str, float]:
    """An asynchronous scheme's iteration times: of each round of ``n`` updates (``n`` gradients, the work of a
    synchronous iteration; :func:`gradcode.clusters.records.iteration_durations`)."""
    rounds = iteration_durations(records, n)
    return {"mean_iteration_time": float(rounds.mean()), "p50_iteration_time": float(np.percentile(rounds, 50)),
            "p95_iteration_time": float(np.percentile(rounds, 95))}


def _mean_of(records: list[dict], key: str) -> float | None:
    values = [r[key] for r in records if r.get(key) is not None]
    return float(np.mean(values)) if values else None


def scheme_class(meta: dict[str, Any]) -> type:
    """The class of a run's scheme, whose attributes say how to report it (``baseline``, ``adapts``,
    ``timeline_rank``); the base class if it cannot be imported here (a user's module that is not on the path)."""
    return SCHEMES.get_or_base(meta["scheme_name"])


def summary_rows(runs: list[RunData]) -> list[dict[str, Any]]:
    """All rows, with the speedups over the baseline (sync) run on the same delay model, seed and cluster."""
    rows = [run_row(r) for r in runs]
    base = {}
    for run, row in zip(runs, rows, strict=True):
        if scheme_class(run.meta).baseline:
            base.setdefault((row["delay"], row["seed"], row["cluster"]), row)
    for row in rows:
        ref = base.get((row["delay"], row["seed"], row["cluster"]))
        if ref is None:
            continue
        row["speedup_iteration"] = _ratio(ref["mean_iteration_time"], row["mean_iteration_time"])
        row["speedup_target"] = _ratio(ref["time_to_target"], row["time_to_target"])
    return rows


def _ratio(a, b) -> float | None:
    return None if a is None or b is None or b <= 0 else float(a / b)


def write_summary(folder: Path, rows: list[dict[str, Any]]) -> None:
    """``summary.csv`` and ``summary.json``."""
    write_csv(folder / "summary.csv", rows, COLUMNS)
    (folder / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")


def write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    """A table of ``rows``: an empty cell is a missing value, floats in full (``repr``), lists and tables as JSON."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: _csv_value(row.get(key)) for key in columns} for row in rows)
    path.write_text(buf.getvalue())


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value) if isinstance(value, (list, dict)) else value


# --- statistics -----------------------------------------------------------------------------------------------
def mean_ci(values: list[float]) -> tuple[float, float | None]:
    """Mean and the half-width of the t-based 95% confidence interval (``None`` with one value)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), None
    import scipy.stats

    half = float(scipy.stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return float(x.mean()), half


def groups(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Rows grouped by (cluster, delay, scheme), in order of appearance."""
    out: dict[tuple[str, str, str], list[dict]] = {}
    for row in rows:
        out.setdefault((row["cluster"], row["delay"], row["scheme"]), []).append(row)
    return out


def cell(rows: list[dict], key: str) -> str:
    """Mean ± CI half-width over the rows, to the digits the CI warrants (:func:`gradcode.output.numfmt.fmt_ci`);
    ``(j/m)`` when only j of the m rows have a value; ``n/a`` for a residual where nothing was decoded and a
    gradient error where no full gradient was computed (timing-only runs)."""
    if key == "mean_residual" and not any(r.get("decodes", True) for r in rows):
        return "n/a"
    if key == "mean_grad_error" and all(r.get(key) is None for r in rows):
        return "n/a"
    values = [r[key] for r in rows if r[key] is not None]
    if not values:
        return "-"
    text = fmt_ci(*mean_ci(values))
    return text if len(values) == len(rows) else f"{text} ({len(values)}/{len(rows)})"


def _group_mean(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r[key] is not None]
    return float(np.mean(values)) if len(values) == len(rows) and values else None


# --- schemes that are one scheme here --------------------------------------------------------------------------
SAME_FIELDS = ("start", "end", "loss", "grad_error", "residual", "computed", "wasted", "messages")


def identical_schemes(runs: list[RunData]) -> list[list[str]]:
    """Groups of scheme labels whose runs are the same, iteration for iteration, on every seed, delay model and
    cluster they share (the same :data:`SAME_FIELDS` in every record): e.g. ``fastest_k`` with ``k = n - b`` and
    ``backup`` with ``b`` under delays that never let a stale gradient arrive. Two or more seeds or settings agreeing
    is no accident of one draw."""
    prints: dict[str, dict[tuple, tuple]] = {}
    for run in runs:
        key = (run.meta["cluster"], run.meta["delay"], run.meta["seed"])
        prints.setdefault(run.meta["scheme"], {})[key] = tuple(tuple(r.get(f) for f in SAME_FIELDS)
                                                               for r in run.records)
    same: dict[tuple, list[str]] = {}
    for label, by_setting in prints.items():
        same.setdefault(tuple(sorted(by_setting.items(), key=repr)), []).append(label)
    return [labels for labels in same.values() if len(labels) > 1]


# --- report.md ------------------------------------------------------------------------------------------------
WORK_MARK = "†"   # next to a scheme whose worker-step is not sync's work; the footnote under the table says why


def work_notes(runs: list[RunData]) -> dict[str, str]:
    """Scheme label -> why its worker-step is not the same work as sync's (``run.json`` ``work_note``, from
    :attr:`gradcode.Scheme.work_note`), for the schemes where the user set it so."""
    return {r.meta["scheme"]: r.meta["work_note"] for r in runs if r.meta.get("work_note")}


def table(rows: list[dict[str, Any]], notes: dict[str, str] | None = None) -> list[str]:
    """The summary table, one line per (cluster, delay, scheme): mean ± 95% CI over seeds; a scheme with a work
    note (``notes``: label -> note) is marked, and the notes follow the table."""
    notes = notes or {}
    head = ["cluster", "delay", "scheme", "seeds"] + [title for _, title in AGGREGATED]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (cluster, delay, scheme), rs in groups(rows).items():
        flag = " (partial)" if any(r["status"] != "complete" for r in rs) else ""
        mark = f" {WORK_MARK}" if scheme in notes else ""
        cells = [cluster, delay, scheme + mark + flag, str(len(rs))] + [cell(rs, key) for key, _ in AGGREGATED]
        lines.append("| " + " | ".join(cells) + " |")
    shown = {r["scheme"] for r in rows}
    footnotes = [f"{WORK_MARK} {label}: {note}." for label, note in notes.items() if label in shown]
    return lines + ([""] + footnotes if footnotes else [])


def winners(rows: list[dict[str, Any]], target: float | None) -> dict[tuple[str, str], dict[str, str]]:
    """Per (cluster, delay): the text naming which scheme wins on time (``"time"``), on computation
    (``"computation"``) and on communication (``"communication"``); the reading and the figure captions say it."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    by_setting: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for (cluster, delay, scheme), rs in groups(rows).items():
        by_setting.setdefault((cluster, delay), {})[scheme] = rs
    for setting, schemes in by_setting.items():
        facts = out.setdefault(setting, {})
        time_key = "time_to_target" if target is not None else "mean_iteration_time"
        best = _least(schemes, time_key)
        if best is not None:
            speed = _group_mean(schemes[best], "speedup_target" if target is not None else "speedup_iteration")
            what = f"time to loss {target:g}" if target is not None else "mean iteration time"
            facts["time"] = (f"fastest ({what}): {best} ({cell(schemes[best], time_key)}"
                             + (f", {fmt_value(speed)}x sync" if speed is not None else "") + ")")
        else:
            facts["time"] = "no scheme reached the target loss in every seed"
        for key, what in (("samples_computed", "computation"), ("bytes", "communication")):
            if (best := _least(schemes, key)) is not None:
                facts[what] = f"least {what}: {best} ({cell(schemes[best], key)} {key.split('_')[0]})"
    return out


def _least(schemes: dict[str, list[dict]], key: str) -> str | None:
    """The scheme with the least mean of ``key`` over its rows; None when no scheme has it in every row."""
    means = {s: v for s, rs in schemes.items() if (v := _group_mean(rs, key)) is not None}
    return min(means, key=means.get) if means else None


def reading(rows: list[dict[str, Any]], target: float | None) -> list[str]:
    """Which scheme wins on time, on computation and on communication, per cluster and delay model."""
    return [f"- **{cluster}, {delay}**: " + " ".join(f"{text};" for text in facts.values())
            for (cluster, delay), facts in winners(rows, target).items()]


FIGURE_READINGS = {   # figure -> how to read it (one line; the winners of :func:`winners` follow where they apply)
    "loss_vs_time.png": ("Loss against time, one line per scheme (first seed): the line that falls first reaches "
                         "the target first", "time"),
    "iteration_time_cdf.png": ("How long an iteration takes (all seeds pooled): a curve further left is faster, a "
                               "long right tail is the stragglers", None),
    "tradeoff.png": ("Computation against speedup over sync (dotted line: sync's speed): right is faster, lower is "
                     "less work", "computation"),
    "adaptive.png": ("What the adaptive schemes chose at each iteration: k, the load per worker, DropCompute's "
                     "tau", None),
    "timeline.png": ("Who worked when in the first iterations: green a message used, red the one waited for, grey "
                     "work thrown away", None),
}


def figure_reading(name: str, rows: list[dict[str, Any]], target: float | None) -> str:
    """The one-line reading under a figure of the report: how to read it, then who wins on what it shows."""
    text, fact = FIGURE_READINGS.get(name, (name, None))
    facts = [f"{cluster}, {delay}: {got[fact]}" for (cluster, delay), got in winners(rows, target).items()
             if fact is not None and fact in got]
    return "Reading: " + text + (" (" + "; ".join(facts) + ")" if facts else "") + "."


def runs_table(runs: list[RunData]) -> list[str]:
    """One line per run with links (relative to the results folder) to its records, metadata and spec."""
    lines = ["| run | scheme | delay | seed | cluster | status | files |", "|---|---|---|---|---|---|---|"]
    for run in runs:
        m, where = run.meta, f"runs/{run.meta['run_id']}"
        files = " ".join(f"[{name}]({where}/{name})" for name in ("records.jsonl", "run.json", "spec.toml")
                         if (run.folder / name).is_file())
        lines.append(f"| {m['run_id']} | {m['scheme']} | {m['delay']} | {m['seed']} | {m['cluster']} | "
                     f"{'complete' if run.complete else 'partial'} | {files} |")
    return lines


def mpi_vs_sim(rows: list[dict[str, Any]]) -> list[str]:
    """Ratio MPI / simulator of the mean iteration time per (delay, scheme) over common seeds, flagged beyond 10%.

    Both are in model time units: the MPI cluster divides wall-clock seconds by ``time_scale``.
    """
    sim = {(r["delay"], r["scheme"], r["seed"]): r for r in rows if r["cluster"] == "sim"}
    pairs: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for r in rows:
        ref = sim.get((r["delay"], r["scheme"], r["seed"]))
        if r["cluster"] == "mpi" and ref is not None:
            pairs.setdefault((r["delay"], r["scheme"]), []).append(
                (r["mean_iteration_time"], ref["mean_iteration_time"], r["overhead_ratio"] or float("nan")))
    if not pairs:
        return []
    lines = ["| delay | scheme | MPI mean it. time | simulator mean it. time | ratio MPI/sim | MPI overhead ratio "
             "| within 10% |", "|---|---|---|---|---|---|---|"]
    for (delay, scheme), vals in pairs.items():
        mpi_t, sim_t, over = (float(np.mean(col)) for col in zip(*vals, strict=True))
        ratio = mpi_t / sim_t if sim_t > 0 else float("nan")
        ok = "yes" if abs(ratio - 1.0) <= MPI_TOLERANCE else "**NO (> 10%)**"
        cells = [delay, scheme, fmt_value(mpi_t), fmt_value(sim_t), f"{ratio:.3f}", f"{over:.3f}", ok]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(folder: Path, info: dict, runs: list[RunData], rows: list[dict], plots: list[str] | None) -> str:
    """The text of ``report.md`` (``plots``: the figures drawn, ``None`` when they were not asked for)."""
    target = next((r.meta.get("target_loss") for r in runs if r.meta.get("target_loss") is not None), None)
    out = [f"# Comparison: {info.get('name', folder.name)}", ""]
    desc = info.get("spec", {}).get("experiment", {}).get("description")
    if desc:
        out += [desc, ""]
    out += [f"Clusters: {', '.join(info.get('clusters', sorted({r['cluster'] for r in rows})))}; "
            f"{len(rows)} runs" + (" (--quick)" if info.get("quick") else "") + ". Times are in units of the delay"
            " model on both clusters (MPI: wall-clock seconds / time_scale).", "",
            describe_network(info.get("spec", {}).get("network")), ""]
    notes = list(info.get("notes", []))
    partial = [f"{r.meta['run_id']} ({r.problem})" for r in runs if not r.complete]
    if partial:
        notes.append(f"{len(partial)} run(s) are PARTIAL (reported from the records so far): " + "; ".join(partial))
    fell_back = [f"{r['run_id']} ({r['fallback_decodes']})" for r in rows if r.get("fallback_decodes")]
    if fell_back:
        notes.append(f"{len(fell_back)} run(s) had decodes that FELL BACK to least squares (not exact: residual above "
                     "tol; iterations in brackets): " + ", ".join(fell_back))
    for labels in identical_schemes(runs):
        notes.append(f"{' and '.join(labels)} are the SAME scheme here: identical records (times, losses, gradient "
                     "errors, work, messages) on every seed and delay model")
    diverged = [f"{r['run_id']} ({r['diverged'].removeprefix('diverged: ')})" for r in rows if r.get("diverged")]
    if diverged:
        notes.append(f"{len(diverged)} run(s) DIVERGED (their times compare nothing): " + "; ".join(diverged))
    if notes:
        out += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    out += ["## Summary", "", "Mean ± half-width of the t-based 95% confidence interval over seeds, the mean to the "
            "digits its interval warrants (one figure for both when the interval is wider than the mean, which cannot "
            "be told from zero); `(j/m)`: only j of m seeds have a value (e.g. reached the target).", ""]
    out += table(rows, work_notes(runs)) + [""]
    out += ["## Reading", ""] + reading(rows, target) + [""]
    out += ["## MPI vs simulator", ""]
    cross = mpi_vs_sim(rows)
    why = next((n for n in info.get("notes", []) if n.startswith("MPI runs skipped")), None)
    out += cross if cross else ["MPI runs are not part of this comparison" + (f" ({why})" if why else "") + "."]
    by_host = hosts_section(runs)
    if by_host:
        out += ["", "## Hosts (MPI)", "", "Response time: plan received to message arrived at the master (a worker's "
                "mean over the iterations it answered; a host's over its workers), model units.", ""] + by_host
    drawn = [line for p in plots for line in (f"![{p}](plots/{p})", figure_reading(p, rows, target), "")] \
        if plots is not None else ["Not drawn (a cell of a sweep); `gradcode report FOLDER` draws them.", ""]
    out += ["", "## Plots", ""] + drawn
    out += ["## Runs", "", "Each run's per-iteration records, its metadata and its spec (paths relative to this "
            "folder).", ""] + runs_table(runs) + [""]
    definitions = __doc__[__doc__.index("Row fields"):].strip()    # the module docstring's, which says them once
    out += ["## Definitions", "", definitions, ""]
    return "\n".join(out)


def build_report(folder: str | Path, figures: bool = True) -> Path:
    """Rebuild ``summary.csv``, ``summary.json``, ``report.md`` and ``plots/*.png`` (``figures=False``: no plots) of
    ``folder`` from its records."""
    from ..plumbing.outdir import writable_folder
    from . import plots

    folder = Path(folder)
    info = _experiment(folder)
    writable_folder(folder, "results folder")
    skipped: list[str] = []
    runs = load_runs(folder, skipped)
    if skipped:   # said in the report, not dropped in silence
        info = {**info, "notes": list(info.get("notes", [])) + [f"run skipped: {why}" for why in skipped]}
    if not runs:
        raise ConfigError(f"{folder}: no run has any records yet" + "".join(f"; skipped {why}" for why in skipped))
    rows = summary_rows(runs)
    write_summary(folder, rows)
    made = plots.make_all(folder / "plots", runs, rows) if figures else None
    (folder / "report.md").write_text(render(folder, info, runs, rows, made))
    write_html(folder / "report.md")
    return folder / "report.md"


def hosts_section(runs: list) -> list[str]:
    """A comparison's MPI runs by host (runs with a ``hosts.json``): per scheme and host, its workers, their mean
    response time and the share of their messages that arrived, averaged over the seeds and delay models."""
    cells: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        hosts = read_hosts(run.folder)
        if hosts:
            for h in per_host(per_worker(run.records), hosts):
                cells.setdefault((run.meta["scheme"], h["host"]), []).append(h)
    if not cells:
        return []
    lines = ["| scheme | host | workers | mean response | answered | runs |", "|---|---|---|---|---|---|"]
    for (scheme, host), hs in cells.items():
        means = [h["mean_response"] for h in hs if h["mean_response"] is not None]
        lines.append(f"| {scheme} | {host} | {worker_span(hs[0]['workers'])} | "
                     f"{fmt_value(float(np.mean(means))) if means else '-'} | "
                     f"{np.mean([h['answered'] for h in hs]):.0%} | {len(hs)} |")
    return lines
