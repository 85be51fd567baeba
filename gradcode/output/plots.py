"""PNG plots of a comparison, drawn from the run records only (matplotlib, Agg backend, imported lazily).

- ``loss_vs_time.png``: loss against (virtual or wall) time, one line per scheme, one panel per delay model;
- ``iteration_time_cdf.png``: empirical CDF of the iteration times (all seeds pooled), one panel per delay model;
- ``tradeoff.png``: samples computed against speedup over sync (mean over seeds), one point per scheme, one panel
  per delay model;
- ``adaptive.png``: ``k``, the per-worker load and DropCompute's ``tau`` against the iteration, for the schemes
  that adapt them (the class attribute ``Scheme.adapts``); not drawn when no scheme adapts anything;
- ``timeline.png``: the first iterations of a few schemes (the lowest ``Scheme.timeline_rank`` first), one row per
  worker, titled with the cluster, delay model, seed and the schemes shown. Both clusters record every worker's
  own times (``worker_plan_received``, ``worker_compute``, ``worker_sent``, ``worker_arrived``;
  ``docs/design.md#records``): each worker's bar spans from when it got the plan to when its message arrived (to
  the end of its compute, or of the iteration, when none arrived), its compute hatched inside it, coloured by role:
  *busy* (a responder whose message was used), *waited-for* (the responder whose arrival ended the iteration),
  *wasted* (work that was discarded, often running on into the next iteration: a late worker finishes it first),
  *idle*. Records without per-worker times (``n >= WORKER_TIMES_MAX_N``) fall back to the ``busy`` spans of a
  training run, or to bars spanning the whole iteration.

Plots use the first seed, and the simulated cluster when it is present (the MPI runs otherwise). Panels wrap at
three per row, and a legend sits outside the axes (one per figure, the same colour per scheme in every panel), so
neither many delay models nor many schemes make a figure unreadable.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..clusters.records import iteration_durations, record_load, record_responders, record_spans, record_worker_times
from ..plumbing.registry import SCHEMES

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


MAX_COLUMNS = 3   # panels per row: five delay models in one row would make a 2340x324 strip
PANEL = (5.0, 3.8)   # inches per panel (width, height)


def _columns(count: int) -> int:
    """Columns of a grid of ``count`` panels: at most :data:`MAX_COLUMNS`, the rows as evenly filled as possible
    (4 panels: 2x2, not 3 + 1)."""
    rows = math.ceil(count / MAX_COLUMNS)
    return max(1, math.ceil(count / rows)) if count else 1


def _grid(plt, count: int, rows_each: int = 1, height: float = PANEL[1], width: float = PANEL[0]):
    """A figure of ``count`` panels wrapped at :data:`MAX_COLUMNS` per row, each panel ``rows_each`` axes high;
    returns the figure and, per panel, its column of axes (unused axes are hidden). Constrained layout keeps room
    for a legend placed outside the axes (``fig.legend(loc="outside right upper")``)."""
    cols = _columns(count)
    blocks = max(1, math.ceil(count / cols))
    fig, axes = plt.subplots(blocks * rows_each, cols, figsize=(width * cols, height * rows_each * blocks),
                             squeeze=False, layout="constrained")
    panels = [[axes[(i // cols) * rows_each + r][i % cols] for r in range(rows_each)] for i in range(count)]
    for i in range(count, blocks * cols):
        for r in range(rows_each):
            axes[(i // cols) * rows_each + r][i % cols].set_visible(False)
    return fig, panels


def _outside_legend(fig, axes: list) -> None:
    """One legend for the whole figure, right of every axes (it never covers a point), from the entries of
    ``axes`` (each label once)."""
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if entries:
        ncol = 1 if len(entries) <= 16 else 2
        legend = fig.legend(list(entries.values()), list(entries), loc="outside right upper", fontsize=7, ncol=ncol)
        # fewer than three panels a row: the figure grows by the legend's width, which constrained layout would take
        # from the panels (one panel, long labels: about half of the plot); a full row shares it among three
        if fig.get_figwidth() < MAX_COLUMNS * PANEL[0]:
            fig.set_figwidth(fig.get_figwidth() + legend.get_window_extent(fig.canvas.get_renderer()).width / fig.dpi)


def _save(fig, path: Path) -> None:
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=90)
    import matplotlib.pyplot as plt

    plt.close(fig)


def _palette(labels) -> dict[str, Any]:
    """One colour per scheme label, the same in every panel (tab10, tab20 beyond ten schemes)."""
    import matplotlib

    labels = list(dict.fromkeys(labels))
    cmap = matplotlib.colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def _per_delay(runs: list):
    """A figure of one panel per delay model: ``(fig, [(axes, delay)], colour of each scheme)``."""
    plt = _pyplot()
    delays = _delays(runs)
    colour = _palette(r.meta["scheme"] for r in runs)
    fig, panels = _grid(plt, len(delays))
    return fig, [(ax, delay) for (ax,), delay in zip(panels, delays, strict=True)], colour


def _finish(fig, axes: list, path: Path) -> None:
    _outside_legend(fig, axes)
    _save(fig, path)


def loss_vs_time(runs: list, path: Path) -> None:
    runs = _first_seed(_shown(runs))
    fig, panels, colour = _per_delay(runs)
    for ax, delay in panels:
        for run in (r for r in runs if r.meta["delay"] == delay):
            pts = [(rec["end"], rec["loss"]) for rec in run.records if rec.get("loss") is not None]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.plot(x, y, label=run.meta["scheme"] + ("" if run.complete else " (partial)"), lw=1.2,
                        color=colour[run.meta["scheme"]])
        target = runs[0].meta.get("target_loss")
        if target is not None:
            ax.axhline(target, color="grey", ls=":", lw=1)
        ax.set(title=f"{delay} ({runs[0].meta['cluster']})", xlabel="time", ylabel="loss", yscale="log")
    _finish(fig, [ax for ax, _ in panels], path)


def _updates(meta: dict[str, Any]) -> int:
    """Records per iteration of a run's scheme: an asynchronous scheme's ``n``, else 1."""
    return (meta.get("workers") or 1) if SCHEMES.get_or_base(meta["scheme_name"]).asynchronous else 1


def iteration_time_cdf(runs: list, path: Path) -> None:
    runs = _shown(runs)
    fig, panels, colour = _per_delay(runs)
    for ax, delay in panels:
        labels = list(dict.fromkeys(r.meta["scheme"] for r in runs if r.meta["delay"] == delay))
        for label in labels:
            # an asynchronous scheme's iteration: a round of n updates (the report's iteration times)
            d = np.sort(np.concatenate([iteration_durations(r.records, _updates(r.meta)) for r in runs
                                        if r.meta["delay"] == delay and r.meta["scheme"] == label]))
            ax.step(d, np.arange(1, len(d) + 1) / len(d), where="post", label=label, lw=1.2, color=colour[label])
        ax.set(title=f"{delay} ({runs[0].meta['cluster']})", xlabel="iteration time", ylabel="CDF", xscale="log")
    _finish(fig, [ax for ax, _ in panels], path)


def tradeoff(rows: list[dict[str, Any]], path: Path) -> None:
    """One panel per delay model (wrapped), one point per scheme, one legend of the schemes outside the axes: with
    many schemes a legend inside covered the points."""
    plt = _pyplot()
    clusters = {r["cluster"] for r in rows}
    rows = [r for r in rows if r["cluster"] == ("sim" if "sim" in clusters else sorted(clusters)[0])]
    delays = list(dict.fromkeys(r["delay"] for r in rows))
    colour = _palette(r["scheme"] for r in rows)
    fig, panels = _grid(plt, len(delays), height=4.2)
    use_target = any(r["speedup_target"] is not None for r in rows)
    key = "speedup_target" if use_target else "speedup_iteration"
    for (ax,), delay in zip(panels, delays, strict=True):
        for marker, label in zip(MARKERS, colour, strict=False):
            sel = [r for r in rows if r["delay"] == delay and r["scheme"] == label]
            xs = [r[key] for r in sel if r[key] is not None]
            ys = [r["samples_computed"] for r in sel if r["samples_computed"] is not None]
            if xs and ys:
                ax.scatter(np.mean(xs), np.mean(ys), marker=marker, color=colour[label], label=label)
        ax.axvline(1.0, color="grey", ls=":", lw=1)
        ax.set(xlabel="speedup over sync (" + ("time to target" if use_target else "mean iteration time") + ")",
               ylabel="samples computed (incl. wasted)", title=f"computation vs speedup: {delay}")
    _finish(fig, [ax for (ax,) in panels], path)


MARKERS = "osD^v<>pPX*hH8d" * 4   # with the colour, two points of different schemes never look alike


ADAPTED = {   # record field -> (its axis label in adaptive.png, its value in one record)
    "k": ("k", lambda rec: rec.get("k")),
    "load": ("mean load (units)", lambda rec: float(np.mean(rec["load"]))),
    "tau": ("tau (inf not drawn)", lambda rec: np.nan if rec.get("tau") is None or not np.isfinite(rec["tau"])
            else rec["tau"]),
}


def adapted_fields(runs: list) -> list[str]:
    """The record fields some run's scheme adapts (``Scheme.adapts``), in :data:`ADAPTED` order; empty when no
    adaptive scheme ran (then ``adaptive.png`` is not drawn)."""
    present = {f for r in runs for f in SCHEMES.get_or_base(r.meta["scheme_name"]).adapts}
    return [f for f in ADAPTED if f in present]


def adaptive(runs: list, path: Path) -> bool:
    """Draw ``adaptive.png``: one column of axes per delay model (wrapped), one row per adapted field; ``False``
    (nothing written) when no scheme adapts anything."""
    runs = _first_seed(_shown(runs))
    fields = adapted_fields(runs)
    if not fields:
        return False
    plt = _pyplot()
    delays = _delays(runs)
    colour = _palette(r.meta["scheme"] for r in runs)
    fig, panels = _grid(plt, len(delays), rows_each=len(fields), height=2.6)
    for column, delay in zip(panels, delays, strict=True):
        for run in (r for r in runs if r.meta["delay"] == delay):
            it = [rec["iteration"] for rec in run.records]
            for field in SCHEMES.get_or_base(run.meta["scheme_name"]).adapts:
                value = ADAPTED[field][1]
                column[fields.index(field)].step(it, [value(rec) for rec in run.records], where="post",
                                                 label=run.meta["scheme"], color=colour[run.meta["scheme"]])
        column[0].set_title(delay)
        for ax, field in zip(column, fields, strict=True):
            ax.set(ylabel=ADAPTED[field][0])
        column[-1].set(xlabel="iteration")
    _finish(fig, [ax for column in panels for ax in column], path)
    return True


ROLE_COLOURS = {"busy": "tab:green", "waited-for": "tab:red", "wasted": "tab:grey", "idle": "white"}


def _roles(rec: dict, n: int) -> list[str]:
    load = record_load(rec, n)
    roles = ["wasted" if x > 0 else "idle" for x in load]
    responders = record_responders(rec, n)
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
    order = sorted(first.values(),   # stable
                   key=lambda run: SCHEMES.get_or_base(run.meta["scheme_name"]).timeline_rank)
    return order[:panels]


CLUSTER_NAMES = {"sim": "simulated cluster (virtual clock)", "mpi": "MPI cluster (wall clock / time_scale)"}


def timeline_title(runs: list, shown: list, iterations: int) -> str:
    """Which cluster, delay model and seed, and which schemes (of how many) the timeline shows."""
    meta = shown[0].meta
    total = len(dict.fromkeys(r.meta["scheme"] for r in runs))
    cluster = CLUSTER_NAMES.get(meta["cluster"], f"{meta['cluster']} cluster")
    which = ", ".join(r.meta["scheme"] for r in shown)
    more = "" if total == len(shown) else f" ({len(shown)} of {total} schemes)"
    return (f"Timeline, {cluster}, delay {meta['delay']}, seed {meta['seed']}, first {iterations} iterations: "
            f"{which}{more}")


def timeline(runs: list, path: Path, iterations: int = 6, panels: int = 4) -> None:
    import textwrap

    plt = _pyplot()
    runs = _first_seed(_shown(runs))
    first = [r for r in runs if r.meta["delay"] == _delays(runs)[0]]
    shown = _timeline_runs(first, panels)
    fig, grid = _grid(plt, len(shown), height=3.4)
    for (ax,), run in zip(grid, shown, strict=True):
        for rec in run.records[:iterations]:
            n = _workers(run, rec)
            bars = worker_bars(rec, n)
            if bars is not None:
                for worker, left, width, computed, role in bars:
                    ax.barh(worker, width, left=left, color=ROLE_COLOURS[role], edgecolor="black", lw=0.3,
                            height=0.8)
                    if computed > 0:
                        ax.barh(worker, computed, left=left, color="none", edgecolor="black", lw=0, hatch="///",
                                height=0.8)
                ax.axvline(rec["end"], color="black", lw=0.5, alpha=0.5)
                continue
            if rec.get("busy") is not None:
                _exact_bars(ax, rec, n)
                continue
            for worker, role in enumerate(_roles(rec, n)):
                ax.barh(worker, rec["end"] - rec["start"], left=rec["start"], color=ROLE_COLOURS[role],
                        edgecolor="black", lw=0.3, height=0.8)
        records = run.records[:iterations]
        if records:   # wasted work can run far past the last iteration shown: cut the view there
            ax.set_xlim(records[0]["start"], records[-1]["end"] + 0.02 * (records[-1]["end"] - records[0]["start"]))
        ax.set(title=run.meta["scheme"], xlabel="time", ylabel="worker")
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=c, edgecolor="black", label=k) for k, c in ROLE_COLOURS.items()]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="compute (worker_compute)"))
    fig.legend(handles=handles, fontsize=7, loc="outside lower center", ncol=len(handles))  # below: the title is on top
    width = int(fig.get_figwidth() * 12)   # characters of a 10-point title per line, about
    fig.suptitle("\n".join(textwrap.wrap(timeline_title(first, shown, iterations), width)), fontsize=10)
    _save(fig, path)


def _workers(run, rec: dict) -> int:
    """``n``: the run's (``run.json``), else what the record shows (its per-worker lists, its responders)."""
    n = run.meta.get("workers")
    if isinstance(n, int) and n > 0:
        return n
    if rec.get("busy") is not None:
        return len(rec["busy"])
    if isinstance(rec["load"], (list, np.ndarray)):
        return len(rec["load"])
    if isinstance(rec["responders"], dict):
        return rec["responders"]["count"] + len(rec["responders"]["stragglers"])
    return max(rec["responders"], default=0) + 1


def worker_bars(rec: dict, n: int) -> list[tuple[int, float, float, float, str]] | None:
    """``(worker, left, width, compute, role)`` per worker that took part, from the record's per-worker times
    (either cluster); None if the record has none. A bar runs from the plan's receipt to the message's arrival,
    or, when none arrived by the end, to the end of the worker's compute if known, else to the iteration's end."""
    received = record_worker_times(rec, "worker_plan_received")
    if received is None:
        return None
    compute = record_worker_times(rec, "worker_compute")
    arrived = record_worker_times(rec, "worker_arrived")
    start, end = rec["start"], rec["end"]
    roles = _roles(rec, n)
    used = [i for i in record_responders(rec, n) if not math.isnan(arrived[i])]
    if used:   # the responder that arrived last ended the iteration
        roles[max(used, key=lambda i: arrived[i])] = "waited-for"
    bars = []
    for i in range(len(received)):
        if math.isnan(received[i]):
            continue
        left = start + received[i]
        stop = arrived[i] if not math.isnan(arrived[i]) else (
            received[i] + compute[i] if not math.isnan(compute[i]) else end - start)
        computed = 0.0 if math.isnan(compute[i]) else float(compute[i])
        bars.append((i, left, max(start + stop - left, 0.0), computed, roles[i]))
    return bars


def _exact_bars(ax, rec: dict, n: int) -> None:
    """Bars from the records' per-worker spans (the simulator writes them): each worker's own ``[begin, arrival]``;
    its role (used, the one waited for, wasted) as in :func:`_roles`. A thin line marks the iteration's end."""
    roles = _roles(rec, n)
    busy = record_spans(rec)
    used = [i for i in record_responders(rec, n) if not math.isnan(busy[i, 0])]
    if used:   # the responder that arrived last ended the iteration
        roles[max(used, key=lambda i: busy[i, 1])] = "waited-for"
    for worker, (begin, arrive) in enumerate(busy.tolist()):
        if math.isnan(begin):
            continue
        ax.barh(worker, arrive - begin, left=begin, color=ROLE_COLOURS[roles[worker]], edgecolor="black",
                lw=0.3, height=0.8)
    ax.axvline(rec["end"], color="black", lw=0.5, alpha=0.5)


def make_all(folder: Path, runs: list, rows: list[dict[str, Any]]) -> list[str]:
    """Draw every plot that has something to show into ``folder``; the file names written. A plot not drawn this
    time (``adaptive.png`` without an adaptive scheme) is removed if an earlier report left it."""
    folder.mkdir(parents=True, exist_ok=True)
    loss_vs_time(runs, folder / PLOTS[0])
    iteration_time_cdf(runs, folder / PLOTS[1])
    tradeoff(rows, folder / PLOTS[2])
    drew_adaptive = adaptive(runs, folder / PLOTS[3])
    timeline(runs, folder / PLOTS[4])
    written = [p for p in PLOTS if p != PLOTS[3] or drew_adaptive]
    for name in set(PLOTS) - set(written):
        (folder / name).unlink(missing_ok=True)
    return written
