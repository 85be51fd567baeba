"""A fixed corpus of simulated runs, hashed: the check that a refactoring changed no record.

Every configuration below is simulated and its ``records.jsonl`` and ``summary.json`` (as ``SimResult.write``
writes them) are hashed. Run it before and after a change on the same machine and compare::

    python benchmarks/record_corpus.py --save /tmp/before.json      # on the old tree
    python benchmarks/record_corpus.py --check /tmp/before.json     # on the new tree: exit 1 on any difference

The corpus covers every scheme, the three late-worker rules, timing-only and training runs, two delay models, the
streaming protocol in several configurations, a deadline and an unresponsive worker, and timing-only runs large
enough to take the simulator's vectorised paths (``n >= 8192`` for the keyed sort). ``--quick`` drops the large
runs.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
import tempfile
import warnings
from pathlib import Path

N = 8
SCHEMES = {
    "sync": {"name": "sync"},
    "fastest_k": {"name": "fastest_k", "k": 5},
    "backup": {"name": "backup", "b": 2},
    "adaptive_k": {"name": "adaptive_k", "k0": 3, "burn_in": 4},
    "adaptive_k_load": {"name": "adaptive_k_load", "max_batch": 8, "burn_in": 4},
    "coded_cyclic": {"name": "coded", "code": "cyclic_repetition", "s": 2},
    "coded_mds": {"name": "coded", "code": "cyclic_mds", "s": 2},
    "coded_frac": {"name": "coded", "code": "fractional_repetition", "s": 1},
    "coded_expander_wait": {"name": "coded", "code": "expander", "s": 2, "wait": 6},
    "coded_deadline": {"name": "coded", "code": "cyclic_repetition", "s": 2, "deadline": 4.0},
    "partial_coded": {"name": "partial_coded", "s": 2},
    "partial_natural": {"name": "partial_coded", "s": 1, "order": "natural"},
    "partial_group2": {"name": "partial_coded", "s": 3, "group": 2},
    "partial_l2": {"name": "partial_coded", "s": 2, "l": 2},
    "partial_approx": {"name": "partial_coded", "s": 2, "mode": "approximate", "wait": 6},
    "dropcompute": {"name": "dropcompute", "M": 4, "tau": "auto", "warmup": 2, "record_steps": 4},
    "dropcompute_fixed": {"name": "dropcompute", "M": 4, "tau": 2.0},
    "anytime": {"name": "anytime", "M": 4, "T": "auto", "warmup": 2, "record_steps": 4},
}
DELAYS = {
    "pareto": {"name": "pareto", "alpha": 2.0, "t_m": 1.0, "comm": 0.5},
    "shifted_exp": {"name": "shifted_exponential", "a": 1.0, "mu": 0.7, "comm": 0.2},
}
LATE = ("finish", "abandon", "between_chunks")
WORKLOAD = {"name": "least_squares", "n_samples": 400, "dim": 12, "seed": 3}
# the vectorised timing-only paths at a size where the keyed sort is used
LARGE = [("fastest_k", 9000, {"name": "fastest_k", "k": 8000}), ("sync", 9000, {"name": "sync"}),
         ("backup", 9000, {"name": "backup", "b": 100})]


def corpus(quick: bool):
    """``(label, scheme table, n, delay table, workload table or None, late rule, iterations)`` of every run."""
    for (sl, st), (dl, dt), late, training in itertools.product(SCHEMES.items(), DELAYS.items(), LATE, (False, True)):
        yield (f"{sl}/{dl}/{late}/{'training' if training else 'timing'}", st, N, dt,
               WORKLOAD if training else None, late, 25)
    yield ("fastest_k_unresponsive/finish/training", SCHEMES["fastest_k"], N,
           {"name": "unresponsive", "workers": [2], "base": DELAYS["pareto"]}, WORKLOAD, "finish", 15)
    if not quick:
        for (label, n, table), late in itertools.product(LARGE, ("finish", "abandon")):
            yield f"{label}_n{n}/{late}/timing", table, n, DELAYS["pareto"], None, late, 40


def run_one(scheme_table, n, delay_table, workload_table, late, iterations, folder: Path) -> str:
    from gradcode import make_scheme, simulate

    scheme = make_scheme(dict(scheme_table), n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = simulate(scheme, dict(delay_table), None if workload_table is None else dict(workload_table),
                          iterations=iterations, seed=7, late_workers=late)
    result.write(folder)
    digest = hashlib.sha256()
    for name in ("records.jsonl", "summary.json"):
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--save", type=Path, help="write the hashes to this JSON file")
    parser.add_argument("--check", type=Path, help="compare with the hashes in this JSON file (exit 1 if any differ)")
    parser.add_argument("--quick", action="store_true", help="leave out the large timing-only runs")
    args = parser.parse_args(argv)
    hashes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for j, (label, st, n, dt, wt, late, iterations) in enumerate(corpus(args.quick)):
            try:
                hashes[label] = run_one(st, n, dt, wt, late, iterations, Path(tmp) / str(j))
            except Exception as exc:   # an error is a result too: it must stay the same
                hashes[label] = f"error: {type(exc).__name__}: {exc}"
    total = hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()
    print(f"{len(hashes)} runs, corpus hash {total[:16]}")
    if args.save:
        args.save.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    if args.check:
        old = json.loads(args.check.read_text())
        differ = sorted(k for k in hashes.keys() | old.keys() if hashes.get(k) != old.get(k))
        for label in differ:
            print(f"DIFFERS: {label}: {old.get(label, 'absent')[:40]} -> {hashes.get(label, 'absent')[:40]}")
        print(f"{len(differ)} of {len(hashes)} runs differ")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
