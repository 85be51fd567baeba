"""Probe: run the same small spec on the MPI cluster and the simulator and diff who ended each iteration.

For every scheme (master, streaming, All-Reduce, abandon, deadline) and seed, per iteration:

- ``mpi!=sim``: the MPI responders (a streaming scheme: the messages ``(worker, chunks)`` combined; an All-Reduce
  step: the load used) differ from the simulator's, as sets;
- ``mpi!=ideal``: the MPI responders differ from the master's ideal ones (the simulator's arithmetic on the same
  draws, from where the workers really were): the rule the runtime applied is not the rule the ideal applied, or
  the arrivals were closer than the host's timing noise (``close``: the ideal's stopping arrival and the next
  were within ``--noise`` model units);
- ``below``: the iteration ended more than the timer resolution (1 ms) before its ideal end.

    OPENBLAS_NUM_THREADS=1 python benchmarks/probes/probe_agreement.py [--seeds 3] [--iterations 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import tomli_w

from gradcode.clusters.sim import simulate
from gradcode.output.report import read_records
from gradcode.spec import build, load_spec
from mpi_runtime.launch import prepare

SCALE = 0.025
SCHEMES = {
    "sync": ({"name": "sync"}, "finish"),
    "fastest_k k=4": ({"name": "fastest_k", "k": 4}, "finish"),
    "backup b=2": ({"name": "backup", "b": 2}, "finish"),
    "adaptive_k k0=4": ({"name": "adaptive_k", "k0": 4}, "finish"),
    "adaptive_k_load": ({"name": "adaptive_k_load", "max_batch": 16}, "finish"),
    "coded/cyclic_mds s=2": ({"name": "coded", "code": "cyclic_mds", "s": 2}, "finish"),
    "coded/cyclic_repetition s=2": ({"name": "coded", "code": "cyclic_repetition", "s": 2}, "finish"),
    "coded/expander s=2 deadline=3": ({"name": "coded", "code": "expander", "s": 2, "deadline": 3.0}, "finish"),
    "fastest_k_abandon k=4": ({"name": "fastest_k", "k": 4}, "abandon"),
    "partial_coded_abandon s=2": ({"name": "partial_coded", "s": 2}, "abandon"),
    "partial_coded s=2": ({"name": "partial_coded", "s": 2}, "finish"),
    "dropcompute tau=auto": ({"name": "dropcompute", "M": 4, "micro_load": 0.25, "batch": 4, "tau": "auto"},
                             "finish"),
    "anytime T=auto": ({"name": "anytime"}, "finish"),
}


def spec_for(scheme: dict, late: str, seed: int, iterations: int) -> dict:
    return {"cluster": {"workers": 8, "late_workers": late},
            "workload": {"name": "least_squares", "n_samples": 2000, "dim": 20, "noise": 0.1, "condition": 10.0},
            "delay": {"name": "pareto", "alpha": 2.0, "t_m": 1.0, "comm": 0.5},
            "scheme": dict(scheme), "run": {"iterations": iterations, "seed": seed, "time_scale": SCALE}}


def who(rec: dict, other: dict):
    """What decided the iteration: the messages ``(worker, chunks)`` when both records list them (streaming
    schemes), the load kept (All-Reduce: every worker joins), else the responders."""
    if rec.get("received") is not None and other.get("received") is not None:
        return frozenset(tuple(m) for m in rec["received"])
    if rec.get("drop_rate") is not None:
        return round(float(rec["used"]), 9)
    return frozenset(rec["responders"])


def compare(name: str, seed: int, iterations: int, noise: float, tmp: Path) -> dict:
    scheme, late = SCHEMES[name]
    spec = spec_for(scheme, late, seed, iterations)
    path = tmp / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    out = tmp / "out"
    cmd, env, _ = prepare(path, out, 9)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        return {"scheme": name, "seed": seed, "error": proc.stderr[-400:]}
    mpi, _ = read_records(out / "records.jsonl")
    s = load_spec(spec)
    schemes, delay, workload = build(s)
    sim = simulate(schemes[0], delay, workload, s.options).records
    row = {"scheme": name, "seed": seed, "iterations": len(mpi), "mpi!=sim": 0, "mpi!=ideal": 0, "close": 0,
           "below": 0}
    for a, b in zip(sim, mpi, strict=True):
        if who(a, b) != who(b, a):
            row["mpi!=sim"] += 1
        ideal = b.get("ideal_responders")
        if ideal is not None and frozenset(ideal) != frozenset(b["responders"]):
            row["mpi!=ideal"] += 1
            d = np.array(b["worker_delay"], dtype=float)
            plan_at = np.array([np.nan if x is None else x for x in b["worker_plan_received"]], dtype=float)
            arrive = np.sort((plan_at + d)[np.isfinite(plan_at + d)])
            span = b["ideal_end"] - b["start"]
            k = int(np.searchsorted(arrive, span, side="right"))
            if k < len(arrive) and arrive[k] - span < noise or k and span - arrive[k - 1] < noise:
                row["close"] += 1
        if b["end"] < b["ideal_end"] - 1e-3 / SCALE:
            row["below"] += 1
        row["min_ms"] = min(row.get("min_ms", np.inf), round((b["end"] - b["ideal_end"]) * SCALE * 1e3, 2))
    summary = json.loads((out / "summary.json").read_text())
    row["overhead_ratio"] = summary.get("overhead_ratio")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--noise", type=float, default=0.2, help="model units (0.2 = 5 ms at 25 ms per unit)")
    ap.add_argument("--schemes", nargs="*", default=list(SCHEMES))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for name in args.schemes:
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory() as tmp:
                row = compare(name, seed, args.iterations, args.noise, Path(tmp))
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        json.dump(rows, sys.stdout)


if __name__ == "__main__":
    main()
