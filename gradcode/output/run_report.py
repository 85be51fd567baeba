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

from ..clusters.run_view import per_host, per_worker, read_hosts, scheme_text, worker_span
from ..errors import ConfigError
from .numfmt import fmt_value


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
        out += [f"| {h['host']} | {worker_span(h['workers'])} | "
                f"{'-' if h['mean_response'] is None else fmt_value(h['mean_response'])} | {h['answered']:.0%} | "
                f"{'-' if h['slowest'] is None else h['slowest']} |" for h in per_host(workers, hosts)]
    else:
        out += ["No hosts.json: a simulated run has no hosts (or the MPI run predates it)."]
    out += ["", "## Timeline", "", "![timeline.png](plots/timeline.png)", "",
            "Reading: each worker's bar from its plan to its message, coloured by its role in the iteration "
            "(hatched: its compute); a vertical line ends each iteration.", ""]
    return "\n".join(out)


def report_main(args) -> int:
    """``gradcode report FOLDER``: a comparison's folder, or one run's (``gradcode run``, ``gradcode simulate``)."""
    from .report import build_report

    if is_run_folder(Path(args.folder)):
        path = build_run_report(args.folder)
        print(f"wrote {path}, {path.with_suffix('.html')} and {path.parent / 'plots' / 'timeline.png'}")
        return 0
    path = build_report(args.folder)
    print(f"wrote {path}, {path.with_suffix('.html')}, {path.parent / 'summary.csv'}, "
          f"{path.parent / 'summary.json'} and plots/")
    return 0
