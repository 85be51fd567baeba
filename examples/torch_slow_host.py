"""A PyTorch model's own stragglers: natural timing of ``torch_cnn`` on 3 emulated hosts, one CPU-limited, captured,
exported and replayed (root; needs torch: ``make test-torch`` builds ``.venv-torch``).

The same as ``examples/slow_host.py`` with a real model as the straggler source: nothing is injected (``[delay]
name = "none"``), a worker's time is torch's forward and backward on its partition, and host 2's processes share
``--cpu`` cores (a cgroup quota), so its workers are slow because the model's compute is. Three emulated hosts of
3 slots (``gradcode cluster``): the master and workers 0-1 on host 0, workers 2-4 on host 1, workers 5-7 on host 2.
Per round: 1. capture ``sync`` on MPI, 2. ``gradcode trace export`` it, 3. replay the uncoded schemes (``sync``,
``fastest_k``, ``backup``) in the simulator, 4. run them on MPI. The report: predicted / measured mean iteration
time, and per host the captured compute.

Run as root: ``.venv-torch/bin/python examples/torch_slow_host.py [--cpu 0.3] [--rounds 1] [--iterations 20]``.
The same by hand::

    sudo gradcode cluster run --hosts 3 --slots 3 --cpu 2:0.3 -- sh -c \\
        'gradcode run cnn.toml --out capture --hostfile $GRADCODE_HOSTFILE'
    gradcode trace export capture --out trace.csv      # then [delay] name = "trace", trace = "trace.csv"
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
from _common import table, write_report  # noqa: E402
from capture_replay import mpi_spec as _mpi_spec  # noqa: E402
from slow_host import HOST_OF_WORKER, N, capture_and_replay, host_mean  # noqa: E402

from mpi_runtime.cluster_emu import EmulatedCluster  # noqa: E402

NAME = "torch_slow_host"
WORKLOAD = {"name": "torch_cnn", "channels": 16, "seed": 0}
STARTUP = 300.0    # s: three ranks importing torch on 0.3 cores took over the default 60 s to start


def mpi_spec(scheme: dict, n: int, iterations: int, workload: dict) -> dict:
    spec = _mpi_spec(scheme, n, iterations, workload)
    spec["run"]["startup_timeout"] = STARTUP
    return spec


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="examples/torch_slow_host.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", type=float, default=0.3, help="host 2's cores (cgroup cpu quota; default %(default)s)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--prefix", default="tslow")
    p.add_argument("--out", default=f"results/examples/{NAME}")
    args = p.parse_args(argv)
    out = Path(args.out)
    began = time.perf_counter()
    result: dict[str, dict] = {}
    per_host: list[list[float]] = []
    with EmulatedCluster(3, slots=3, prefix=args.prefix, folder=out / "cluster", cpu={2: args.cpu}) as cluster:
        os.environ.update(cluster.env())
        for r in range(args.rounds):
            data = capture_and_replay(cluster, out / f"round{r}", mpi_spec, args.iterations, WORKLOAD, result)
            per_host.append([host_mean(data, k, 4) for k in range(3)])
            print(f"round {r}: compute per host (ms): "
                  + ", ".join(f"host{k} {c * 1e3:.3g}" for k, c in enumerate(per_host[-1])), flush=True)
    body = [[label, f"{np.median(r['predicted']) * 1e3:.4g}", f"{np.median(r['measured']) * 1e3:.4g}",
             f"{np.median(r['predicted']) / np.median(r['measured']):.3f}"] for label, r in result.items()]
    hosts = [[f"host{k}", ", ".join(str(i) for i, h in enumerate(HOST_OF_WORKER) if h == k),
              f"cpu {args.cpu:g} cores" if k == 2 else "-", ", ".join(f"{ph[k] * 1e3:.3g}" for ph in per_host)]
             for k in range(3)]
    text = ("# A PyTorch model's own stragglers: torch_cnn on 3 emulated hosts, captured and replayed\n\n"
            f"n = {N} workers, {json.dumps(WORKLOAD)}, natural timing, {args.iterations} iterations a run, "
            f"{args.rounds} rounds; took {time.perf_counter() - began:.0f} s.\n\n"
            + table(["host", "workers", "limit", "captured compute_s per unit (ms), per round"], hosts)
            + "\n\n" + table(["scheme", "predicted (ms)", "measured (ms)", "predicted / measured"], body))
    write_report(out, NAME, text)
    print(text)
    return result


if __name__ == "__main__":
    main()
