"""Sweep throughput: a 24-cell simulated sweep run serially and with ``--jobs 2``.

Each repeat runs the same sweep into fresh folders, once with ``jobs=1`` (the cells one after another in this
process) and once with ``jobs=2`` (a pool of two worker processes), and checks that both give the same
``sweep.csv`` (apart from the wall-clock column). Reported: the median wall time of each, cells per second, and the
speedup ``serial / jobs 2`` (target on a 2-core machine: >= 1.7x; a loaded machine will not show it), and the CPU
seconds of each (the sweep process, the pool's workers) with the speedup they allow on two idle cores,
``serial CPU / (sweep process CPU + pool CPU / 2)``: a loaded host slows the wall clock, not that.

    python benchmarks/bench_sweep.py [--repeats 3] [--iterations 40]
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
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


def cpu() -> tuple[float, float]:
    """CPU seconds (user + system) of this process and of its reaped children (the pool's workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def once(jobs: int, iterations: int, root: Path) -> tuple[float, Path, float, float]:
    """Wall seconds, the output folder, and the CPU seconds of this process and of the pool's workers."""
    spec = json.loads(json.dumps(SPEC))
    spec["run"]["iterations"] = iterations
    out = Path(tempfile.mkdtemp(dir=root)) / f"jobs{jobs}"
    (me0, kids0), start = cpu(), time.perf_counter()
    sweep(spec, out, jobs=jobs, progress=False)
    wall, (me1, kids1) = time.perf_counter() - start, cpu()
    return wall, out, me1 - me0, kids1 - kids0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sweep.json"))
    args = parser.parse_args()
    cells = 24
    times: dict[int, list[float]] = {1: [], 2: []}
    cpus: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            outs = {}
            for jobs in (1, 2):
                sec, outs[jobs], mine, pool = once(jobs, args.iterations, Path(tmp))
                times[jobs].append(sec)
                cpus[jobs].append((mine, pool))
            assert table(outs[1] / "sweep.csv") == table(outs[2] / "sweep.csv"), "jobs 2 changed the results"
    med = {jobs: statistics.median(ts) for jobs, ts in times.items()}
    serial_cpu = statistics.median(a + b for a, b in cpus[1])
    parent_cpu, pool_cpu = (statistics.median(c[i] for c in cpus[2]) for i in (0, 1))
    result = {"cells": cells, "iterations": args.iterations, "repeats": args.repeats,
              "serial_seconds": med[1], "jobs2_seconds": med[2], "serial_cells_per_s": cells / med[1],
              "jobs2_cells_per_s": cells / med[2], "speedup": med[1] / med[2], "target_speedup": 1.7,
              "all_seconds": {str(k): v for k, v in times.items()},
              # CPU seconds: what a loaded host cannot blur. The bound is the speedup on two idle cores: the
              # sweep's own work (checking the cells, the tables and figures) serial, the pool's split in two
              "serial_cpu_seconds": serial_cpu, "jobs2_parent_cpu_seconds": parent_cpu,
              "jobs2_pool_cpu_seconds": pool_cpu, "idle_2core_bound": serial_cpu / (parent_cpu + pool_cpu / 2)}
    for key in ("serial_seconds", "jobs2_seconds", "serial_cells_per_s", "jobs2_cells_per_s", "speedup",
                "serial_cpu_seconds", "jobs2_parent_cpu_seconds", "jobs2_pool_cpu_seconds", "idle_2core_bound"):
        print(f"{key:<20} {result[key]:.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
