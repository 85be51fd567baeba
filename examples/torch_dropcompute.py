"""DropCompute in your own PyTorch loop: ``torch.distributed`` (gloo, CPU), one slow worker, against plain
synchronous training (needs torch: ``make test-torch`` builds ``.venv-torch``).

Each of the ``WORLD_SIZE`` processes trains the digits CNN (``gradcode.workloads.torch.cnn_model``) on its own
shard: per step ``M`` micro-batches of ``b`` samples, accumulated, then one All-Reduce and an SGD step. Worker
``--slow-rank`` is a slow host: after each of its micro-batches it sleeps ``slowdown - 1`` times that micro-batch's
compute (a CPU ``slowdown`` times slower). First ``--steps`` synchronous steps (``tau = None``: everyone waits for
the slow worker), then ``--steps`` steps of DropCompute (``tau = "auto"``: chosen after ``--warmup`` steps from
``--record`` recorded ones, with the scheme's rule); rank 0 prints the mean step time of each, the micro-batches
computed and the held-out accuracy.

    .venv-torch/bin/mpiexec -n 3 .venv-torch/bin/python examples/torch_dropcompute.py
    .venv-torch/bin/torchrun --nproc-per-node 3 examples/torch_dropcompute.py

On hosts of their own (root): ``python examples/torch_dropcompute.py --hosts 3`` brings up an emulated cluster
(``gradcode cluster``: 3 network namespaces that share no memory, one process each, every link at ``--rate``) and
runs the same under ``mpiexec`` across them, gloo's rendezvous at the first host's address (``MASTER_ADDR``); host
2's process is the slow one. ``--cpu 0.3`` (cores) makes it slow for real, a CPU quota on host 2 (then give
``--slowdown 1``).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def on_hosts(args) -> dict:
    """This example again under ``mpiexec`` on ``args.hosts`` emulated hosts (one process each, the last one slow);
    rank 0's results."""
    from mpi_runtime.cluster_emu import EmulatedCluster
    from mpi_runtime.launch import environment, find_mpiexec, mpi_flavor

    exe = find_mpiexec()
    flavor = mpi_flavor(exe)
    with tempfile.TemporaryDirectory() as tmp, \
            EmulatedCluster(args.hosts, prefix=args.prefix, folder=Path(tmp) / "cluster",
                            rate={h: args.rate for h in range(args.hosts)},
                            cpu={args.hosts - 1: args.cpu} if args.cpu else None) as cluster:
        out = Path(tmp) / "results.json"
        rest = [str(x) for k in ("steps", "M", "batch", "slowdown", "warmup", "record", "lr")
                for x in (f"--{k}", getattr(args, k))]
        with socket.socket() as s:       # a free port (in this namespace; the first host's is empty anyway)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**environment(flavor), **cluster.env(), "MASTER_ADDR": cluster.address(0), "MASTER_PORT": str(port)}
        cmd = [exe, "-n", str(args.hosts), *cluster.hosts_args(flavor), sys.executable, __file__, *rest, "--slow-rank",
               str(args.hosts - 1), "--json", str(out)]
        subprocess.run(cmd, env=env, check=True, timeout=1800)
        results = json.loads(out.read_text())
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30, help="steps of each mode (default %(default)s)")
    p.add_argument("--M", type=int, default=8, help="micro-batches a step (default %(default)s)")
    p.add_argument("--batch", type=int, default=16, help="samples a micro-batch (default %(default)s)")
    p.add_argument("--slow-rank", type=int, default=2)
    p.add_argument("--slowdown", type=float, default=3.0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--record", type=int, default=6)
    p.add_argument("--lr", type=float, default=0.3)
    p.add_argument("--json", help="rank 0 writes the results here")
    p.add_argument("--hosts", type=int, help="run on this many emulated hosts (root; see above)")
    p.add_argument("--rate", default="1gbit", help="with --hosts: every host's link (default %(default)s)")
    p.add_argument("--cpu", type=float, help="with --hosts: the last host's cores (a CPU quota)")
    p.add_argument("--prefix", default="tdc", help="with --hosts: the hosts' names")
    args = p.parse_args(argv)
    if args.hosts:
        return on_hosts(args)
    import numpy as np
    import torch
    from torch.nn.functional import cross_entropy

    from gradcode.workloads.data import _digits
    from gradcode.workloads.torch import cnn_model
    from gradcode.workloads.torch_dropcompute import DropCompute, init_process_group

    torch.set_num_threads(1)          # several processes on one host's cores
    init_process_group()
    rank, size = torch.distributed.get_rank(), torch.distributed.get_world_size()

    X, y = _digits("torch_dropcompute")
    order = np.random.default_rng(0).permutation(len(y))
    test, train = order[:359], order[359:]
    Xs, ys = torch.tensor(X[train[rank::size]], dtype=torch.float32), torch.tensor(y[train[rank::size]])
    Xt, yt = torch.tensor(X[test], dtype=torch.float32), torch.tensor(y[test])
    rng = np.random.default_rng(rank)

    def micro_batches():
        return [rng.choice(len(ys), args.batch, replace=False) for _ in range(args.M)]

    results = {}
    for mode, tau in (("sync", None), ("dropcompute", "auto")):
        torch.manual_seed(0)
        model = cnn_model()
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        dc = DropCompute(model, tau=tau, warmup=args.warmup, record_steps=args.record)

        def forward(idx, model=model):
            start = time.perf_counter()
            loss = cross_entropy(model(Xs[idx]), ys[idx])
            if rank == args.slow_rank:        # the slow host: its forward (and so its micro-batch) takes longer
                time.sleep((args.slowdown - 1) * 3 * (time.perf_counter() - start))   # backward ~ 2x forward
            return loss

        steps = []
        for _ in range(args.steps):
            torch.distributed.barrier()       # every step starts together, as after a synchronous All-Reduce
            begin = time.perf_counter()
            info = dc.step(micro_batches(), forward)
            opt.step()
            steps.append({**info, "step_s": time.perf_counter() - begin})
        with torch.no_grad():
            accuracy = float((model(Xt).argmax(1) == yt).float().mean())
        settled = steps[args.warmup + args.record:]      # after tau is chosen (the same steps for sync)
        results[mode] = {"mean_step_ms": 1e3 * statistics.mean(s["step_s"] for s in settled),
                         "micro_batches_computed": statistics.mean(s["total_computed"] for s in settled),
                         "of": args.M * size, "tau_ms": None if dc.tau == float("inf") else 1e3 * dc.tau,
                         "test_accuracy": accuracy}
    if rank == 0:
        for mode, r in results.items():
            print(f"{mode:12s} mean step {r['mean_step_ms']:7.2f} ms, micro-batches {r['micro_batches_computed']:.1f}"
                  f" of {r['of']}, tau {r['tau_ms'] and round(r['tau_ms'], 2)} ms, held-out accuracy "
                  f"{r['test_accuracy']:.3f}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
    torch.distributed.destroy_process_group()
    return results


if __name__ == "__main__":
    main()
