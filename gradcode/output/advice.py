"""What ``gradcode advise`` says: the recommendation in words, the ranking and tuning tables, why the others lose,
and the files of ``--out``: ``advice.md``, ``advice.html``, ``advice.json``, ``ranking.png`` and ``tuning.png``.

Every sentence is computed from the :class:`gradcode.study.advise.Advice` it reads: the numbers in it are the
numbers of the tables. A scheme loses to the first by the ratio of its mean time to target,
``T / T_1 = (iterations / iterations_1) (iteration time / iteration time_1)``; the reason named first is the larger
factor: more iterations (a noisier gradient, its median relative error ``||g_hat - g|| / ||g||`` given) or longer
iterations (waiting for more, or slower, workers); then the load computed and the floats sent per iteration where
they are more than :data:`NOTABLE` times the first's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from .numfmt import fmt_ci, fmt_value
from .report import mean_ci

NOTABLE = 1.15        # a ratio of load or bytes worth naming
LOWEST = {"k": 1, "b": 1, "k0": 1, "s": 1, "burn_in": 0}    # the least value each parameter can take
DECODED = ("coded", "partial_coded")     # the families whose combine is a decode with a residual
SHORT_KEYS = ("k", "b", "k0", "burn_in", "max_batch", "s", "wait", "tau", "T")   # the parameters advise tunes


def short(trial) -> str:
    """``fastest_k k=4``, ``coded/cyclic_repetition s=2``, ``dropcompute tau=1.4``: the name and tuned keys."""
    table = trial.candidate.table
    name = str(table["name"]) + (f"/{table['code']}" if "code" in table else "")
    keys = [f"{k}={table[k]}" for k in SHORT_KEYS if k in table]
    return " ".join([name, *keys]) if keys or name == "sync" else f"{name} (defaults)"


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.inf


def _ci(trial) -> str:
    return fmt_ci(*interval(trial.times))


def _reached(trial) -> str:
    return f"{len(trial.seeds) - trial.missed}/{len(trial.seeds)}"


def _floats(trial) -> float | None:
    """Mean floats sent per iteration (None where the records do not count them)."""
    sent = trial.floats[np.isfinite(trial.floats)]
    return float(sent.mean()) if sent.size else None


def _times(x: float) -> str:
    return f"{x:.2f}x"


def _error(trial) -> str:
    return "n/a" if trial.grad_error is None else fmt_value(trial.grad_error)


# --- statistics -----------------------------------------------------------------------------------------------
def interval(values: np.ndarray) -> tuple[float | None, float | None]:
    """``(mean, half-width)`` of the 95% Student-t interval ``mean +- t_{0.975, m-1} s / sqrt(m)`` over the finite
    values (:func:`gradcode.output.report.mean_ci`); ``(None, None)`` if none is finite, half-width None for one."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return mean_ci(v) if v.size else (None, None)


def paired(a, b) -> tuple[float | None, float | None]:
    """The interval of trial ``a``'s time to target less trial ``b``'s, seed by seed (the same draws), over the
    seeds where both reached the target."""
    both = np.isfinite(a.times) & np.isfinite(b.times)
    return interval(a.times[both] - b.times[both])


# --- words ----------------------------------------------------------------------------------------------------
def recommendation(advice) -> list[str]:
    """The choice and its numbers, the runner-up and whether the seeds tell them apart, the gain of tuning."""
    best = advice.ranking[0]
    if not math.isfinite(best.mean_time):
        return [f"No scheme reached the target loss {fmt_value(advice.target)} within the spec's iterations on any "
                "seed: raise [run] iterations, or set a looser [run] target_loss (or --target-gap)."]
    lines = [f"Use {short(best)}: it reaches the target loss {fmt_value(advice.target)} in {_ci(best)} time units "
             f"(mean and 95% interval over {len(advice.seeds)} seeds, {_reached(best)} reached), "
             f"{fmt_value(best.iterations.mean())} iterations of {fmt_value(best.step.mean())} each."]
    if len(advice.ranking) > 1:
        second = advice.ranking[1]
        mean, half = paired(second, best)
        clear = mean is not None and half is not None and mean > half
        lines.append(f"The runner-up, {short(second)}, takes {fmt_ci(mean, half)} units longer on the same draws "
                     f"({_times(_ratio(second.mean_time, best.mean_time))}): "
                     + ("the seeds tell them apart." if clear else
                        "the interval includes 0, so the seeds do not tell them apart; run more --seeds."))
    default = advice.default(best.candidate.family)
    if default is not None and default is not best:
        mean, half = paired(default, best)
        clear = mean is not None and half is not None and mean > half
        lines.append(f"Its default setting, {short(default)}, takes {_times(_ratio(default.mean_time, best.mean_time))}"
                     f" as long ({fmt_ci(mean, half)} units more on the same draws): "
                     + ("tuning pays." if clear else "within the noise of the seeds; the default does as well."))
    return lines


def why(loser, best) -> str:
    """Why ``loser`` takes longer than ``best`` (module docstring)."""
    parts = []
    if loser.missed:
        parts.append(f"missed the target on {loser.missed} of {len(loser.seeds)} seeds")
    if not math.isfinite(loser.mean_time):
        return f"{short(loser)}: " + "; ".join(parts + [f"gradient error {_error(loser)}"])
    iters = _ratio(loser.iterations.mean(), best.iterations.mean())
    step = _ratio(loser.step.mean(), best.step.mean())
    if step >= iters:
        parts.append(f"its iterations take {_times(step)} as long (it waits for more workers, or more work), "
                     f"{_times(iters)} as many (gradient error {_error(loser)}, against {_error(best)})")
    else:
        parts.append(f"it needs {_times(iters)} the iterations (gradient error {_error(loser)}, "
                     f"against {_error(best)}), each {_times(step)} as long")
    load = _ratio(loser.computed.mean(), best.computed.mean())
    if load > NOTABLE:
        parts.append(f"computes {_times(load)} the load per iteration")
    sent = _ratio(_floats(loser), _floats(best)) if None not in (_floats(loser), _floats(best)) else 1.0
    if sent > NOTABLE:
        parts.append(f"sends {_times(sent)} the floats per iteration")
    return f"{short(loser)} ({_times(_ratio(loser.mean_time, best.mean_time))} the time): " + "; ".join(parts)


def same_runs(advice) -> list[str]:
    """Tuned settings of different families that ran identically on every seed (e.g. fastest_k k = n - b and
    backup b): one of them is enough."""
    out, tuned = [], advice.ranking
    for i, a in enumerate(tuned):
        for b in tuned[:i]:
            if np.array_equal(a.times, b.times) and np.array_equal(a.iterations, b.iterations):
                out.append(f"{short(a)} ran exactly as {short(b)} on every seed (the same rule here).")
    return out


def edges(advice) -> list[str]:
    """Tuned settings at the end of their grid (of three values or more): a value beyond it may do better."""
    out = []
    for family, trials in advice.trials.items():
        tuned = advice.tuned(family).candidate.table
        for key in SHORT_KEYS:
            values = sorted({t.candidate.table[key] for t in trials
                             if isinstance(t.candidate.table.get(key), (int, float))})
            if len(values) < 3 or tuned.get(key) not in (values[0], values[-1]):
                continue
            end = "smallest" if tuned[key] == values[0] else "largest"
            if end == "smallest" and tuned[key] <= LOWEST.get(key, -math.inf) or (
                    end == "largest" and key in ("k", "b") and tuned[key] >= advice.n - 1):
                continue           # the end of what the parameter can be, not of the grid alone
            out.append(f"{family}: the tuned {key} = {tuned[key]} is the {end} tried ({', '.join(map(str, values))}); "
                       "a value beyond it may do better still.")
    return out


def notes(advice) -> list[str]:
    return same_runs(advice) + edges(advice) + advice.notes


def advice_text(advice) -> str:
    """The terminal's answer: the recommendation, the ranking, the reasons, the notes."""
    lines = [f"gradcode advise: n = {advice.n}, delay {advice.delay}, target {advice.target_note}",
             f"  {sum(map(len, advice.trials.values()))} settings x {len(advice.seeds)} seeds "
             f"({', '.join(map(str, advice.seeds))}) in {advice.seconds:.1f} s ({advice.cpu_seconds:.1f} s CPU)", ""]
    lines += recommendation(advice) + ["", "rank  scheme (tuned)                         time to target    reached"]
    for i, t in enumerate(advice.ranking, 1):
        lines.append(f"{i:>4}  {short(t):<38} {_ci(t):<17} {_reached(t)}")
    best = advice.ranking[0]
    if math.isfinite(best.mean_time):
        lines += ["", "why the others lose:"] + [f"  - {why(t, best)}" for t in advice.ranking[1:]]
    lines += [""] + [f"note: {x}" for x in notes(advice)]
    return "\n".join(lines)


# --- files ----------------------------------------------------------------------------------------------------
def ranking_rows(advice) -> list[str]:
    """The Markdown table of the tuned settings, in rank order."""
    best = advice.ranking[0]
    rows = ["| rank | scheme (tuned) | time to target | vs first (paired) | reached | iterations | iteration time "
            "| load / iteration | floats / iteration | gradient error | residual | default's time |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, t in enumerate(advice.ranking, 1):
        default = advice.default(t.candidate.family)
        rows.append(f"| {i} | {short(t)} | {_ci(t)} | {fmt_ci(*paired(t, best)) if t is not best else '-'} | "
                    f"{_reached(t)} | {fmt_value(t.iterations.mean())} | {fmt_value(t.step.mean())} | "
                    f"{fmt_value(t.computed.mean())} | {fmt_value(_floats(t))} | {_error(t)} | "
                    f"{fmt_value(t.residual) if t.candidate.family in DECODED else 'n/a'} | "
                    f"{_ci(default) if default is not None else '-'} |")
    return rows


def tuning_rows(advice) -> list[str]:
    """Every setting tried, family by family (the tuned one in bold, the default marked)."""
    rows = ["| family | setting | time to target | reached | iterations | iteration time | gradient error |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for family, trials in advice.trials.items():
        tuned = advice.tuned(family)
        for t in trials:
            name = short(t) + (" (default)" if t.candidate.default else "")
            name = f"**{name}**" if t is tuned else name
            rows.append(f"| {family} | {name} | {_ci(t)} | {_reached(t)} | {fmt_value(t.iterations.mean())} | "
                        f"{fmt_value(t.step.mean())} | {_error(t)} |")
    return rows


def markdown(advice, figures: list[str]) -> str:
    best = advice.ranking[0]
    parts = ["# Which scheme for this cluster", "",
             f"{advice.n} workers, delay model {advice.delay}; target loss: {advice.target_note}. Every setting ran "
             f"on the seeds {', '.join(map(str, advice.seeds))} (the same delay draws for every setting); "
             f"{advice.seconds:.1f} s ({advice.cpu_seconds:.1f} s CPU).", "", "## Recommendation", "",
             *(f"- {x}" for x in recommendation(advice)), "", "## Ranking of the tuned settings", "",
             *ranking_rows(advice), ""]
    if "ranking.png" in figures:
        parts += ["![time to target](ranking.png)", "",
                  "Reading: each bar is a tuned setting's mean time to target, its whisker the 95% interval over "
                  "seeds; the hollow circle is the same family's default setting.", ""]
    if math.isfinite(best.mean_time):
        parts += ["## Why the others lose", "", *(f"- {why(t, best)}" for t in advice.ranking[1:]), ""]
    parts += ["## Every setting tried", "", *tuning_rows(advice), ""]
    if "tuning.png" in figures:
        parts += ["![tuning](tuning.png)", "",
                  "Reading: per family, the mean time to target of each setting tried (95% interval over seeds); "
                  "the filled marker is the tuned one.", ""]
    if advice.verified:
        parts += ["## On MPI (--verify)", "", *(f"- {x}" for x in advice.verified), ""]
    if notes(advice):
        parts += ["## Notes", "", *(f"- {x}" for x in notes(advice)), ""]
    return "\n".join(parts)


def write_advice(advice, out: Path, figures: bool = True) -> list[Path]:
    """``advice.json``, the figures, ``advice.md`` and ``advice.html`` in ``out``; the paths written."""
    from .report_html import write_html

    out.mkdir(parents=True, exist_ok=True)
    drawn = draw(advice, out) if figures else []
    (out / "advice.json").write_text(json.dumps(as_json(advice), indent=2) + "\n")
    (out / "advice.md").write_text(markdown(advice, drawn))
    return [out / "advice.json", out / "advice.md", write_html(out / "advice.md"), *(out / f for f in drawn)]


def as_json(advice) -> dict[str, Any]:
    def trial(t) -> dict[str, Any]:
        return {"scheme": t.candidate.table, "label": short(t), "default": t.candidate.default,
                "seeds": t.seeds, "time_to_target": [x if math.isfinite(x) else None for x in t.times.tolist()],
                "iterations": t.iterations.tolist(), "mean_iteration_time": t.step.tolist(),
                "computed_per_iteration": t.computed.tolist(), "grad_error_median": t.grad_error,
                "mean_residual": t.residual}

    return {"target_loss": advice.target, "target": advice.target_note, "seeds": advice.seeds, "workers": advice.n,
            "delay": advice.delay, "seconds": advice.seconds, "cpu_seconds": advice.cpu_seconds,
            "ranking": [short(t) for t in advice.ranking], "notes": advice.notes,
            "trials": {family: [trial(t) for t in ts] for family, ts in advice.trials.items()}}


# --- figures --------------------------------------------------------------------------------------------------
def draw(advice, out: Path) -> list[str]:
    """``ranking.png`` and ``tuning.png``; the names drawn (none if no setting reached the target)."""
    if not math.isfinite(advice.ranking[0].mean_time):
        return []
    _ranking_figure(advice, out / "ranking.png")
    _tuning_figure(advice, out / "tuning.png")
    return ["ranking.png", "tuning.png"]


def _point(trial) -> tuple[float, float]:
    mean, half = interval(trial.times)
    return (math.nan if mean is None else mean), (0.0 if half is None else half)


def _ranking_figure(advice, path: Path) -> None:
    from .plots import _pyplot, _save

    plt = _pyplot()
    tuned = advice.ranking[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(tuned) + 1.2), layout="constrained")
    means, halves = zip(*map(_point, tuned), strict=True)
    ax.barh(range(len(tuned)), means, xerr=halves, color="tab:blue", alpha=0.7, capsize=3)
    for y, t in enumerate(tuned):
        default = advice.default(t.candidate.family)
        if default is not None:
            ax.plot(_point(default)[0], y, "o", mfc="none", mec="black")
    ax.set_yticks(range(len(tuned)), [short(t) for t in tuned], fontsize=8)
    ax.set_xlabel("time to target (model time units)")
    _save(fig, path)


def _tuning_figure(advice, path: Path) -> None:
    from .plots import _grid, _pyplot, _save

    plt = _pyplot()
    families = [f for f, ts in advice.trials.items() if len(ts) > 1]
    fig, panels = _grid(plt, max(1, len(families)), height=3.0, width=4.2)
    for (ax,), family in zip(panels, families, strict=False):
        trials = advice.trials[family]
        means, halves = zip(*map(_point, trials), strict=True)
        tuned = advice.tuned(family)
        ax.errorbar(range(len(trials)), means, yerr=halves, fmt="none", ecolor="grey", capsize=3)
        for x, t in enumerate(trials):
            ax.plot(x, means[x], "o", color="tab:blue", mfc="tab:blue" if t is tuned else "none")
        ax.set_xticks(range(len(trials)), [short(t).split(" ", 1)[-1] for t in trials], rotation=30, fontsize=7,
                      ha="right")
        ax.set_title(family, fontsize=9)
        ax.set_ylabel("time to target", fontsize=8)
    _save(fig, path)
