"""Partial work in the default experiment's world: ``partial_coded`` against ``coded`` with the same
cyclic assignment and ``s``, against fastest-k, anytime mini-batches and DropCompute; and how much of fastest-k's
computation is wasted with and without interruptible workers.

The default experiment's workload, batch, target loss and scheme parameters (``examples/default.toml``), on the
simulator, under its two delay models (``pareto``, ``trace``) and a load-independent one (``straggle``: 2 random
workers per iteration 5 units late on top of a constant unit per load, the classic gradient-coding setting). Time to
the target loss is the median over the seeds (``inf``: not reached within the iterations); then fastest-k's wasted
fraction (work computed that no combine used) under ``late_workers = "finish"`` and ``"abandon"`` (interruptible
workers).

    python examples/partial_work.py                  # the tables, seeds 0-2, late_workers = "finish"
    python examples/partial_work.py --late abandon   # the same with interruptible workers
    python examples/partial_work.py --late between_chunks   # each stops where it can (chunked: between chunks)
    python examples/partial_work.py --quick          # one seed, fewer iterations
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from gradcode import make_delay, make_scheme
from gradcode.clusters.sim import LATE_WORKERS, simulate
from gradcode.spec import build, load_spec

DEFAULT = Path(__file__).resolve().parent / "default.toml"
S = 2
# label -> (scheme, parameters); the default experiment's entries, plus the partial_coded variants
SCHEMES = {
    "coded cyclic_repetition s=2": ("coded", {"code": "cyclic_repetition", "s": S}),
    "partial_coded s=2 optimized": ("partial_coded", {"s": S}),
    "partial_coded s=2 natural": ("partial_coded", {"s": S, "order": "natural"}),
    "partial_coded s=2 l=2": ("partial_coded", {"s": S, "l": 2}),
    "partial_coded s=2 tandon": ("partial_coded", {"s": S, "protocol": "tandon"}),
    "fastest_k k=4": ("fastest_k", {"k": 4}),
    "anytime T=auto": ("anytime", {"M": 4, "batch": 4, "T": "auto", "warmup": 3, "record_steps": 8}),
    "dropcompute tau=auto": ("dropcompute", {"M": 4, "micro_load": 0.25, "batch": 4, "tau": "auto", "warmup": 3,
                                             "record_steps": 8}),
}
# the default experiment's two delay models (by index in its [[delays]]) and a load-independent one
STRAGGLE = {"name": "straggle", "base": {"name": "constant"}, "count": 2, "extra": 5.0, "comm": 0.5}
DELAYS = {"pareto": 0, "trace": 1, "straggle": STRAGGLE}


def _world(delay):
    spec = load_spec(DEFAULT)
    if isinstance(delay, dict):
        _, _, workload = build(spec)
        return spec, make_delay(dict(delay)), workload
    _, built, workload = build(spec, delay_index=delay)
    return spec, built, workload


def time_to_target(delay=0, seeds=(0, 1, 2), iterations: int = 400, late: str = "finish",
                   schemes=None) -> list[dict]:
    """One row per scheme: median time to the target loss, mean iteration time and mean wasted fraction over
    ``seeds``; ``speedup_vs_coded`` relative to the plain cyclic-repetition code (the first row)."""
    spec, delay, workload = _world(delay)
    n, batch, target = spec.workers, spec.run["batch"], spec.run["target_loss"]
    rows = []
    for label in schemes or SCHEMES:
        name, params = SCHEMES[label]
        hits, means, waste = [], [], []
        for seed in seeds:
            scheme = make_scheme(name, n=n, **{"batch": batch, **params})
            res = simulate(scheme, delay, workload, iterations=iterations, seed=seed, target_loss=target,
                           late_workers=late, loss_every=1)
            hit = res.summary["time_to_target"]
            hits.append(np.inf if hit is None else hit)
            means.append(res.summary["mean_iteration_time"])
            waste.append(res.summary.get("wasted_fraction") or 0.0)
        rows.append({"scheme": label, "time_to_target": float(np.median(hits)),
                     "mean_iteration": float(np.mean(means)), "wasted_fraction": float(np.mean(waste))})
    base = rows[0]["time_to_target"]
    for row in rows:
        row["speedup_vs_coded"] = base / row["time_to_target"]
    return rows


def wasted(delay=0, seeds=(0, 1, 2), iterations: int = 200) -> dict[str, dict[str, float]]:
    """fastest-k (k = n/2)'s wasted fraction and mean iteration time under each late-worker rule."""
    spec, delay, workload = _world(delay)
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
    ap.add_argument("--quick", action="store_true", help="one seed, 60 iterations")
    ap.add_argument("--late", choices=LATE_WORKERS, default="finish",
                    help="late workers in the time-to-target table (default: finish, as in the default experiment)")
    args = ap.parse_args(argv)
    seeds = (0,) if args.quick else (0, 1, 2)
    iterations = 60 if args.quick else 400
    print(f"time to target (median of seeds {list(seeds)}; inf: not reached in {iterations} iterations), "
          f"late_workers = {args.late}\n")
    print("| delay | scheme | time to target | speedup vs coded | mean it. time | wasted fraction |")
    print("|---|---|---|---|---|---|")
    for label, delay in DELAYS.items():
        for row in time_to_target(delay, seeds, iterations, args.late):
            print(f"| {label} | {row['scheme']} | {row['time_to_target']:.1f} | {row['speedup_vs_coded']:.2f} | "
                  f"{row['mean_iteration']:.2f} | {row['wasted_fraction']:.3f} |")
    print(f"\nfastest_k k=n/2: wasted fraction (mean of seeds {list(seeds)}, {iterations // 2} iterations)\n")
    print("| delay | finish: wasted | finish: mean it. | abandon: wasted | abandon: mean it. |")
    print("|---|---|---|---|---|")
    for label, delay in DELAYS.items():
        w = wasted(delay, seeds, iterations // 2)
        print(f"| {label} | {w['finish']['wasted_fraction']:.3f} | {w['finish']['mean_iteration']:.2f} | "
              f"{w['abandon']['wasted_fraction']:.3f} | {w['abandon']['mean_iteration']:.2f} |")


if __name__ == "__main__":
    main()
