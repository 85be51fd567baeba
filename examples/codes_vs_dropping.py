"""Codes versus dropping: when does redundancy pay, and when is it cheaper to ignore or cut the stragglers?

Question. Gradient codes buy an exact gradient from the first ``n - s`` workers by making every worker compute
``s + 1`` partitions; fastest-k, backup workers and adaptive k simply ignore late workers; DropCompute cuts every
worker's compute at a threshold. On a measured straggler trace and on a heavy-tailed model, which reaches a target
loss first, and at what total computation?

Setup. ``n = 12`` workers; least squares (2,000 samples, dim 20, noise 0.1, condition 10); every partition is read as
a mini-batch of 16 samples, which is one load unit of the delay model for every scheme (a coded worker with ``s + 1``
partitions has load ``s + 1``; a DropCompute worker runs ``M = 4`` micro-batches of 4 samples, a quarter unit each,
as in ``examples/default.toml``). Target: 1.05x the optimal loss; time to target and samples computed (all workers,
wasted work included) until then, median of 3 seeds; step ``1/L``. Delays: the replayed ByteDance SE trace and Pareto
``alpha = 1.5`` (infinite variance). Late workers finish their stale work. Schemes: sync; fastest-k (k = 9); backup
(b = 3); adaptive k (k0 = 6); adaptive k and load (batch up to 16); exact codes cyclic repetition and fractional
repetition (s = 3); approximate codes expander (s = 2, wait 9) and ErasureHead (s = 2, wait 8); DropCompute (M = 4,
automatic tau).

Finding. With compute time proportional to load, redundancy does not pay here: every scheme needs 27-43 steps (the
exact gradient buys nothing on this well-sampled problem) but a coded step carries ``s + 1`` times the work, so the
codes compute 2.5-4x the samples of sync. On the light-tailed trace they are 2.5-3.6x *slower* than sync; on Pareto
the best code (fractional repetition) beats sync (0.73x) because it never waits for the slowest 3, but it is 2x
slower than plain fastest-k (0.36x sync). Dropping wins: adaptive k and load is fastest by far (0.23x sync on the
trace, 0.11x on Pareto, with 0.23-0.40x the samples) because it also shrinks the per-worker batch. On the trace
fastest-k/backup gain nothing (1.03x): late workers must finish their stale work and the trace's stragglers persist.
DropCompute (every step the same 16 samples per worker as the others, cut at the automatic tau) takes 0.90x sync's
time on the trace and 0.68x on Pareto at sync's computation, behind adaptive k and fastest-k on Pareto. (backup
b = 3 and fastest-k k = 9 are the same stop rule on 12 workers, hence identical rows.)
Run: ``python examples/codes_vs_dropping.py [--quick] [--out DIR]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from _common import parse_args, save_figure, table, write_report  # noqa: E402

from gradcode import make_delay, make_scheme, make_workload, simulate  # noqa: E402

NAME = "codes_vs_dropping"
N_WORKERS = 12
BATCH = 16          # samples per partition mini-batch = one load unit
TARGET = 1.05       # x the optimal loss
DELAYS = {
    "ByteDance SE trace": {"name": "trace", "trace": "bytedance-SE"},
    "pareto alpha=1.5": {"name": "pareto", "alpha": 1.5, "t_m": 1.0},
}
SCHEMES = {
    "sync": ("sync", {}),
    "fastest_k k=9": ("fastest_k", {"k": 9}),
    "backup b=3": ("backup", {"b": 3}),
    "adaptive_k k0=6": ("adaptive_k", {"k0": 6}),
    "adaptive_k_load": ("adaptive_k_load", {"max_batch": BATCH}),
    "coded cyclic_repetition s=3 (exact)": ("coded", {"code": "cyclic_repetition", "s": 3}),
    "coded fractional_repetition s=3 (exact)": ("coded", {"code": "fractional_repetition", "s": 3}),
    "coded expander s=2 wait=9 (approx.)": ("coded", {"code": "expander", "s": 2, "wait": 9}),
    "coded erasurehead s=2 wait=8 (approx.)": ("coded", {"code": "erasurehead", "s": 2, "wait": 8}),
    # 4 micro-batches of 4 samples, a quarter unit each: a DropCompute step is the same work as one partition
    "dropcompute M=4 tau=auto": ("dropcompute", {"M": 4, "micro_load": 0.25, "batch": BATCH // 4, "tau": "auto",
                                                 "warmup": 3, "record_steps": 8}),
}


def workload():
    return make_workload("least_squares", n_samples=2000, dim=20, noise=0.1, condition=10.0, seed=0)


def one(name: str, params: dict, delay, wl, seed: int, max_iterations: int = 600) -> dict:
    """Time, iterations and samples computed until the target loss (inf if not reached)."""
    params = dict(params)
    if name != "adaptive_k_load":   # adaptive_k_load picks its own mini-batch (max_batch given above)
        params.setdefault("batch", BATCH)
    res = simulate(make_scheme(name, n=N_WORKERS, **params), make_delay(delay), wl, iterations=max_iterations,
                   seed=seed, target_loss=TARGET * wl.optimal_loss)
    hit = res.summary["time_to_target"]
    return {"time": np.inf if hit is None else hit, "iterations": res.summary["iterations"],
            "samples": res.summary["computed"] * BATCH if hit is not None else np.inf}


def compare(seeds, schemes=None) -> list[dict]:
    wl = workload()
    rows = []
    for dlabel, delay in DELAYS.items():
        for label, (name, params) in (schemes or SCHEMES).items():
            runs = [one(name, params, delay, wl, seed) for seed in seeds]
            rows.append({"delay": dlabel, "scheme": label,
                         **{key: float(np.median([r[key] for r in runs])) for key in ("time", "iterations",
                                                                                       "samples")}})
    return rows


def plot(rows: list[dict], out) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(DELAYS), figsize=(13, 4.8))
    labels = list(SCHEMES)
    markers = "os^vDPX*<>"
    for ax, dlabel in zip(axes, DELAYS, strict=True):
        for i, label in enumerate(labels):
            r = next((r for r in rows if r["delay"] == dlabel and r["scheme"] == label), None)
            if r is None or not np.isfinite(r["time"]):
                continue
            ax.plot(r["samples"], r["time"], markers[i % len(markers)], color=f"C{i}", ms=8, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("samples computed to reach the target (all workers, incl. wasted)")
        ax.set_ylabel(f"virtual time to {TARGET} x optimal loss")
        ax.set_title(dlabel)
    axes[0].legend(fontsize=6)
    fig.suptitle(f"codes vs dropping, n = {N_WORKERS}: lower left is better")
    return save_figure(fig, out, NAME)


def main(argv=None) -> list[dict]:
    args = parse_args(NAME, __doc__, argv)
    seeds = [0] if args.quick else [0, 1, 2]
    rows = compare(seeds)
    plot(rows, args.out)
    text = [f"# Codes vs dropping (n = {N_WORKERS}, target {TARGET} x optimal loss, median of seeds {seeds})", ""]
    for dlabel in DELAYS:
        sel = [r for r in rows if r["delay"] == dlabel]
        sync = next(r for r in sel if r["scheme"] == "sync")
        text += [f"## {dlabel}", "",
                 table(["scheme", "time to target", "vs sync", "iterations", "samples computed", "vs sync"],
                       [[r["scheme"], r["time"], f"{r['time'] / sync['time']:.2f}x", r["iterations"], r["samples"],
                         f"{r['samples'] / sync['samples']:.2f}x"] for r in sorted(sel, key=lambda r: r["time"])]),
                 ""]
        best = min(sel, key=lambda r: r["time"])
        coded = [r for r in sel if r["scheme"].startswith("coded")]
        fastest_code = min(coded, key=lambda r: r["time"])
        text.append(f"- fastest: {best['scheme']} ({best['time']:.1f}); fastest code: {fastest_code['scheme']} "
                    f"({fastest_code['time']:.1f}, {fastest_code['time'] / sync['time']:.2f}x sync)")
        text.append("")
    write_report(args.out, NAME, "\n".join(text))
    return rows


if __name__ == "__main__":
    main()
