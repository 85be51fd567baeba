"""One run's folder read like a comparison's: who was slow, per worker and per host, and its timeline.

A folder of ``gradcode run`` (MPI) or ``gradcode simulate`` holds ``records.jsonl`` and ``summary.json`` (an MPI run
also ``hosts.json``: :mod:`mpi_runtime.hosts`). From them:

- a worker's **response time** in an iteration is ``worker_arrived - worker_plan_received`` (its plan in hand to its
  message at the master: compute, emulated delay and the send), and its **mean** is over the iterations in which it
  answered; ``answered`` is the share of iterations in which its message arrived;
- a host's row gathers its workers: their count, the mean of their response times, the share of their messages
  that arrived, and the slowest of them;
- :func:`scheme_text` names the scheme with its code (``coded cyclic_repetition s=1``), from the first record.

``gradcode report RUN`` writes ``report.md`` / ``report.html`` (summary, per-worker and per-host tables) and
``plots/timeline.png``; ``gradcode run`` prints :func:`slowest_lines` under its summary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from .numfmt import fmt_value

HOSTS_FILE = "hosts.json"     # written by an MPI run's rank 0 (mpi_runtime.hosts)


def read_hosts(folder: Path) -> list[str] | None:
    """The workers' hosts of a run folder (worker ``i`` at index ``i``), ``None`` without a readable ``hosts.json``
    (a simulated run, or an MPI run from before it was written)."""
    try:
        workers = json.loads((Path(folder) / HOSTS_FILE).read_text())["workers"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [str(h) for h in workers] if isinstance(workers, list) else None


def scheme_text(summary: dict, records: list[dict]) -> str:
    """The scheme's name with what picks it out: a code and its ``s`` (the records carry them), else the name."""
    first = records[0] if records else {}
    code = first.get("code")
    name = str(summary.get("scheme") or first.get("scheme") or "?")
    return name if not code else f"{name} {code}" + (f" s={first['s']}" if first.get("s") is not None else "")


def per_worker(records: list[dict]) -> list[dict[str, Any]]:
    """Per worker ``i``: ``worker``, ``mean_response`` (None if it never answered) and ``answered`` (a share)."""
    n = max((len(r.get("worker_arrived") or []) for r in records), default=0)
    out = []
    for i in range(n):
        times = [r["worker_arrived"][i] - r["worker_plan_received"][i] for r in records
                 if _has(r, "worker_arrived", i) and _has(r, "worker_plan_received", i)]
        out.append({"worker": i, "mean_response": float(np.mean(times)) if times else None,
                    "answered": len(times) / len(records) if records else 0.0})
    return out


def _has(rec: dict, key: str, i: int) -> bool:
    values = rec.get(key)
    return isinstance(values, list) and i < len(values) and values[i] is not None


def per_host(workers: list[dict], hosts: list[str]) -> list[dict[str, Any]]:
    """Per host (in order of first appearance): ``host``, ``workers`` (their indices), ``mean_response`` (over
    its workers' means), ``answered`` (mean share) and ``slowest`` (the worker with the largest mean)."""
    out = []
    for host in dict.fromkeys(hosts):
        mine = [w for w in workers if w["worker"] < len(hosts) and hosts[w["worker"]] == host]
        means = [w["mean_response"] for w in mine if w["mean_response"] is not None]
        slowest = max((w for w in mine if w["mean_response"] is not None), key=lambda w: w["mean_response"],
                      default=None)
        out.append({"host": host, "workers": [w["worker"] for w in mine],
                    "mean_response": float(np.mean(means)) if means else None,
                    "answered": float(np.mean([w["answered"] for w in mine])) if mine else 0.0,
                    "slowest": None if slowest is None else slowest["worker"]})
    return out


def _ranked(items: list[dict], top: int) -> list[dict]:
    return sorted((x for x in items if x["mean_response"] is not None), key=lambda x: -x["mean_response"])[:top]


def slowest_lines(records: list[dict], hosts: list[str] | None, top: int = 3) -> list[str]:
    """The slowest workers (and hosts, with several) by mean response time, in model units."""
    workers = per_worker(records)
    ranked = _ranked(workers, top)
    if not ranked:
        return []
    where = (lambda w: f" on {hosts[w['worker']]}") if hosts and len(hosts) == len(workers) else (lambda w: "")
    lines = ["  slowest workers      " + ", ".join(f"{w['worker']}{where(w)} ({fmt_value(w['mean_response'])}, "
                                                   f"answered {w['answered']:.0%})" for w in ranked)]
    if hosts and len(set(hosts)) > 1:
        lines.append("  slowest hosts        " + ", ".join(
            f"{h['host']} ({fmt_value(h['mean_response'])}, workers {_span(h['workers'])})"
            for h in _ranked(per_host(workers, hosts), top)))
    return lines


def _span(indices: list[int]) -> str:
    return ",".join(map(str, indices))


# --- gradcode report RUN --------------------------------------------------------------------------------------
def is_run_folder(folder: Path) -> bool:
    """A folder of one run (``gradcode run`` or ``gradcode simulate``), not of a comparison."""
    return (folder / "records.jsonl").is_file() and not (folder / "experiment.json").exists()


def build_run_report(folder: str | Path) -> Path:
    """``report.md`` (and ``report.html``, ``plots/timeline.png``) of a one-run folder; its path."""
    from ..plumbing.outdir import writable_folder
    from . import plots
    from .report import RunData, read_records
    from .report_html import write_html

    folder = Path(folder)
    writable_folder(folder, "run folder")
    records, _ = read_records(folder / "records.jsonl")
    if not records:
        raise ConfigError(f"{folder / 'records.jsonl'}: no record to report")
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    hosts = read_hosts(folder)
    cluster = summary.get("cluster") or ("mpi" if hosts else "sim")
    meta = {"scheme": scheme_text(summary, records), "scheme_name": records[0]["scheme"], "cluster": cluster,
            "delay": "of the run", "seed": 0, "run_id": folder.name, "workers": len(per_worker(records))}
    (folder / "plots").mkdir(exist_ok=True)
    plots.timeline([RunData(meta=meta, records=records, complete=True, folder=folder)],
                   folder / "plots" / "timeline.png")
    text = _render(folder, summary, records, hosts, meta)
    (folder / "report.md").write_text(text)
    write_html(folder / "report.md")
    return folder / "report.md"


def _render(folder: Path, summary: dict, records: list[dict], hosts: list[str] | None, meta: dict) -> str:
    out = [f"# Run: {folder.name}", "", f"{meta['scheme']}, {len(records)} iterations on the "
           f"{'MPI' if meta['cluster'] == 'mpi' else 'simulated'} cluster; times in model units "
           "(MPI: wall-clock seconds / time_scale).", "", "## Summary", "", "| field | value |", "|---|---|"]
    out += [f"| {k} | {fmt_value(v) if isinstance(v, float) else v} |" for k, v in summary.items()
            if not isinstance(v, (list, dict))]
    workers = per_worker(records)
    out += ["", "## Workers", "", "Response time: plan received to message arrived at the master, mean over the "
            "iterations the worker answered.", "", "| worker | host | mean response | answered |", "|---|---|---|---|"]
    out += [f"| {w['worker']} | {hosts[w['worker']] if hosts and w['worker'] < len(hosts) else '-'} | "
            f"{'-' if w['mean_response'] is None else fmt_value(w['mean_response'])} | {w['answered']:.0%} |"
            for w in workers]
    out += ["", "## Hosts", ""]
    if hosts:
        out += ["| host | workers | mean response | answered | slowest worker |", "|---|---|---|---|---|"]
        out += [f"| {h['host']} | {_span(h['workers'])} | "
                f"{'-' if h['mean_response'] is None else fmt_value(h['mean_response'])} | {h['answered']:.0%} | "
                f"{'-' if h['slowest'] is None else h['slowest']} |" for h in per_host(workers, hosts)]
    else:
        out += ["No hosts.json: a simulated run has no hosts (or the MPI run predates it)."]
    out += ["", "## Timeline", "", "![timeline.png](plots/timeline.png)", "",
            "Reading: each worker's bar from its plan to its message, coloured by its role in the iteration "
            "(hatched: its compute); a vertical line ends each iteration.", ""]
    return "\n".join(out)


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
        lines.append(f"| {scheme} | {host} | {_span(hs[0]['workers'])} | "
                     f"{fmt_value(float(np.mean(means))) if means else '-'} | "
                     f"{np.mean([h['answered'] for h in hs]):.0%} | {len(hs)} |")
    return lines
