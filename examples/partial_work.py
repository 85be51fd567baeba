"""Partial work in the default experiment's world (issue 13): ``partial_coded`` against ``coded`` with the same
cyclic assignment and ``s``, and how much of fastest-k's computation is wasted with and without interruptible
workers.

The default experiment's workload, batch, target loss and delay models (``examples/default.toml``), on the
simulator, seeds 0-2: time to the target loss (median over seeds) and mean iteration time; then fastest-k's wasted
fraction (work computed that no combine used) under ``late_workers = "finish"`` and ``"abandon"``.

    python examples/partial_work.py            # prints two tables
    python examples/partial_work.py --quick    # one seed, fewer iterations
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from gradcode import make_scheme
from gradcode.sim import simulate
from gradcode.spec import build, load_spec

DEFAULT = Path(__file__).resolve().parent / "default.toml"
S = 2
SCHEMES = {
    "coded cyclic_repetition s=2": ("coded", {"code": "cyclic_repetition", "s": S}),
    "partial_coded s=2 natural": ("partial_coded", {"s": S, "order": "natural"}),
    "partial_coded s=2 optimized": ("partial_coded", {"s": S}),
    "partial_coded s=2 tandon": ("partial_coded", {"s": S, "protocol": "tandon"}),
}


def _world(delay_index: int):
    spec = load_spec(DEFAULT)
    _, delay, workload = build(spec, delay_index=delay_index)
    return spec, delay, workload


def time_to_target(delay_index: int = 0, seeds=(0, 1, 2), iterations: int = 400, late: str = "finish") -> list[dict]:
    """One row per scheme: median time to the target loss and mean iteration time over ``seeds``."""
    spec, delay, workload = _world(delay_index)
    n, batch, target = spec.workers, spec.run["batch"], spec.run["target_loss"]
    rows = []
    for label, (name, params) in SCHEMES.items():
        hits, means = [], []
        for seed in seeds:
            scheme = make_scheme(name, n=n, batch=batch, **params)
            res = simulate(scheme, delay, workload, iterations=iterations, seed=seed, target_loss=target,
                           late_workers=late, loss_every=1)
            hit = res.summary["time_to_target"]
            hits.append(np.inf if hit is None else hit)
            means.append(res.summary["mean_iteration_time"])
        rows.append({"scheme": label, "time_to_target": float(np.median(hits)),
                     "mean_iteration": float(np.mean(means))})
    base = rows[0]["time_to_target"]
    for row in rows:
        row["speedup_vs_coded"] = base / row["time_to_target"]
    return rows


def wasted(delay_index: int = 0, seeds=(0, 1, 2), iterations: int = 200) -> dict[str, float]:
    """fastest-k (k = n/2)'s wasted fraction and mean iteration time under each late-worker rule."""
    spec, delay, workload = _world(delay_index)
    out = {}
    for late in ("finish", "abandon"):
        fr, it = [], []
        for seed in seeds:
            res = simulate(make_scheme("fastest_k", n=spec.workers, k=spec.workers // 2, batch=spec.run["batch"]),
                           delay, workload, iterations=iterations, seed=seed, late_workers=late)
            fr.append(res.summary["wasted_fraction"])
            it.append(res.summary["mean_iteration_time"])
        out[late] = {"wasted_fraction": float(np.mean(fr)), "mean_iteration": float(np.mean(it))}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    seeds = (0,) if args.quick else (0, 1, 2)
    iterations = 60 if args.quick else 400
    for (d, label), late in (((0, "pareto"), "finish"), ((0, "pareto"), "abandon"), ((1, "trace"), "finish"),
                             ((1, "trace"), "abandon")):
        print(f"\n{label}: time to target (median of seeds {list(seeds)}), late_workers = {late}")
        for row in time_to_target(d, seeds, iterations, late):
            print(f"  {row['scheme']:32s} time to target {row['time_to_target']:9.2f}   mean it. "
                  f"{row['mean_iteration']:7.2f}   speedup vs coded {row['speedup_vs_coded']:.2f}")
        if late == "abandon":
            continue
        w = wasted(d, seeds, iterations // 2)
        print(f"  fastest_k k=n/2 wasted fraction: finish {w['finish']['wasted_fraction']:.3f} "
              f"(mean it. {w['finish']['mean_iteration']:.2f}), abandon {w['abandon']['wasted_fraction']:.3f} "
              f"(mean it. {w['abandon']['mean_iteration']:.2f})")


if __name__ == "__main__":
    main()
