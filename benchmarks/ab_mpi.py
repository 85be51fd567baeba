"""Interleaved A/B of the MPI overhead: one bench_mpi job per tree in turn, so that both see the same machine.

On a shared 2-core host the overhead ratio of one job moves by several percent with the load; running the two trees'
jobs alternately (A B, B A, A B, ...) and comparing medians is the fair comparison of two commits. Each tree is a
checkout of this repository with its own virtual environment (``TREE/.venv``, e.g. a ``git worktree`` detached at
the older commit); each job is ``bench_mpi.spec(SCHEME, 30)`` launched from that tree. Reported per tree: the
median total ratio (and every job's), the overhead in ms per iteration, the overruns, and the CPU seconds of the
whole job (mpiexec and every rank, start-up included).

    .venv/bin/python benchmarks/ab_mpi.py anytime --rounds 4 --trees . /work/wt/old
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# run inside each tree's own interpreter: that tree's bench_mpi and mpi_runtime
JOB = r'''
import json, resource, subprocess, sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
import bench_mpi as B, tomli_w
from mpi_runtime.launch import prepare
scheme, folder = sys.argv[1], Path(sys.argv[2])
path = folder / f"{scheme}.toml"
path.write_text(tomli_w.dumps(B.spec(scheme, 30)))
cmd, env, _ = prepare(path, folder / scheme, B.N_WORKERS + 1)
proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
if proc.returncode:
    sys.exit(proc.stderr)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
s = json.loads((folder / scheme / "summary.json").read_text())
print(json.dumps({"ratio": s["overhead_ratio"], "overruns": s.get("overruns", 0), "cpu": ru.ru_utime + ru.ru_stime,
                  "ms": (s["total_time"] - s["ideal_total_time"]) * s["time_scale"] / s["iterations"] * 1e3}))
'''


def job(tree: Path, scheme: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = {"OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
        proc = subprocess.run([str(tree / ".venv" / "bin" / "python"), "-c", JOB, scheme, tmp], cwd=tree,
                              capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"{tree}: {scheme} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("schemes", nargs="+", help="bench_mpi scheme names (benchmarks/bench_mpi.py SCHEMES)")
    p.add_argument("--trees", nargs=2, type=Path, required=True, metavar=("A", "B"))
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    for tree in args.trees:
        if not (tree / ".venv" / "bin" / "python").exists():
            p.error(f"{tree}: no .venv/bin/python (make .venv/.installed in that tree first)")
    for scheme in args.schemes:
        rows: dict[Path, list[dict]] = {t: [] for t in args.trees}
        for r in range(args.rounds):
            for tree in args.trees if r % 2 == 0 else args.trees[::-1]:
                rows[tree].append(job(tree, scheme))
        for tree, runs in rows.items():
            med = {k: statistics.median(x[k] for x in runs) for k in ("ratio", "ms", "overruns", "cpu")}
            every = ", ".join(f"{x['ratio']:.3f}" for x in runs)
            print(f"{scheme:22s} {str(tree):28s} ratio {med['ratio']:.3f} ({every})  {med['ms']:.2f} ms/iteration  "
                  f"overruns {med['overruns']:g}  job CPU {med['cpu']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
