"""The figures of a sweep's regime map (matplotlib, Agg backend, imported lazily), drawn from the sweep rows and
:func:`gradcode.output.regimes.winners`; :func:`write_figures` is the entry point.

- ``regime_map.png``, two swept keys or more: one heatmap per cluster and delay model (and per combination of the
  keys after the second), x = the first key's values, y = the second's, each cell coloured by its winner (a fixed
  colour per scheme label, sync grey) and annotated with the winner's speedup over sync; a tie within the 95% CI is
  hatched and starred, a cell ranked by mean iteration time daggered, a cell not in the grid (``zip``) left blank.
  One swept key (or none: the cells in order): the metric against the swept value, one line per scheme with its
  95% CI band, log-y when the values span more than 10x.
- ``computation_speedup.png``: computation per step (computed load units / iterations) against the speedup over
  sync of the same cell, one point per scheme and cell, one panel per cluster and delay model.

Panels wrap at three per row and the figure grows with the panels and the cells; legends sit outside the axes.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from ..errors import ConfigError
from ..plumbing.outdir import writable_folder
from .plots import MARKERS, _grid, _pyplot
from .regimes import (
    COMPUTATION,
    FALLBACK,
    FELL_BACK,
    MAX_PANELS,
    REGIME_MAP,
    TIE,
    TITLES,
    _groups,
    _hashable,
    _is_baseline,
    _number,
    _speedup,
    _text,
    winners,
)

NO_WINNER = "lightgrey"


def scheme_colours(rows: list[dict]) -> dict[str, str]:
    """A fixed colour per scheme label, in order of first appearance; the baseline (sync) grey."""
    import matplotlib

    palette = [c for c in matplotlib.colormaps["tab10"].colors if c != matplotlib.colormaps["tab10"].colors[7]]
    palette += list(matplotlib.colormaps["tab20"].colors[1::2])
    labels = list(dict.fromkeys(r["scheme"] for r in rows))
    base = {r["scheme"] for r in rows if _is_baseline(r)}
    others = [label for label in labels if label not in base]
    colours = {label: palette[i % len(palette)] for i, label in enumerate(others)}
    return {label: ("tab:gray" if label in base else colours[label]) for label in labels}


def _figure(plt, panels: int, width: float, height: float):
    """:func:`gradcode.output.plots._grid` (at most three panels per row, unused axes hidden), as a flat list of
    axes."""
    fig, grid = _grid(plt, panels, height=height, width=width)
    return fig, [ax for (ax,) in grid]


def _save(plt, fig, path: Path) -> None:
    fig.savefig(path, dpi=90, bbox_inches="tight")   # "tight": the legends outside the axes are kept
    plt.close(fig)


def _values(items: list[dict], path: str) -> list:
    return list(dict.fromkeys(_hashable(w[path]) for w in items))


# --- regime_map.png -------------------------------------------------------------------------------------------
def regime_map(rows: list[dict], table: list[dict], swept: list[str], path: Path, metric: str) -> bool:
    """Draw the regime map (see the module docstring); False when nothing was drawn."""
    plt = _pyplot()
    keys = swept or ["cell"]
    if len(keys) == 1:
        return _lines(plt, rows, keys[0], path, metric)
    return _heatmaps(plt, rows, table, keys, path, metric)


def _shown(families: dict) -> tuple[list, str]:
    """The first MAX_PANELS families, and a note when some are left out."""
    items = list(families.items())
    note = f" (first {MAX_PANELS} of {len(items)} panels shown)" if len(items) > MAX_PANELS else ""
    return items[:MAX_PANELS], note


def _heatmaps(plt, rows, table, keys, path, metric) -> bool:
    xs, ys, rest = _values(table, keys[0]), _values(table, keys[1]), keys[2:]
    families = _groups(table, lambda w: (w["cluster"], w["delay"], *(_hashable(w[k]) for k in rest)))
    shown, note = _shown(families)
    colours = scheme_colours(rows)
    fig, axes = _figure(plt, len(shown), width=max(4.0, 1.25 * len(xs) + 1.6), height=max(3.0, 0.75 * len(ys) + 1.6))
    for ax, ((cluster, delay, *_), cells) in zip(axes, shown, strict=True):
        for w in cells:
            _heat_cell(ax, w, xs.index(_hashable(w[keys[0]])), ys.index(_hashable(w[keys[1]])), colours, metric)
        extra = ", ".join(f"{k} = {_text(cells[0][k])}" for k in rest)    # the keys after the first two
        ax.set(xlim=(-0.5, len(xs) - 0.5), ylim=(-0.5, len(ys) - 0.5), xlabel=keys[0], ylabel=keys[1],
               xticks=range(len(xs)), yticks=range(len(ys)),
               title=f"{cluster}, {delay}" + (f"\n{extra}" if extra else ""))
        ax.set_xticklabels([_text(v) for v in xs], fontsize=8)
        ax.set_yticklabels([_text(v) for v in ys], fontsize=8)
    _heat_legend(fig, [w for _, cells in shown for w in cells], colours, metric)
    fig.suptitle(f"Winner by {TITLES[metric]} and its speedup over sync{note}", fontsize=11)
    _save(plt, fig, path)
    return True


def _heat_cell(ax, w: dict, ix: int, iy: int, colours: dict, metric: str) -> None:
    """One cell: the winner's colour, its speedup over sync (``*`` tie, ``†`` ranked by mean iteration time)."""
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Rectangle

    colour = colours.get(w["winner"], NO_WINNER) if w["winner"] else NO_WINNER
    ax.add_patch(Rectangle((ix - 0.5, iy - 0.5), 1, 1, facecolor=colour, edgecolor="white", lw=1.5,
                           hatch="//" if w["tied"] else None))
    if not w["winner"]:
        text = "no value"
    else:
        speed = "no sync" if w["sync"] is None else "-" if w["speedup"] is None else f"{w['speedup']:.2f}x"
        text = speed + TIE * bool(w["tied"]) + FELL_BACK * (w["metric"] != metric) + f"\n{w['winner']}"
    dark = sum(c * k for c, k in zip(to_rgb(colour), (0.299, 0.587, 0.114), strict=True)) < 0.5
    ax.text(ix, iy, text, ha="center", va="center", fontsize=7, color="white" if dark else "black",
            bbox=None if not w["tied"] else {"facecolor": colour, "edgecolor": "none", "pad": 1})


def _heat_legend(fig, cells: list[dict], colours: dict, metric: str) -> None:
    """The winners' colours, then what the marks mean (only the marks drawn)."""
    from matplotlib.patches import Patch

    labels = dict.fromkeys(w["winner"] for w in cells if w["winner"])
    handles = [Patch(facecolor=colours[label], label=label) for label in labels]
    handles += [Patch(facecolor="white", edgecolor="black", hatch="//", label=f"{TIE} tie: another scheme's 95% CI "
                      "overlaps the winner's")]
    if any(not w["winner"] for w in cells):
        handles.append(Patch(facecolor=NO_WINNER, label="no scheme has a value"))
    if any(w["winner"] and w["metric"] != metric for w in cells):
        handles.append(Patch(facecolor="white", edgecolor="none", label=f"{FELL_BACK} no scheme has "
                             f"{TITLES[metric]}: ranked by mean iteration time"))
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8, title="winner")


def _lines(plt, rows, key, path, metric) -> bool:
    """One swept key: each scheme's metric against the swept value, with its CI band."""
    families = _groups(rows, lambda r: (r["cluster"], r["delay"]))
    shown, note = _shown(families)
    colours = scheme_colours(rows)
    xs = _values(rows, key)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in xs)
    fig, axes = _figure(plt, len(shown), width=max(4.5, 0.5 * len(xs) + 3.0), height=3.6)
    drawn = False
    for ax, ((cluster, delay), family) in zip(axes, shown, strict=True):
        used = metric if any(_number(r, metric) is not None for r in family) else FALLBACK
        for label, series in _groups(family, lambda r: r["scheme"]).items():
            drawn |= _line(ax, series, key, xs, numeric, used, colours[label], label)
        _log_if_wide(ax, [_number(r, used) for r in family], "y")
        ax.set(xlabel=key, ylabel=TITLES[used] + " (95% CI band)", title=f"{cluster}, {delay}"
               + (f" {FELL_BACK} (no scheme has {TITLES[metric]})" if used != metric else ""))
        if not numeric:
            ax.set_xticks(range(len(xs)), [_text(v) for v in xs], fontsize=8)
    handles, labels = next(((h, lab) for h, lab in (ax.get_legend_handles_labels() for ax in axes) if h), ([], []))
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8, title="scheme")
    fig.suptitle(f"{TITLES[metric]} against {key}{note}", fontsize=11)
    _save(plt, fig, path)
    return drawn


def _line(ax, series: list[dict], key: str, xs: list, numeric: bool, used: str, colour, label: str) -> bool:
    """One scheme's line and CI band, gaps where it has no value; False when it has none."""
    points = [(r[key] if numeric else xs.index(_hashable(r[key])), _number(r, used), _number(r, used + "_ci") or 0.0)
              for r in series]
    points = sorted((p for p in points if p[1] is not None), key=lambda p: p[0])
    if not points:
        return False
    x, y, half = zip(*points, strict=True)
    ax.plot(x, y, marker="o", ms=3, lw=1.3, color=colour, label=label)
    ax.fill_between(x, [a - b for a, b in zip(y, half, strict=True)], [a + b for a, b in zip(y, half, strict=True)],
                    color=colour, alpha=0.18, lw=0)
    return True


def _log_if_wide(ax, values: list, axis: str) -> None:
    """Log scale when the positive values span more than 10x."""
    positive = [v for v in values if v is not None and v > 0]
    if positive and max(positive) > 10 * min(positive):
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


# --- computation_speedup.png ----------------------------------------------------------------------------------
def per_step(row: dict) -> float | None:
    """Load units computed per step: ``computed_units / iterations`` (iterations: the row's, else
    ``total_time / mean_iteration_time``, exact when every seed ran the same number of iterations)."""
    units, iterations = _number(row, "computed_units"), _number(row, "iterations")
    if iterations is None:
        total, mean = _number(row, "total_time"), _number(row, FALLBACK)
        iterations = total / mean if total is not None and mean else None
    return units / iterations if units is not None and iterations else None


def _points(rows: list[dict], table: list[dict]) -> list[tuple]:
    """(cluster, delay, label, computation per step, speedup over sync) for every scheme and cell that has both."""
    by_cell = {(_hashable(w["cell"]), w["cluster"], w["delay"]): w for w in table}
    sync = {(_hashable(r["cell"]), r["cluster"], r["delay"]): r for r in rows if _is_baseline(r)}
    out = []
    for row in rows:
        key = (_hashable(row["cell"]), row["cluster"], row["delay"])
        if key not in sync:
            continue
        used = by_cell[key]["metric"]
        speed = _speedup(_number(sync[key], used), _number(row, used), used)
        work = per_step(row)
        if speed is not None and work is not None:
            out.append((row["cluster"], row["delay"], row["scheme"], work, speed))
    return out


def computation_speedup(rows: list[dict], table: list[dict], path: Path) -> bool:
    """Draw computation per step against speedup over sync; False (nothing written) when no point has both."""
    points = _points(rows, table)
    if not points:
        return False
    plt = _pyplot()
    families = _groups(points, lambda p: (p[0], p[1]))
    shown, note = _shown(families)
    colours = scheme_colours(rows)
    markers = {label: MARKERS[i % len(MARKERS)] for i, label in enumerate(colours)}
    fig, axes = _figure(plt, len(shown), width=4.8, height=3.8)
    for ax, ((cluster, delay), pts) in zip(axes, shown, strict=True):
        for label, mine in _groups(pts, lambda p: p[2]).items():
            ax.scatter([p[3] for p in mine], [p[4] for p in mine], marker=markers[label], color=colours[label],
                       label=label, s=22, alpha=0.85)
        ax.axhline(1.0, color="grey", ls=":", lw=1)
        _log_if_wide(ax, [p[3] for p in pts], "x")
        ax.set(title=f"{cluster}, {delay}", xlabel="computation per step (load units)",
               ylabel="speedup over sync")
    handles = {}
    for ax in axes:
        handles.update(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    fig.legend(list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8,
               title="scheme (one point per cell)")
    fig.suptitle(f"Computation against speedup over sync, every cell{note}", fontsize=11)
    _save(plt, fig, path)
    return True


def write_figures(rows: list[dict], swept: list[str], out: Path, metric: str = "time_to_target", *,
                  jobs: int = 1) -> list[str]:
    """Draw ``regime_map.png`` and ``computation_speedup.png`` into folder ``out``; the names written (none when
    there is nothing to draw: no sync, or no scheme with a value). ``jobs > 1``: the second figure is drawn in a
    forked process while this one draws the first (matplotlib is single-threaded, and the figures are a parallel
    sweep's serial tail)."""
    table = winners(rows, swept, metric)
    if not any(_is_baseline(r) for r in rows) or not any(w["winner"] for w in table):
        return []
    if not isinstance(out, (str, Path)):
        raise ConfigError(f"out must be the folder to write the figures into (a path), not {out!r}")
    out = writable_folder(out, "the figures' folder")
    if jobs < 2 or "fork" not in multiprocessing.get_all_start_methods():
        drew = (regime_map(rows, table, list(swept), out / REGIME_MAP, metric),
                computation_speedup(rows, table, out / COMPUTATION))
    else:
        _pyplot()      # imported once, before the fork
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
            second = pool.submit(computation_speedup, rows, table, out / COMPUTATION)
            drew = (regime_map(rows, table, list(swept), out / REGIME_MAP, metric), second.result())
    return [name for name, made in zip((REGIME_MAP, COMPUTATION), drew, strict=True) if made]
