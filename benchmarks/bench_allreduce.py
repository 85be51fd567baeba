"""The All-Reduce path's exchange across hosts against a plain mpi4py ``Allreduce`` of the same vector (root).

DropCompute and anytime (``mpi_runtime/allreduce.py``) sum ``[gradient sum, chunks kept]`` (``d + 1`` floats) over
every rank each step, and gather a row of figures from each: across hosts through ``exchange.MessageExchange``,
waited for as the runtime waits (``Decentralized._wait``: tests of the requests between naps, the peers watched).
This script brings up an emulated cluster (``gradcode cluster``: 3 hosts of 3 slots, every link at ``--rate``), then
one MPI job of 9 ranks that times, for each ``d`` and repeat, both on the same hosts and links, alternating:

- ``plain``: ``comm.Allreduce(x, y)`` of ``d + 1`` floats (blocking);
- ``exchange``: ``MessageExchange.exchange(wait)``, the runtime's All-Reduce and All-Gather.

A repeat's time is the slowest rank's, from a barrier to its completion; the table gives the medians and their
ratio (exchange / plain), with the bytes host 1's interface received in the whole job. Then, on the same cluster,
``gradcode run`` of ``dropcompute`` and ``anytime`` (8 workers, least squares with ``d`` parameters and 32 samples,
shifted exponential delays, ``time_scale`` 0.01): a step's exchange is its ``end`` less the last worker's joining
(``worker_sent``), the median over its steps (the first left out) against the plain ``Allreduce``'s median.

    .venv/bin/python benchmarks/bench_allreduce.py [--dims 1e5,1e6] [--repeats 15] [--iterations 10]
        [--rate 1gbit] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HOSTS, SLOTS = 3, 3
SCALE = 0.01     # seconds per model unit in the gradcode runs


def rank_job(dims: list[int], repeats: int) -> dict | None:
    """Inside the MPI job: the timings, on rank 0 (None on the others)."""
    import numpy as np
    from mpi4py import MPI

    from mpi_runtime import protocol as P
    from mpi_runtime.allreduce import INFO
    from mpi_runtime.exchange import MessageExchange
    from mpi_runtime.peers import Peers

    world = MPI.COMM_WORLD
    peers = Peers(world)
    P.precise_sleep()

    def wait(done, what, idle=None):       # as Decentralized._wait waits, without its error reports
        P.wait_for(done, timeout=60.0, watch=peers.check, idle=idle)

    result = {}
    for d in dims:
        comm = world.Dup()
        ex = MessageExchange(comm, d + 1, INFO)
        x, y = np.ones(d + 1), np.empty(d + 1)
        ex.send[:] = 1.0

        times: dict[str, list[float]] = {"plain": [], "exchange": []}
        for r in range(repeats + 1):         # the first round warms the connections up and is dropped
            for name in ("plain", "exchange")[:: 1 if r % 2 else -1]:
                comm.Barrier()
                began = time.perf_counter()
                if name == "plain":
                    comm.Allreduce(x, y)
                else:
                    ex.exchange(wait)
                took = comm.allreduce(time.perf_counter() - began, op=MPI.MAX)
                if r:
                    times[name].append(took)
        assert np.all(y == world.Get_size()) and np.all(ex.total == world.Get_size())
        result[str(d)] = times
        comm.Free()
    return result if world.Get_rank() == 0 else None


RUN_SCHEMES = {"dropcompute": {"name": "dropcompute", "M": 2, "tau": 4.0},
               "anytime": {"name": "anytime", "M": 2, "max_samples": 4, "T": 4.0}}


def run_exchange(cluster, scheme: dict, d: int, folder: Path, iterations: int) -> float:
    """The median seconds of a ``gradcode run`` step's exchange (its end less the last worker's joining)."""
    import numpy as np
    import tomli_w

    from mpi_runtime.launch import launch

    spec = {"cluster": {"workers": HOSTS * SLOTS - 1},
            "workload": {"name": "least_squares", "n_samples": 32, "dim": d, "seed": 1},
            "delay": {"name": "shifted_exponential", "a": 3.0, "mu": 0.5}, "scheme": scheme,
            "run": {"iterations": iterations, "seed": 0, "time_scale": SCALE, "grace": 30.0}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.toml").write_text(tomli_w.dumps(spec))
    code = launch(folder / "spec.toml", folder / "run", hostfile=str(cluster.hostfile), timeout=1200,
                  echo=lambda *a: None)
    if code != 0:
        raise RuntimeError(f"gradcode run of {folder / 'spec.toml'} exited {code}")
    records = [json.loads(line) for line in (folder / "run" / "records.jsonl").read_text().splitlines()]
    return float(np.median([r["end"] - r["start"] - max(r["worker_sent"]) for r in records[1:]])) * SCALE


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dims", default="1e5,1e6", help="vector lengths d (default %(default)s)")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--rate", default="1gbit", help="every host's link (tc tbf; default %(default)s)")
    p.add_argument("--iterations", type=int, default=10,
                   help="steps of each gradcode run (0: no runs; default %(default)s)")
    p.add_argument("--prefix", default="bar")
    p.add_argument("--json", help="write the timings here")
    p.add_argument("--rank-job", help=argparse.SUPPRESS)      # inside the MPI job: write rank 0's timings here
    args = p.parse_args(argv)
    dims = [int(float(x)) for x in args.dims.split(",")]
    if args.rank_job:
        got = rank_job(dims, args.repeats)
        if got is not None:
            Path(args.rank_job).write_text(json.dumps(got))
        return {}
    import numpy as np

    from mpi_runtime.cluster_emu import EmulatedCluster
    from mpi_runtime.launch import environment, find_mpiexec, mpi_flavor

    exe = find_mpiexec()
    flavor = mpi_flavor(exe)
    with tempfile.TemporaryDirectory() as tmp, \
            EmulatedCluster(HOSTS, slots=SLOTS, prefix=args.prefix, folder=Path(tmp) / "cluster",
                            rate={h: args.rate for h in range(HOSTS)}) as cluster:
        out = Path(tmp) / "times.json"
        cmd = [exe, "-n", str(HOSTS * SLOTS), *cluster.hosts_args(flavor), sys.executable, __file__,
               "--dims", args.dims, "--repeats", str(args.repeats), "--rank-job", str(out)]
        before = cluster.link_bytes(1)[0]
        subprocess.run(cmd, env={**environment(flavor), **cluster.env()}, check=True, timeout=1800)
        received = cluster.link_bytes(1)[0] - before
        times = json.loads(out.read_text())
        os.environ.update(cluster.env())
        runs = {d: {name: run_exchange(cluster, scheme, int(d), Path(tmp) / f"{name}{d}", args.iterations)
                    for name, scheme in RUN_SCHEMES.items()} for d in times} if args.iterations else {}
    print(f"{flavor}: {HOSTS} hosts x {SLOTS} ranks, every link {args.rate}; medians of {args.repeats} repeats "
          f"(slowest rank); host 1 received {received / 1e6:.4g} MB in the job")
    names = list(RUN_SCHEMES) if runs else []
    print(f"{'d':>9} {'plain (ms)':>11} {'exchange (ms)':>14} {'ratio':>6}"
          + "".join(f" {name + ' run (ms)':>20} {'ratio':>6}" for name in names))
    rows = {}
    for d, t in times.items():
        plain, ex = (float(np.median(t[k])) for k in ("plain", "exchange"))
        rows[d] = {"plain_ms": 1e3 * plain, "exchange_ms": 1e3 * ex, "ratio": ex / plain, **t,
                   **{f"{name}_run_ms": 1e3 * runs[d][name] for name in names}}
        print(f"{int(d):>9} {1e3 * plain:>11.2f} {1e3 * ex:>14.2f} {ex / plain:>6.3f}"
              + "".join(f" {1e3 * runs[d][name]:>20.2f} {runs[d][name] / plain:>6.3f}" for name in names))
    if args.json:
        Path(args.json).write_text(json.dumps({"flavor": flavor, "rate": args.rate, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
