"""A slow host for real: capture your own stragglers on an emulated cluster and replay them (root).

Three emulated hosts (``gradcode cluster``, ``mpi_runtime/cluster_emu.py``), 3 slots each: the master and workers
0-1 on host 0, workers 2-4 on host 1, workers 5-7 on host 2. Host 1's link is limited with a token bucket
(``--rate``, ``tc qdisc ... tbf``, both ways) and host 2's processes get a fraction of a core (``--cpu``, a cgroup
``cpu`` quota). Then, as ``examples/capture_replay.py`` does on one host: natural timing (``[delay] name =
"none"``), the ``mlp`` workload (digits, two hidden layers of 256: 680 kB messages), per round 1. capture ``sync``
on MPI, 2. ``gradcode trace export`` it, 3. replay the uncoded schemes (``sync``, ``fastest_k``, ``backup``) in the
simulator, 4. run them on MPI; the table is predicted / measured mean iteration time, and per host the workers'
captured compute and communication (so that the records show which workers the limits slowed).

Run as root: ``python examples/slow_host.py [--rate 200mbit] [--cpu 0.3] [--rounds 2] [--iterations 20] [--out DIR]``.
The cluster is removed however the script ends.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))
import numpy as np  # noqa: E402
import tomli_w  # noqa: E402
from _common import table, write_report  # noqa: E402
from capture_replay import mpi_spec, predict  # noqa: E402

from gradcode.study.capture import export_trace  # noqa: E402
from mpi_runtime.cluster_emu import EmulatedCluster  # noqa: E402
from mpi_runtime.launch import launch  # noqa: E402

NAME = "slow_host"
N = 8
WORKLOAD = {"name": "mlp", "hidden": [256, 256], "seed": 0}
HOST_OF_WORKER = [0, 0, 1, 1, 1, 2, 2, 2]     # 3 slots a host, rank 0 (the master) first


def schemes(n: int) -> list[tuple[str, dict]]:
    return [("sync", {"name": "sync"}), (f"fastest_k k={n - 2}", {"name": "fastest_k", "k": n - 2}),
            ("backup b=2", {"name": "backup", "b": 2})]


def run(spec: dict, out: Path, hostfile: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    code = launch(path, out / "run", hostfile=str(hostfile), timeout=600, echo=lambda *a, **k: None)
    summary = json.loads((out / "run" / "summary.json").read_text())
    if code != 0 or "error" in summary:
        raise RuntimeError(f"MPI run of {path} failed (exit {code}): {summary.get('error', 'see ' + str(out))}")
    return summary


def capture_and_replay(cluster, folder: Path, spec_of, iterations: int, workload: dict, result: dict) -> np.ndarray:
    """One round: capture ``sync``'s natural timing on MPI (``spec_of(scheme, n, iterations, workload)`` makes a
    spec), export its trace, then each uncoded scheme predicted from the trace and measured on MPI, appended to
    ``result[label]``; returns the trace's rows (step, worker, ..., compute_s, comm_s)."""
    capture = run(spec_of({"name": "sync"}, N, iterations, workload), folder / "capture", cluster.hostfile)
    print(f"{folder.name}: sync {capture['mean_iteration_time'] * 1e3:.4g} ms", flush=True)
    trace, _, _ = export_trace(folder / "capture" / "run", folder / "trace.csv")
    for label, scheme in schemes(N):
        got = result.setdefault(label, {"predicted": [], "measured": []})
        got["predicted"].append(predict(scheme, N, iterations, trace))
        got["measured"].append(run(spec_of(scheme, N, iterations, workload),
                                   folder / label.replace(" ", "_").replace("=", ""),
                                   cluster.hostfile)["mean_iteration_time"])
        print(f"  {label}: predicted {got['predicted'][-1] * 1e3:.4g} ms, measured "
              f"{got['measured'][-1] * 1e3:.4g} ms", flush=True)
    return np.loadtxt(trace, delimiter=",", skiprows=1, ndmin=2)


def host_mean(data: np.ndarray, host: int, column: int) -> float:
    """The mean of a trace column over the workers of ``host``."""
    return float(np.mean(data[np.isin(data[:, 1], [w for w, h in enumerate(HOST_OF_WORKER) if h == host]), column]))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="examples/slow_host.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", default="200mbit", help="host 1's link (tc tbf rate; default %(default)s)")
    p.add_argument("--cpu", type=float, default=0.3, help="host 2's cores (cgroup cpu quota; default %(default)s)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--prefix", default="slow")
    p.add_argument("--out", default=f"results/examples/{NAME}")
    args = p.parse_args(argv)
    out = Path(args.out)
    began = time.perf_counter()
    result: dict[str, dict] = {}
    per_host: list[list[tuple[float, float]]] = []
    with EmulatedCluster(3, slots=3, prefix=args.prefix, folder=out / "cluster", rate={1: args.rate},
                         cpu={2: args.cpu}) as cluster:
        os.environ.update(cluster.env())
        for r in range(args.rounds):
            data = capture_and_replay(cluster, out / f"round{r}", mpi_spec, args.iterations, WORKLOAD, result)
            hosts = [(host_mean(data, k, 4), host_mean(data, k, 5)) for k in range(3)]
            per_host.append(hosts)
            print(f"round {r}: per host compute / comm (ms): "
                  + "; ".join(f"host{k} {c * 1e3:.3g} / {m * 1e3:.3g}" for k, (c, m) in enumerate(hosts)), flush=True)
    body = []
    for label, r in result.items():
        pairs = [a / b for a, b in zip(r["predicted"], r["measured"], strict=True)]
        r["paired"] = pairs
        ratio = np.median(r["predicted"]) / np.median(r["measured"])
        body.append([label, f"{np.median(r['predicted']) * 1e3:.4g}", f"{np.median(r['measured']) * 1e3:.4g}",
                     f"{ratio:.3f}", ", ".join(f"{x:.3f}" for x in pairs)])
    hosts_body = [[f"host{k}", ", ".join(f"{i}" for i, h in enumerate(HOST_OF_WORKER) if h == k),
                   "link " + args.rate if k == 1 else ("cpu " + f"{args.cpu:g} cores" if k == 2 else "-"),
                   ", ".join(f"{ph[k][0] * 1e3:.3g}" for ph in per_host),
                   ", ".join(f"{ph[k][1] * 1e3:.3g}" for ph in per_host)] for k in range(3)]
    text = ("# A slow host for real: capture on 3 emulated hosts, replay in the simulator\n\n"
            f"n = {N} workers, {json.dumps(WORKLOAD)}, natural timing, {args.iterations} iterations a run, "
            f"{args.rounds} rounds; took {time.perf_counter() - began:.0f} s.\n\n"
            + table(["host", "workers", "limit", "captured compute_s per unit (ms), per round",
                     "captured comm_s (ms), per round"], hosts_body)
            + "\n\n" + table(["scheme", "predicted (ms)", "measured (ms)", "predicted / measured", "per round"], body))
    write_report(out, NAME, text)
    print(text)
    return result


if __name__ == "__main__":
    main()
