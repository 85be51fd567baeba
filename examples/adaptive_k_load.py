"""Adaptive k and computation load: wait for more workers *and* give each of them less work.

Question. Egger, Kas Hanna and Bitar (arXiv 2304.08589) adapt both the number of awaited workers ``k`` and each
worker's mini-batch ``b``: the noise floor depends on the effective batch ``k*b``, but the work per step is ``n*b``
(everyone computes, only ``k`` are used), so for a given effective batch a larger ``k`` with a smaller ``b`` is cheaper
and, with a load-dependent delay, faster. How much sooner does it reach a given error, and how much work does it save?

Setup. Exactly the run of ``examples/adaptive_k.py`` (``n = 20``, shifted exponential ``a = 1, mu = 1``, least squares,
mini-batches of up to 4 samples per worker, step ``0.2/L``, 3 seeds) plus ``adaptive_k_load`` with its default stages
of effective batch ``n*4/16, ..., n*4`` = 5, 10, 20, 40, 80 samples; in each stage it picks the ``(k, b)`` with
``k*b >= B`` that minimises ``E[T_(k:n)]`` at load ``b/4`` (from the delay model). Work = samples computed by all
workers, including the wasted work of late workers; one load unit = 4 samples for every scheme.

Finding. ``adaptive_k_load`` reaches every error level first (to 2e-3 roughly 1.5x sooner than the best fixed ``k``)
and computes fewer samples to get there than any fixed ``k`` or adaptive ``k`` (numbers in the table); its final
error matches ``k = n``'s.

Run: ``python examples/adaptive_k_load.py [--quick] [--out DIR]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from _common import parse_args, save_figure, table, write_report  # noqa: E402
from adaptive_k import (  # noqa: E402
    BATCH,
    N_WORKERS,
    adaptive_schemes,
    at_grid,
    compare,
    first_time_below,
    fixed_schemes,
    mark_switches,
)

NAME = "adaptive_k_load"


def load_schemes() -> dict[str, tuple[str, dict]]:
    return {"adaptive_k_load": ("adaptive_k_load", {"max_batch": BATCH, "burn_in": 10})}


def cumulative_work(results: dict) -> None:
    """Add ``work`` (samples computed so far, mean over seeds) on each scheme's grid."""
    for res in results.values():
        # one load unit = BATCH samples
        per_seed = [at_grid(records, np.cumsum([r["computed"] for r in records]) * BATCH, res["grid"], 0.0)
                    for records in res["runs"]]
        res["work"] = np.mean(per_seed, axis=0)
        res["messages"] = float(np.mean([sum(r["messages"] for r in recs) for recs in res["runs"]]))


def rows_for(results: dict, eps_list) -> list[list]:
    rows = []
    for label, res in results.items():
        row = [label, res["error"][-1]]
        for eps in eps_list:
            t = first_time_below(res["grid"], res["error"], eps)
            work = res["work"][np.searchsorted(res["grid"], t)] if np.isfinite(t) else float("inf")
            row += [t, work]
        rows.append(row + [res["work"][-1], res["messages"]])
    return rows


def plot(results: dict, out) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.3))
    for i, (label, res) in enumerate(results.items()):
        lw = 2 if "adaptive" in label else 1.2
        axes[0].plot(res["grid"], res["error"], color=f"C{i}", lw=lw, label=label)
        axes[1].plot(res["work"], res["error"], color=f"C{i}", lw=lw, label=label)
        if "adaptive" in label:
            mark_switches(axes[0], res, f"C{i}")
    axes[0].set_xlabel("virtual time (triangles: k or stage switched, seed 0)")
    axes[1].set_xlabel("samples computed by all workers (incl. wasted)")
    for ax in axes:
        ax.set_yscale("log")
        ax.set_ylabel("loss - optimal loss")
    axes[1].set_xscale("log")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"adaptive k and load (n = {N_WORKERS}, shifted exponential)")
    return save_figure(fig, out, NAME)


def main(argv=None) -> dict:
    args = parse_args(NAME, __doc__, argv)
    budget = 400.0 if args.quick else 800.0
    seeds = [0] if args.quick else [0, 1, 2]
    eps_list = [5e-3, 2e-3]
    results = compare({**fixed_schemes(), **adaptive_schemes(), **load_schemes()}, budget, seeds)
    cumulative_work(results)
    plot(results, args.out)
    rows = rows_for(results, eps_list)
    headers = ["scheme", "error at T"]
    for eps in eps_list:
        headers += [f"time to {eps:g}", f"samples to {eps:g}"]
    text = [f"# Adaptive k and load vs adaptive k and fixed k (n = {N_WORKERS}, budget T = {budget:g}, "
            f"seeds {seeds})", "",
            table(headers + ["samples in T", "messages in T"], rows), ""]
    by = {r[0]: r for r in rows}
    akl = by["adaptive_k_load"]
    for j, eps in enumerate(eps_list):
        others = [r for r in rows if r[0] != "adaptive_k_load" and np.isfinite(r[2 + 2 * j])]
        if not others or not np.isfinite(akl[2 + 2 * j]):
            continue
        fastest = min(others, key=lambda r: r[2 + 2 * j])
        text.append(f"- to {eps:g}: adaptive_k_load takes {akl[2 + 2 * j]:.0f} time units and "
                    f"{akl[3 + 2 * j]:.0f} samples; the fastest other scheme ({fastest[0]}) "
                    f"{fastest[2 + 2 * j]:.0f} and {fastest[3 + 2 * j]:.0f} "
                    f"({1 - akl[3 + 2 * j] / fastest[3 + 2 * j]:.0%} less work, "
                    f"{fastest[2 + 2 * j] / akl[2 + 2 * j]:.2f}x sooner)")
    stages = [(r["k"], r["batch"]) for r in results["adaptive_k_load"]["runs"][0]]
    text.append("- adaptive_k_load (k, b) stages used (seed 0): "
                + " -> ".join(f"{kb}" for i, kb in enumerate(stages) if i == 0 or kb != stages[i - 1]))
    write_report(args.out, NAME, "\n".join(text))
    return results


if __name__ == "__main__":
    main()
