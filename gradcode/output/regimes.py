"""Regime maps of a sweep: which scheme wins where, by how much over sync, and at what computation.

Reads the rows of a sweep (``sweep.json["rows"]`` or ``sweep.csv``; one row per cell x cluster x delay x scheme
holding the cell's swept values, ``scheme``, ``baseline``, and for each metric ``M`` its mean over seeds and ``M_ci``,
the half-width of its 95% confidence interval) and answers per cell, cluster and delay model:

- the **winner**: the scheme with the best mean of the metric (lower is better, except for the speedups), by
  default ``time_to_target``; where no scheme has that metric (none reached the target loss) the cell is ranked by
  ``mean_iteration_time`` instead, and says so (``"metric"``);
- the **ties**: the other schemes whose confidence interval overlaps the winner's (``|a - b| <= ci_a + ci_b``, a
  missing interval counting as zero): the data do not tell them from the winner;
- the **speedup** over sync (the row whose scheme class is the ``baseline``): sync's mean / the winner's (the
  inverse for a higher-is-better metric), a ratio of means over seeds, so not the mean of the per-seed
  ``speedup_*`` columns.

:func:`gradcode.output.regime_plots.write_figures` draws ``regime_map.png`` (two swept keys: a heatmap of the
winners with their speedup; one: the metric against the swept value; more: the first two, one panel per combination
of the others) and ``computation_speedup.png``; :func:`markdown` writes the report's "Regime map" section. Values a
row lacks (None, an empty CSV cell, NaN) are left out, never an error; rows of the wrong shape are a
:class:`ConfigError`.
"""

from __future__ import annotations

import json
import math
import numbers
from collections import Counter
from typing import Any

from ..errors import ConfigError
from .numfmt import fmt_ci
from .report import AGGREGATED, scheme_class

METRICS = [key for key, _ in AGGREGATED] + ["computed_units", "wasted_units", "total_time"]
FALLBACK = "mean_iteration_time"
HIGHER_IS_BETTER = frozenset({"speedup_iteration", "speedup_target"})
REQUIRED = ("cell", "cluster", "delay", "scheme")
REGIME_MAP, COMPUTATION = "regime_map.png", "computation_speedup.png"
MAX_PANELS = 24       # more panels than this are not readable: the first ones are drawn and the title says so
TIE, FELL_BACK = "*", "†"
TITLES = dict(AGGREGATED) | {"computed_units": "computed units", "wasted_units": "wasted units",
                              "total_time": "total time"}


# --- reading the rows -----------------------------------------------------------------------------------------
def _check(rows: Any, swept: Any, metric: Any) -> None:
    """Refuse rows, swept paths or a metric that cannot be read, naming what is accepted."""
    if not isinstance(metric, str) or metric not in METRICS:
        raise ConfigError(f"metric {metric!r} is not a sweep metric; accepted: {', '.join(METRICS)}")
    if not isinstance(swept, (list, tuple)) or not all(isinstance(p, str) and p for p in swept):
        raise ConfigError(f"swept must be a list of the swept paths (strings, as in [sweep]), not {swept!r}")
    if len(set(swept)) != len(swept):
        raise ConfigError(f"swept {list(swept)!r} names a path twice; accepted: each swept path once")
    reserved = set(swept) & {*REQUIRED, "scheme_name", "baseline", "seeds"}
    if reserved:
        raise ConfigError(f"swept {list(swept)!r}: {', '.join(sorted(reserved))} is a column of every sweep row, "
                          "not a swept path; accepted: the dotted paths of [sweep], e.g. 'delay.p'")
    _check_rows(rows, swept)
    for i, row in enumerate(rows):
        for key in (metric, metric + "_ci", FALLBACK, FALLBACK + "_ci", "computed_units", "iterations",
                    "total_time", "samples_computed"):
            _number(row, key, i)
        if str(row.get("baseline", "")).lower() not in ("true", "false", "1", "0", "", "none"):
            raise ConfigError(f"sweep row {i}: baseline = {row['baseline']!r}; accepted: true or false")


def _check_rows(rows: Any, swept: list[str]) -> None:
    """Rows are dicts with the columns every sweep row has, and every swept path."""
    if not isinstance(rows, (list, tuple)):
        raise ConfigError("rows must be a list of dicts (the rows of sweep.json or sweep.csv), "
                          f"not {type(rows).__name__}")
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise ConfigError(f"sweep row {bad} is a {type(rows[bad]).__name__}; accepted: a dict per row (the rows of "
                          "sweep.json or sweep.csv)")
    unknown = [p for p in swept if rows and not any(p in r for r in rows)]
    if unknown:
        raise ConfigError(f"swept path {unknown[0]!r} is a column of no sweep row; columns: "
                          f"{', '.join(map(str, rows[0]))}")
    for i, row in enumerate(rows):
        missing = [key for key in (*REQUIRED, *swept) if key not in row]
        if missing:
            raise ConfigError(f"sweep row {i} has no {', '.join(map(repr, missing))}: every row needs "
                              f"{', '.join(REQUIRED)} and one key per swept path ({', '.join(swept) or 'none'})")
        wrong = [key for key in REQUIRED[1:] if not isinstance(row[key], str) or not row[key]]
        if wrong or isinstance(row["cell"], bool) or not isinstance(row["cell"], (int, str)):
            key = wrong[0] if wrong else "cell"
            raise ConfigError(f"sweep row {i}: {key} = {row[key]!r}; accepted: cell an integer (the grid index), "
                              "cluster, delay and scheme non-empty strings (labels)")


def _number(row: dict, key: str, index: int | None = None) -> float | None:
    """``row[key]`` as a float; None when missing (absent, None, empty, NaN). ``index``: check, naming the row."""
    value = row.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            value = None if index is None else _not_a_number(row, key, index)
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        value = None if index is None else _not_a_number(row, key, index)
    return None if value is None or math.isnan(value) else float(value)


def _not_a_number(row: dict, key: str, index: int):
    raise ConfigError(f"sweep row {index}: {key} = {row[key]!r} is not a number; accepted: a number, or empty/None "
                      "when the metric is missing")


def _is_baseline(row: dict) -> bool:
    """The row's scheme is the reference of speedups: its ``baseline`` column, else its class (sync)."""
    flag = row.get("baseline")
    if isinstance(flag, str) and flag.lower() in ("true", "false", "1", "0"):
        return flag.lower() in ("true", "1")
    if isinstance(flag, (bool, int)):
        return bool(flag)
    return bool(row.get("scheme_name")) and scheme_class({"scheme_name": row["scheme_name"]}).baseline


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def _text(value: Any) -> str:
    """A swept value as shown on an axis or in a table."""
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def _groups(rows: list[dict], key) -> dict[Any, list[dict]]:
    """Rows grouped by ``key(row)``, in order of appearance."""
    out: dict[Any, list[dict]] = {}
    for row in rows:
        out.setdefault(key(row), []).append(row)
    return out


# --- winners --------------------------------------------------------------------------------------------------
def winners(rows: list[dict], swept: list[str], metric: str = "time_to_target") -> list[dict]:
    """One dict per (cell, cluster, delay), in order of appearance: ``cell``, the swept values, ``cluster``,
    ``delay``, ``metric`` (the one ranked by: ``metric``, or ``mean_iteration_time`` where no scheme has it),
    ``winner`` (label, None when no scheme has a value), ``tied`` (the other labels whose CI overlaps the winner's),
    ``value`` and ``ci`` (the winner's), ``speedup`` (over sync; None without sync or its value), ``sync`` (the
    baseline's label or None) and ``values`` (every ranked scheme's mean)."""
    _check(rows, swept, metric)
    cells = _groups(rows, lambda r: (_hashable(r["cell"]), r["cluster"], r["delay"]))
    return [_winner(group, swept, metric) for group in cells.values()]


def _winner(group: list[dict], swept: list[str], metric: str) -> dict:
    used = metric if any(_number(r, metric) is not None for r in group) else FALLBACK
    scored = {r["scheme"]: (_number(r, used), _number(r, used + "_ci") or 0.0) for r in group
              if _number(r, used) is not None}
    first = group[0]
    sync = next((r for r in group if _is_baseline(r)), None)
    out = {"cell": first["cell"], **{p: first[p] for p in swept}, "cluster": first["cluster"],
           "delay": first["delay"], "metric": used, "winner": None, "tied": [], "value": None, "ci": None,
           "speedup": None, "sync": None if sync is None else sync["scheme"],
           "values": {label: value for label, (value, _) in scored.items()},
           "missed": [_missed(r) for r in group if _number(r, used) is None]}
    if not scored:
        return out
    pick = max if used in HIGHER_IS_BETTER else min
    best = pick(scored, key=lambda label: scored[label][0])
    value, ci = scored[best]
    out.update(winner=best, value=value, ci=_number(next(r for r in group if r["scheme"] == best), used + "_ci"),
               tied=[label for label, (v, c) in scored.items() if label != best and abs(v - value) <= ci + c],
               speedup=None if sync is None else _speedup(_number(sync, used), value, used))
    return out


def _missed(row: dict) -> str:
    """A scheme left out of a cell's ranking, and how many of its seeds reached the target (a sweep row's
    ``reached`` of ``seeds``): a mean is given only when every seed has a value."""
    reached, seeds = row.get("reached"), row.get("seeds")
    return row["scheme"] + ("" if reached in (None, "") or seeds in (None, "") else f" ({reached}/{seeds})")


def _speedup(reference: float | None, value: float | None, metric: str) -> float | None:
    """How many times better than the reference (sync): ``reference / value``, inverted when higher is better."""
    if reference is None or value is None:
        return None
    if metric in HIGHER_IS_BETTER:
        reference, value = value, reference
    return reference / value if value > 0 and reference >= 0 else None


# --- report.md ------------------------------------------------------------------------------------------------
def markdown(rows: list[dict], swept: list[str], metric: str = "time_to_target") -> list[str]:
    """The lines of report.md's "Regime map" section (heading included): how to read it, a table of the cells'
    winners with their speedup over sync and their ties, and a plain reading generated from the table."""
    table = winners(rows, swept, metric)
    lines = ["## Regime map", "", _how_to_read(metric), ""]
    if not table:
        return lines + ["No sweep rows: nothing to rank.", ""]
    head = ["cell", *swept, "cluster", "delay", "winner", "value", "speedup vs sync", "tied within CI",
            "not ranked (seeds that reached it)"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_table_cells(w, swept, metric)) + " |" for w in table]
    return lines + ["", _reading(table, swept, metric), ""]


def _how_to_read(metric: str) -> str:
    """The paragraph above the table: what is ranked, how, and what the marks mean."""
    title, higher = TITLES[metric], metric in HIGHER_IS_BETTER
    text = (f"Winner of each cell by {title} ({'higher' if higher else 'lower'} is better; mean ± 95% CI over seeds); "
            f"speedup = {'the winner' if higher else 'sync'}'s / {'sync' if higher else 'the winner'}'s; tied: the "
            f"other schemes whose 95% CI overlaps the winner's (marked {TIE} in the map); not ranked: the schemes "
            "without a value on every seed (for time to target: how many seeds reached it).")
    if metric != FALLBACK:
        why = " (none reached the target loss)" if metric == "time_to_target" else ""
        text += f" {FELL_BACK}: no scheme has {title} in that cell{why}: ranked by mean iteration time instead."
    return text


def _table_cells(w: dict, swept: list[str], metric: str) -> list[str]:
    value = fmt_ci(w["value"], w["ci"]) + (f" {FELL_BACK}" if w["winner"] and w["metric"] != metric else "")
    speedup = "-" if w["speedup"] is None else f"{w['speedup']:.2f}x"
    if w["winner"] and w["sync"] is None:
        speedup = "no sync"
    return [_text(w["cell"]), *(_text(w[p]) for p in swept), str(w["cluster"]), str(w["delay"]),
            w["winner"] or "none (no value)", value, speedup, ", ".join(w["tied"]) or "-",
            ", ".join(w["missed"]) or "-"]


def _reading(table: list[dict], swept: list[str], metric: str) -> str:
    """One paragraph, from the data only: per cluster and delay model, how many cells each scheme wins and where,
    the ties, the range of speedups, and the cells that could not be ranked as asked."""
    families = _groups(table, lambda w: (w["cluster"], w["delay"]))
    sentences = []
    for (cluster, delay), cells in families.items():
        prefix = f"On {cluster}, {delay}: " if len(families) > 1 else ""
        sentences.append(prefix + _family_reading(cells, swept, metric))
    return " ".join(sentences)


def _family_reading(cells: list[dict], swept: list[str], metric: str) -> str:
    won = [w for w in cells if w["winner"]]
    counts = Counter(w["winner"] for w in won)
    parts = [f"{label} wins {count} of {len(cells)} cell{'s' * (len(cells) != 1)}{_where(label, cells, swept)}"
             for label, count in counts.most_common()]
    text = "; ".join(parts) if parts else f"no scheme has a value in any of the {len(cells)} cells"
    tied = [w for w in won if w["tied"]]
    if tied:
        text += f"; {len(tied)} of these wins are ties within the 95% CI"
    text += _speedup_reading(won)
    unranked = len(cells) - len(won)
    fell_back = sum(1 for w in won if w["metric"] != metric)
    no_sync = sum(1 for w in won if w["sync"] is None)
    notes = [f"; {unranked} cell{'s' * (unranked != 1)} without any value" * bool(unranked),
             f"; {fell_back} ranked by mean iteration time {FELL_BACK}" * bool(fell_back),
             f"; {no_sync} without sync (no speedup)" * bool(no_sync)]
    return text + "".join(notes) + "."


def _speedup_reading(won: list[dict]) -> str:
    speedups = sorted(w["speedup"] for w in won if w["speedup"] is not None and w["winner"] != w["sync"])
    sync_wins = sum(1 for w in won if w["winner"] == w["sync"])
    text = f"; sync itself wins {sync_wins}" if sync_wins else ""
    if speedups:
        text += (f"; the winner's speedup over sync is {speedups[0]:.2f}x" if len(speedups) == 1 else
                 f"; the winner's speedup over sync ranges from {speedups[0]:.2f}x to {speedups[-1]:.2f}x")
    return text


def _where(label: str, cells: list[dict], swept: list[str]) -> str:
    """Where ``label`` wins, as a range of each swept key that does not cover all of its values: "exactly where"
    when every cell in that range is a win, "all where" when the wins lie inside it with other cells."""
    mine = [w for w in cells if w["winner"] == label]
    if len(mine) == len(cells):
        return " (every cell)"
    conditions, inside = [], cells
    for path in swept:
        every = list(dict.fromkeys(_hashable(w[path]) for w in cells))
        held = list(dict.fromkeys(_hashable(w[path]) for w in mine))
        if set(held) == set(every):
            continue
        text, keep = _condition(path, held, every)
        conditions.append(text)
        inside = [w for w in inside if _hashable(w[path]) in keep]
    if not conditions:
        return ""
    how = "exactly where" if len(inside) == len(mine) else "all where"
    return f" ({how} {' and '.join(conditions)})"


def _condition(path: str, held: list, every: list) -> tuple[str, set]:
    """A short description of the values ``held`` among ``every`` value of ``path``, and the values it covers."""
    numeric = all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in every)
    if len(held) == 1:
        return f"{path} = {_text(held[0])}", set(held)
    if numeric:
        lo, hi = min(held), max(held)
        span = {v for v in every if lo <= v <= hi}
        if span == set(held):
            if hi == max(every):
                return f"{path} >= {_text(lo)}", span
            if lo == min(every):
                return f"{path} <= {_text(hi)}", span
            return f"{_text(lo)} <= {path} <= {_text(hi)}", span
    return f"{path} in {{{', '.join(_text(v) for v in held)}}}", set(held)
