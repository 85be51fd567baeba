"""PNG plots of a comparison, drawn from the run records only (matplotlib, Agg backend, imported lazily).

- ``loss_vs_time.png``: loss against (virtual or wall) time, one line per scheme, one panel per delay model;
- ``iteration_time_cdf.png``: empirical CDF of the iteration times (all seeds pooled), one panel per delay model;
- ``tradeoff.png``: samples computed against speedup over sync (mean over seeds), one point per scheme and delay;
- ``adaptive.png``: ``k``, the per-worker load and DropCompute's ``tau`` against the iteration, for the schemes
  that adapt them (the class attribute ``Scheme.adapts``);
- ``timeline.png``: the first iterations of a few schemes (the lowest ``Scheme.timeline_rank`` first), one row per
  worker. Simulated runs record every worker's
  own ``[begin, arrival]`` (``busy``), drawn as is, coloured by role: *busy* (a responder whose message was used),
  *waited-for* (the responder whose arrival ended the iteration), *wasted* (work that was discarded, often running
  on into the next iteration: a late worker finishes it first), *idle*. Records without ``busy`` (MPI runs) hold
  only each iteration's start, end, ordered responders and loads, so there every bar spans the whole iteration and
  only its colour carries the role.

Plots use the first seed, and the simulated cluster when it is present (the MPI runs otherwise).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .cluster import record_load
from .report import scheme_class

PLOTS = ("loss_vs_time.png", "iteration_time_cdf.png", "tradeoff.png", "adaptive.png", "timeline.png")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _shown(runs: list) -> list:
    """Runs of the preferred cluster (sim if present)."""
    clusters = {r.meta["cluster"] for r in runs}
    cluster = "sim" if "sim" in clusters else sorted(clusters)[0]
    return [r for r in runs if r.meta["cluster"] == cluster]


def _delays(runs: list) -> list[str]:
    return list(dict.fromkeys(r.meta["delay"] for r in runs))


def _first_seed(runs: list) -> list:
    seed = min(r.meta["seed"] for r in runs)
    return [r for r in runs if r.meta["seed"] == seed]


def _panels(plt, count: int, rows: int = 1, height: float = 3.6):
    fig, axes = plt.subplots(rows, count, figsize=(5.2 * count, height * rows), squeeze=False)
    return fig, axes


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    import matplotlib.pyplot as plt

    plt.close(fig)


def loss_vs_time(runs: list, path: Path) -> None:
    plt = _pyplot()
    runs = _first_seed(_shown(runs))
    delays = _delays(runs)
    fig, axes = _panels(plt, len(delays))
    for ax, delay in zip(axes[0], delays, strict=False):
        for run in (r for r in runs if r.meta["delay"] == delay):
            pts = [(rec["end"], rec["loss"]) for rec in run.records if rec.get("loss") is not None]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.plot(x, y, label=run.meta["scheme"] + ("" if run.complete else " (partial)"), lw=1.2)
        target = runs[0].meta.get("target_loss")
        if target is not None:
            ax.axhline(target, color="grey", ls=":", lw=1)
        ax.set(title=f"{delay} ({runs[0].meta['cluster']})", xlabel="time", ylabel="loss", yscale="log")
    axes[0][-1].legend(fontsize=7)
    _save(fig, path)


def iteration_time_cdf(runs: list, path: Path) -> None:
    plt = _pyplot()
    runs = _shown(runs)
    delays = _delays(runs)
    fig, axes = _panels(plt, len(delays))
    for ax, delay in zip(axes[0], delays, strict=False):
        labels = list(dict.fromkeys(r.meta["scheme"] for r in runs if r.meta["delay"] == delay))
        for label in labels:
            d = np.sort([rec["end"] - rec["start"] for r in runs if r.meta["delay"] == delay
                         and r.meta["scheme"] == label for rec in r.records])
            ax.step(d, np.arange(1, len(d) + 1) / len(d), where="post", label=label, lw=1.2)
        ax.set(title=f"{delay} ({runs[0].meta['cluster']})", xlabel="iteration time", ylabel="CDF", xscale="log")
    axes[0][-1].legend(fontsize=7)
    _save(fig, path)


def tradeoff(rows: list[dict[str, Any]], path: Path) -> None:
    plt = _pyplot()
    clusters = {r["cluster"] for r in rows}
    rows = [r for r in rows if r["cluster"] == ("sim" if "sim" in clusters else sorted(clusters)[0])]
    fig, axes = _panels(plt, 1, height=4.5)
    ax = axes[0][0]
    use_target = any(r["speedup_target"] is not None for r in rows)
    key = "speedup_target" if use_target else "speedup_iteration"
    for marker, delay in zip("osD^v<>", dict.fromkeys(r["delay"] for r in rows), strict=False):
        for label in dict.fromkeys(r["scheme"] for r in rows):
            sel = [r for r in rows if r["delay"] == delay and r["scheme"] == label]
            xs = [r[key] for r in sel if r[key] is not None]
            ys = [r["samples_computed"] for r in sel if r["samples_computed"] is not None]
            if xs and ys:
                ax.scatter(np.mean(xs), np.mean(ys), marker=marker, label=f"{delay}: {label}")
                ax.annotate(label, (np.mean(xs), np.mean(ys)), fontsize=6, alpha=0.8)
    ax.axvline(1.0, color="grey", ls=":", lw=1)
    ax.set(xlabel="speedup over sync (" + ("time to target" if use_target else "mean iteration time") + ")",
           ylabel="samples computed (incl. wasted)", title="computation vs speedup")
    ax.legend(fontsize=6, ncol=2)
    _save(fig, path)


ADAPTED = {   # record field -> (row of adaptive.png, its value in one record)
    "k": (0, lambda rec: rec.get("k")),
    "load": (1, lambda rec: float(np.mean(rec["load"]))),
    "tau": (2, lambda rec: np.nan if rec.get("tau") is None or not np.isfinite(rec["tau"]) else rec["tau"]),
}


def adaptive(runs: list, path: Path) -> None:
    plt = _pyplot()
    runs = _first_seed(_shown(runs))
    delays = _delays(runs)
    fig, axes = _panels(plt, len(delays), rows=3, height=2.6)
    for col, delay in enumerate(delays):
        for run in (r for r in runs if r.meta["delay"] == delay):
            it = [rec["iteration"] for rec in run.records]
            for field in scheme_class(run.meta).adapts:
                row, value = ADAPTED[field]
                axes[row][col].step(it, [value(rec) for rec in run.records], where="post", label=run.meta["scheme"])
        axes[0][col].set(title=delay, ylabel="k")
        axes[1][col].set(ylabel="mean load (units)")
        axes[2][col].set(ylabel="tau (inf not drawn)", xlabel="iteration")
        for row in axes:
            if row[col].get_legend_handles_labels()[0]:
                row[col].legend(fontsize=7)
    _save(fig, path)


ROLE_COLOURS = {"busy": "tab:green", "waited-for": "tab:red", "wasted": "tab:grey", "idle": "white"}


def _roles(rec: dict, n: int) -> list[str]:
    load = record_load(rec, n)
    roles = ["wasted" if x > 0 else "idle" for x in load]
    responders = list(rec["responders"])
    for i in responders:
        roles[i] = "busy"
    if responders and len(responders) < len(load):
        roles[responders[-1]] = "waited-for"
    return roles


def _timeline_runs(runs: list, panels: int) -> list:
    """One run per scheme family, the most telling families first (``timeline_rank``, then order of appearance)."""
    first = {}
    for run in runs:
        first.setdefault(run.meta["scheme_name"], run)
    order = sorted(first.values(), key=lambda run: scheme_class(run.meta).timeline_rank)   # stable
    return order[:panels]


def timeline(runs: list, path: Path, iterations: int = 6, panels: int = 4) -> None:
    plt = _pyplot()
    runs = _first_seed(_shown(runs))
    runs = _timeline_runs([r for r in runs if r.meta["delay"] == _delays(runs)[0]], panels)
    fig, axes = _panels(plt, len(runs), height=3.4)
    for ax, run in zip(axes[0], runs, strict=False):
        for rec in run.records[:iterations]:
            n = _workers(run, rec)
            if rec.get("busy") is not None:
                _exact_bars(ax, rec, n)
                continue
            for worker, role in enumerate(_roles(rec, n)):
                ax.barh(worker, rec["end"] - rec["start"], left=rec["start"], color=ROLE_COLOURS[role],
                        edgecolor="black", lw=0.3, height=0.8)
        shown = run.records[:iterations]
        if shown:   # wasted work can run far past the last iteration shown: cut the view there
            ax.set_xlim(shown[0]["start"], shown[-1]["end"] + 0.02 * (shown[-1]["end"] - shown[0]["start"]))
        ax.set(title=run.meta["scheme"], xlabel="time", ylabel="worker")
    from matplotlib.patches import Patch

    axes[0][-1].legend(handles=[Patch(facecolor=c, edgecolor="black", label=k) for k, c in ROLE_COLOURS.items()],
                       fontsize=7, loc="upper right")
    _save(fig, path)


def _workers(run, rec: dict) -> int:
    """``n``: the run's (``run.json``), else what the record shows (its per-worker lists, its responders)."""
    n = run.meta.get("workers")
    if isinstance(n, int) and n > 0:
        return n
    if rec.get("busy") is not None:
        return len(rec["busy"])
    if isinstance(rec["load"], list):
        return len(rec["load"])
    return max(rec["responders"], default=0) + 1


def _exact_bars(ax, rec: dict, n: int) -> None:
    """Bars from the records' per-worker spans (the simulator writes them): each worker's own ``[begin, arrival]``;
    its role (used, the one waited for, wasted) as in :func:`_roles`. A thin line marks the iteration's end."""
    roles = _roles(rec, n)
    used = [i for i in rec["responders"] if rec["busy"][i] is not None]
    if used:   # the responder that arrived last ended the iteration
        roles[max(used, key=lambda i: rec["busy"][i][1])] = "waited-for"
    for worker, span in enumerate(rec["busy"]):
        if span is None:
            continue
        ax.barh(worker, span[1] - span[0], left=span[0], color=ROLE_COLOURS[roles[worker]], edgecolor="black",
                lw=0.3, height=0.8)
    ax.axvline(rec["end"], color="black", lw=0.5, alpha=0.5)


def make_all(folder: Path, runs: list, rows: list[dict[str, Any]]) -> list[str]:
    """Draw every plot into ``folder``; the file names written."""
    folder.mkdir(parents=True, exist_ok=True)
    loss_vs_time(runs, folder / PLOTS[0])
    iteration_time_cdf(runs, folder / PLOTS[1])
    tradeoff(rows, folder / PLOTS[2])
    adaptive(runs, folder / PLOTS[3])
    timeline(runs, folder / PLOTS[4])
    return list(PLOTS)
