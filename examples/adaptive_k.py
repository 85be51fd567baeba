"""Adaptive k: start by waiting for few workers, wait for more once training stalls.

Question. Fastest-k trades speed for noise: a small ``k`` makes fast but noisy steps (a high error floor), a large
``k`` slow but precise ones. Kas Hanna et al. (arXiv 2002.11005) raise ``k`` when a Pflug-type stationarity test says
the iterate has stopped travelling. Does adaptive k reach a low error sooner than every fixed ``k``?

Setup. ``n = 20`` workers, shifted-exponential delays (``a = 1, mu = 1``), late workers finish their stale work.
Least squares (2,000 samples, dim 20, label noise 0.5, condition 10); each worker computes the gradient of a
mini-batch of 4 samples of its partition; step ``0.2/L``. Fixed ``k`` in {1, n/4, n/2, n} against ``adaptive_k``
(``k0 = 1``, ``+1`` each time the test fires, burn-in 10). Error = loss - optimal loss, averaged over 3 seeds on a
common virtual-time grid and smoothed over a window of 5% of the run. A switch of ``k`` is marked on the curve.

Finding. Small ``k`` wins early and stalls at its floor (``k = 1`` never gets below ~3e-2, ``k = n/4`` ~4e-3),
``k = n`` wins late (9e-4 at T = 800). Adaptive ``k`` beats ``k = n`` early (3e-2 vs 0.19 at T/8) and ends near it
(1.1e-3 vs 0.9e-3), but with this project's Pflug test (threshold 0) the first switches can be slow: with step 1 it
sits at ``k = 2`` from t = 14 to t = 192 and reaches 2e-3 no sooner than ``k = n`` (434); with step 2 it reaches
2e-3 at 374 and has the lowest error of all at T/2 (1.7e-3), yet ``k = n/2`` gets to 2e-3 first (250). So the
"lower error sooner than any fixed k" of the paper is only partly reproduced here; ``adaptive_k_load.py`` shows the
variant that does reach every error level first.
Run: ``python examples/adaptive_k.py [--quick] [--out DIR]``.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from _common import parse_args, save_figure, table, write_report  # noqa: E402

from gradcode import make_delay, make_scheme, make_workload, simulate  # noqa: E402

NAME = "adaptive_k"
N_WORKERS = 20
BATCH = 4          # samples per worker per step: the load unit of the delay model
LR_FACTOR = 0.2    # step 0.2/L: k = 1 with lr = 1/L diverges (its estimate is 20x one worker's mini-batch)
DELAY = {"name": "shifted_exponential", "a": 1.0, "mu": 1.0}


def workload():
    return make_workload("least_squares", n_samples=2000, dim=20, noise=0.5, condition=10.0, seed=0)


def fixed_schemes(n: int = N_WORKERS) -> dict[str, tuple[str, dict]]:
    ks = sorted({1, n // 4, n // 2, n})
    return {f"fastest_k k={k}": ("fastest_k", {"k": k, "batch": BATCH}) for k in ks}


def adaptive_schemes() -> dict[str, tuple[str, dict]]:
    # step 1 is the paper's rule; step 2 was the best of a small scan (k0 in {1, 2, 5} x step in {1, 2, 5} x burn-in
    # in {5, 10}, 3 seeds): both are shown so the tuning is visible, not hidden
    return {"adaptive_k step=1": ("adaptive_k", {"k0": 1, "step": 1, "burn_in": 10, "batch": BATCH}),
            "adaptive_k step=2": ("adaptive_k", {"k0": 1, "step": 2, "burn_in": 10, "batch": BATCH})}


def run(name: str, params: dict, wl, budget: float, seed: int, n: int = N_WORKERS) -> list[dict]:
    """One run until the virtual time budget is spent; its records."""
    scheme = make_scheme(name, n=n, **params)
    res = simulate(scheme, make_delay(DELAY), wl, iterations=100_000, seed=seed, time_budget=budget,
                   lr=LR_FACTOR * wl.lr)
    return res.records


def at_grid(records: list[dict], values, grid: np.ndarray, before: float = np.nan) -> np.ndarray:
    """``values[j]`` (one per record) as a step function of time, read at each grid time: the value of the last
    record that ended by then, ``before`` ahead of the first."""
    ends = np.array([r["end"] for r in records])
    idx = np.searchsorted(ends, grid, side="right") - 1
    return np.where(idx >= 0, np.asarray(values)[np.maximum(idx, 0)], before)


def curve(records: list[dict], optimal: float, grid: np.ndarray) -> np.ndarray:
    """Error (loss - optimal) of the model in force at each grid time (step function of the records)."""
    return at_grid(records, np.array([r["loss"] for r in records]) - optimal, grid)


def mark_switches(ax, res: dict, color: str) -> None:
    """Triangles on the error curve where seed 0's adaptive scheme switched (k or stage)."""
    for t, _ in switches(res["runs"][0]):
        j = min(len(res["grid"]) - 1, int(np.searchsorted(res["grid"], t)))
        ax.plot(t, res["error"][j], "v", color=color, ms=4)


def smooth(y: np.ndarray, width: int) -> np.ndarray:
    """Centred moving average (ignoring the NaN before the first step)."""
    ok = np.isfinite(y)
    kernel = np.ones(width)
    num = np.convolve(np.where(ok, y, 0.0), kernel, mode="same")
    den = np.convolve(ok.astype(float), kernel, mode="same")
    with np.errstate(invalid="ignore"):
        return num / den


def compare(schemes: dict, budget: float, seeds, n: int = N_WORKERS, points: int = 400) -> dict:
    """Per scheme: the seed-averaged smoothed error curve on a common grid, plus per-seed records."""
    wl = workload()
    grid = np.linspace(0.0, budget, points + 1)[1:]
    out = {}
    for label, (name, params) in schemes.items():
        runs = [run(name, params, wl, budget, seed, n) for seed in seeds]
        curves = np.array([curve(r, wl.optimal_loss, grid) for r in runs])
        # before a scheme's first step ends there is no error to show (NaN), not a warning
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(curves, axis=0)
        out[label] = {"grid": grid, "error": smooth(mean, max(1, points // 20)), "runs": runs}
    return out


def first_time_below(grid: np.ndarray, error: np.ndarray, eps: float) -> float:
    hit = np.flatnonzero(error <= eps)
    return float(grid[hit[0]]) if hit.size else float("inf")


def switches(records: list[dict]) -> list[tuple[float, int]]:
    """(time, new k) whenever k (or the stage) changed."""
    out = []
    for prev, rec in zip(records, records[1:], strict=False):
        if rec["k"] != prev["k"]:
            out.append((rec["start"], rec["k"]))
    return out


def summary_rows(results: dict, eps_list) -> list[list]:
    rows = []
    for label, res in results.items():
        g, e = res["grid"], res["error"]
        at = [e[min(len(e) - 1, int(f * len(e)))] for f in (0.125, 0.25, 0.5)] + [e[-1]]
        rows.append([label, *at, *[first_time_below(g, e, eps) for eps in eps_list]])
    return rows


def plot(results: dict, out, name: str, title: str) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.3))
    for i, (label, res) in enumerate(results.items()):
        ax.plot(res["grid"], res["error"], color=f"C{i}", label=label, lw=2 if "adaptive" in label else 1.2)
        if "adaptive" in label:
            mark_switches(ax, res, f"C{i}")
            ax.plot([], [], "v", color=f"C{i}", ms=4, label=f"{label}: k switched (seed 0)")
    ax.set_yscale("log")
    ax.set_xlabel("virtual time")
    ax.set_ylabel("loss - optimal loss (mean of seeds, smoothed)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return save_figure(fig, out, name)


def main(argv=None) -> dict:
    args = parse_args(NAME, __doc__, argv)
    budget = 300.0 if args.quick else 800.0
    seeds = [0] if args.quick else [0, 1, 2]
    eps_list = [5e-3, 2e-3]
    results = compare({**fixed_schemes(), **adaptive_schemes()}, budget, seeds)
    plot(results, args.out, NAME, f"adaptive k vs fixed k (n = {N_WORKERS}, shifted exponential)")
    sw = {label: switches(res["runs"][0]) for label, res in results.items() if "adaptive" in label}
    headers = ["scheme", "error at T/8", "T/4", "T/2", "T", *[f"time to {eps:g}" for eps in eps_list]]
    text = [f"# Adaptive k vs fixed k (n = {N_WORKERS}, budget T = {budget:g}, seeds {seeds})", "",
            table(headers, summary_rows(results, eps_list)), "",
            *[f"- {label} (seed 0) switched k {len(s)} times; first switches: "
              + ", ".join(f"t={t:.0f}->k={k}" for t, k in s[:6]) for label, s in sw.items()]]
    write_report(args.out, NAME, "\n".join(text))
    return results


if __name__ == "__main__":
    main()
