"""Sweep throughput (issue 12, section 2): a 24-cell simulated sweep run serially and with ``--jobs 2``.

Each repeat runs the same sweep into fresh folders, once with ``jobs=1`` (the cells one after another in this
process) and once with ``jobs=2`` (a pool of two worker processes), and checks that both give the same
``sweep.csv`` (apart from the wall-clock column). Reported: the median wall time of each, cells per second, and the
speedup ``serial / jobs 2`` (target on a 2-core machine: >= 1.7x; a loaded machine will not show it).

    python benchmarks/bench_sweep.py [--repeats 3] [--iterations 40]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

from gradcode.study.sweep_run import WALL, sweep

SPEC = {
    "experiment": {"name": "bench_sweep"},
    "cluster": {"workers": 8},
    "workload": {"name": "least_squares", "n_samples": 800, "dim": 20},
    "delay": {"name": "pareto", "alpha": 2.0},
    "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 6}, {"name": "backup", "b": 2},
                {"name": "coded", "code": "cyclic_repetition", "s": 1}],
    "run": {"seeds": [0, 1]},
    # 4 x 3 x 2 = 24 cells
    "sweep": {"delay.alpha": [1.5, 2.0, 2.5, 3.0], "schemes.coded.s": [1, 2, 3], "schemes.fastest_k.k": [5, 6]},
}


def table(path: Path) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in WALL} for row in csv.DictReader(path.open())]


def once(jobs: int, iterations: int, root: Path) -> tuple[float, Path]:
    spec = json.loads(json.dumps(SPEC))
    spec["run"]["iterations"] = iterations
    out = Path(tempfile.mkdtemp(dir=root)) / f"jobs{jobs}"
    start = time.perf_counter()
    sweep(spec, out, jobs=jobs, progress=False)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sweep.json"))
    args = parser.parse_args()
    cells = 24
    times: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            outs = {}
            for jobs in (1, 2):
                sec, outs[jobs] = once(jobs, args.iterations, Path(tmp))
                times[jobs].append(sec)
            assert table(outs[1] / "sweep.csv") == table(outs[2] / "sweep.csv"), "jobs 2 changed the results"
    med = {jobs: statistics.median(ts) for jobs, ts in times.items()}
    result = {"cells": cells, "iterations": args.iterations, "repeats": args.repeats,
              "serial_seconds": med[1], "jobs2_seconds": med[2], "serial_cells_per_s": cells / med[1],
              "jobs2_cells_per_s": cells / med[2], "speedup": med[1] / med[2], "target_speedup": 1.7,
              "all_seconds": {str(k): v for k, v in times.items()}}
    for key in ("serial_seconds", "jobs2_seconds", "serial_cells_per_s", "jobs2_cells_per_s", "speedup"):
        print(f"{key:<20} {result[key]:.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
