"""partial_coded vs coded: where the partial-stragglers gain comes from and where it stops.

Mean iteration time of ``coded`` (cyclic_repetition, ``s``) over that of ``partial_coded`` (the same cyclic
assignment, a message after every chunk) on the simulator, timing only, n = 8, 60 iterations, seeds 0-2 (the same
delays for both: common random numbers), for the paper's parameters ``l`` (the gradient cut into ``l`` parts: a
chunk is decoded from ``l`` copies) and the chunk order (``natural`` / ``optimized``), three late-worker rules, under
the default experiment's Pareto delays (alpha 2, t_m 1, comm 0.5 per message) and variants of them (the tail
``alpha``, the communication ``comm``). Higher is better for partial_coded. The late-worker rules: ``finish``
(every late worker completes its plan), ``abandon`` (coded's plan is dropped at once, a chunk in progress is
finished) and ``between_chunks`` (each stops where it can: coded finishes its plan, one piece of work, and
partial_coded drops the rest after the chunk in progress). Each row is the ratio of the sums of
the mean times over the seeds.

Then **one round**: the first iteration alone, over 300 seeds (the mean of its end time). That is the paper's
completion time of one gradient: no iteration before it, so no worker is still busy with work from the last one.
The gap between the two is what the next iteration pays for the work in flight at the end of the last: under
``finish`` every worker completes its plan first, under ``abandon`` a chunked worker completes its chunk in progress
(a chunk cannot be interrupted), while ``coded``'s unchunked plan is dropped at once.

    python benchmarks/study_partial.py [--iterations 60] [--seeds 0 1 2] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from gradcode import make_delay, make_scheme, simulate


def _fresh(scheme: dict, n: int):
    """A new scheme object from ``{"name": ..., parameters}`` (its learnt state must not carry over)."""
    return make_scheme(scheme["name"], n=n, **{k: v for k, v in scheme.items() if k != "name"})


def mean_time(scheme: dict, delay: dict, late: str, iterations: int, seeds: list[int], n: int) -> float:
    total = 0.0
    for seed in seeds:
        total += simulate(_fresh(scheme, n), make_delay(delay), iterations=iterations, seed=seed,
                          late_workers=late).summary["mean_iteration_time"]
    return total / len(seeds)


ROUND_SEEDS = 300


def first_round(scheme: dict, delay: dict, n: int) -> float:
    """Mean end time of the first iteration over seeds ``0 .. ROUND_SEEDS - 1``: one gradient, nothing before it."""
    total = 0.0
    for seed in range(ROUND_SEEDS):
        total += simulate(_fresh(scheme, n), make_delay(delay), iterations=1, seed=seed).records[0]["end"]
    return total / ROUND_SEEDS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--s", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="the default delays only")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "partial.json"))
    args = parser.parse_args()
    base = {"name": "pareto", "alpha": 2.0, "t_m": 1.0, "comm": 0.5}
    delays = [("default: alpha 2, comm 0.5", base)]
    if not args.quick:
        delays += [("alpha 2, comm 0", {**base, "comm": 0.0}), ("alpha 2, comm 2", {**base, "comm": 2.0}),
                   ("alpha 1.3, comm 0.5", {**base, "alpha": 1.3}), ("alpha 4, comm 0.5", {**base, "alpha": 4.0}),
                   ("exponential mean 1, comm 0", {"name": "exponential", "mu": 1.0})]
    rows = []
    print(f"{'delays':<28} {'late':<14} {'l':>2} {'order':<10} {'coded':>8} {'partial':>8} {'ratio':>6}")
    for (label, delay), late in itertools.product(delays, ("finish", "abandon", "between_chunks")):
        coded = mean_time({"name": "coded", "code": "cyclic_repetition", "s": args.s}, delay, late,
                          args.iterations, args.seeds, args.n)
        for l, order in itertools.product(range(1, args.s + 2), ("natural", "optimized")):
            partial = mean_time({"name": "partial_coded", "s": args.s, "l": l, "order": order}, delay, late,
                                args.iterations, args.seeds, args.n)
            row = {"delays": label, "late_workers": late, "l": l, "order": order, "coded": coded,
                   "partial_coded": partial, "ratio": coded / partial}
            rows.append(row)
            print(f"{label:<28} {late:<14} {l:>2} {order:<10} {coded:8.3f} {partial:8.3f} {coded / partial:6.2f}")
    print(f"\none round (the first iteration, seeds 0-{ROUND_SEEDS - 1}): coded / partial_coded, mean end time")
    for label, delay in delays:
        coded = first_round({"name": "coded", "code": "cyclic_repetition", "s": args.s}, delay, args.n)
        for l, order in itertools.product(range(1, args.s + 2), ("natural", "optimized")):
            partial = first_round({"name": "partial_coded", "s": args.s, "l": l, "order": order}, delay, args.n)
            rows.append({"delays": label, "late_workers": "one round", "l": l, "order": order, "coded": coded,
                         "partial_coded": partial, "ratio": coded / partial})
            print(f"{label:<28} {'round':<14} {l:>2} {order:<10} {coded:8.3f} {partial:8.3f} {coded / partial:6.2f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
