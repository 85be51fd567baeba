"""The network model against MPI on hosts whose links carry the bytes (issue 38, item 4).

3 hosts x 3 slots (the master and 8 workers, as `gradcode cluster up --hosts 3 --slots 3` places them), every link
at 1 gbit, and again with host 1 at 200 mbit; d in {1e5, 5e5, 1e6}; sync, fastest_k (k = 6), coded
(cyclic_repetition and cyclic_mds, s = 2; cyclic_mds at n - s = 6 is complex: 16 d bytes a message), partial_coded
(s = 2) and dropcompute (tau = 2, M = 2). Least squares on 16 samples of d features, so a worker's real compute (two
products of 2 x d) stays far under the injected delays (shifted exponential a = 3, mu = 0.5, no comm: the wire is the
network's), and the comparison is of communication. time_scale 0.01 s a unit.

Each row is the simulator's prediction (mean iteration time, units) from the spec with its ``[network]`` table; with
``--hostfile`` (an emulated cluster's, its ``env.sh`` sourced, links limited as the table says: ``gradcode cluster up
--hosts 3 --slots 3 --rate 1:200mbit`` for the second half) the same spec also runs on MPI (``gradcode run
--hostfile``) and the row adds MPI's mean, its ideal (the same model on the run's own draws: should equal the
simulator's) and MPI / sim. Prints a Markdown table; writes benchmarks/results/network.json.

    .venv/bin/python benchmarks/network_validation.py [--iterations 20] [--d 1e5 5e5 1e6]
        [--links all-1gbit host1-200mbit] [--hostfile FOLDER/hostfile --links all-1gbit]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomli_w

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gradcode.clusters.sim import simulate  # noqa: E402
from gradcode.spec import build, load_spec_built  # noqa: E402

LINKS = {"all-1gbit": {"link": "1gbit", "slots": 3},
         "host1-200mbit": {"link": "1gbit", "slots": 3, "links": {"1": "200mbit"}}}
SCHEMES = {"sync": {"name": "sync"},
           "fastest_k k=6": {"name": "fastest_k", "k": 6},
           "cyclic_repetition s=2": {"name": "coded", "code": "cyclic_repetition", "s": 2},
           "cyclic_mds s=2": {"name": "coded", "code": "cyclic_mds", "s": 2},
           "partial_coded s=2": {"name": "partial_coded", "s": 2},
           "dropcompute tau=2": {"name": "dropcompute", "tau": 2.0, "M": 2, "warmup": 0}}
DELAY = {"name": "shifted_exponential", "a": 3.0, "mu": 0.5, "comm": 0.0}


def spec(scheme: dict, d: int, network: dict, iterations: int) -> dict:
    return {"cluster": {"workers": 8}, "workload": {"name": "least_squares", "n_samples": 16, "dim": d, "seed": 1},
            "delay": dict(DELAY), "scheme": dict(scheme), "network": network,
            "run": {"iterations": iterations, "seed": 0, "time_scale": 0.01, "grace": 30.0}}


def predicted(raw: dict) -> float:
    s, built = load_spec_built(raw)
    schemes, delay, workload = build(s, workload=built)
    return simulate(schemes[0], delay, workload, s.options).summary["mean_iteration_time"]


def on_mpi(raw: dict, hostfile: str, folder: Path) -> dict:
    """The MPI run's mean iteration time and ideal, in units (None if the job failed)."""
    path = folder / "spec.toml"
    path.write_text(tomli_w.dumps(raw))
    out = folder / "out"
    job = subprocess.run([sys.executable, "-m", "gradcode", "run", str(path), "--out", str(out), "--hostfile",
                          hostfile, "--timeout", "900"], capture_output=True, text=True)
    if job.returncode:
        return {"error": (job.stderr or job.stdout).strip()[-300:]}
    summary = json.loads((out / "summary.json").read_text())
    its = raw["run"]["iterations"]
    return {"mpi": summary["mean_iteration_time"], "ideal": summary["ideal_total_time"] / its}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--d", type=float, nargs="+", default=[1e5, 5e5, 1e6])
    ap.add_argument("--links", nargs="+", choices=list(LINKS), default=list(LINKS))
    ap.add_argument("--hostfile", help="run on MPI too, on these hosts (their links as --links says)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "network.json"))
    args = ap.parse_args()
    rows = []
    print("| links | d | scheme | sim (units) | MPI | MPI ideal | MPI / sim |\n|---|---|---|---|---|---|---|")
    for links in args.links:
        for d in (int(x) for x in args.d):
            for label, scheme in SCHEMES.items():
                raw = spec(scheme, d, LINKS[links], args.iterations)
                began = time.perf_counter()
                row = {"links": links, "d": d, "scheme": label, "sim": predicted(raw)}
                if args.hostfile:
                    with tempfile.TemporaryDirectory() as tmp:
                        row.update(on_mpi(raw, args.hostfile, Path(tmp)))
                row["seconds"] = time.perf_counter() - began
                rows.append(row)
                mpi = row.get("mpi")
                cells = ([f"{mpi:.2f}", f"{row['ideal']:.2f}", f"{mpi / row['sim']:.2f}"] if mpi is not None
                         else [row.get("error", "-")] + ["-", "-"])
                print(f"| {links} | {d:.0e} | {label} | {row['sim']:.2f} | " + " | ".join(cells) + " |", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
