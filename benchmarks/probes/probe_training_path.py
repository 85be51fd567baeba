"""Probe (issue 30, training row): how close to its floor could a training simulator of this design come?

``bench_sim.py --part training`` puts the simulator at ~0.83 of the bare gradients (sync, fastest_k) while its floor
(the delays, the gradients, their sum and the step) sits at ~1.0: the gap is the simulator's per-iteration Python.
This probe times, in the same process and interleaved with the bare gradients, a *fused* loop that does what a sync
or fastest-k training iteration must (the delays drawn a block ahead, when each worker begins and answers, the stop
at the k-th arrival, the average of the responders' gradients and the full sum, both from one product of weights and
partials as the simulator's, the gradient error, the step, the loss every 50 iterations) and keeps a record with
per-worker arrays (no lists). It is a measurement of what a redesign could reach, not a simulator: it has no
schemes, no stop policy and none of the record's other fields. Same workload and sizes as bench_sim (least squares n
= 100, d = 1,000, batch 10, 300 iterations).

    OPENBLAS_NUM_THREADS=1 python benchmarks/probes/probe_training_path.py [--repeats 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_sim import LOSS_EVERY, bare_gradients, interleaved, steady_allocator  # noqa: E402

from gradcode import make_delay, make_scheme, make_workload, simulate  # noqa: E402
from gradcode.clusters.driver import default_lr  # noqa: E402


def fused(wl, delay, w0, n: int, k: int, batch: int, iterations: int, ahead: int = 64) -> list[dict]:
    """A sync (k = n) or fastest-k training run with late workers finishing, in one loop (see the module doc)."""
    w = np.array(w0, dtype=float)
    lr = default_lr(None, wl)
    free, clock, records = np.zeros(n), 0.0, []
    weights = np.ones((2, n))     # row 0: the responders' (n / k each), row 1: every partition's
    for t0 in range(0, iterations, ahead):
        compute, comm = delay.sample(0, np.arange(t0, min(t0 + ahead, iterations)), n, 1.0)
        for j in range(len(compute)):
            t = t0 + j
            start = clock
            begin = np.maximum(start, free)
            arrive = begin + compute[j] + comm[j]
            order = np.argsort(arrive, kind="stable")
            responders = order[:k]
            end = float(arrive[order[k - 1]])
            started = begin < end
            free = np.where(started, arrive, free)
            clock = end
            partials = wl.gradients(w, t, range(n), n, batch)
            weights[0] = 0.0
            weights[0, responders] = n / k
            g, truth = weights @ partials       # the estimate and the full gradient in one pass (as the simulator)
            grad_error = float(np.linalg.norm(g - truth) / np.linalg.norm(truth))
            w -= lr * g
            loss = float(wl.loss(w)) if t % LOSS_EVERY == 0 or t == iterations - 1 else None
            records.append({"iteration": t, "start": start, "end": end, "responders": responders, "loss": loss,
                            "grad_error": grad_error, "begin": begin - start, "arrive": arrive - start})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    steady_allocator()
    clock = time.process_time
    delay = make_delay("shifted_exponential", mu=1.0)
    wl = make_workload("least_squares", n_samples=20_000, dim=1000, seed=0)
    n, iters, batch = 100, 300, 10
    w = wl.init_params()
    for name, k, params in (("sync", n, {}), ("fastest_k", 80, {"k": 80})):
        for r in range(args.rounds):
            sec = interleaved({
                "gradients": functools.partial(bare_gradients, wl, w, n, batch, iters),
                "losses": lambda: [wl.loss(w) for t in range(iters) if t % LOSS_EVERY == 0 or t == iters - 1],
                "fused": functools.partial(fused, wl, delay, w, n, k, batch, iters),
                "sim": lambda nm=name, p=params: simulate(make_scheme(nm, n=n, batch=batch, **p), delay, wl,
                                                          iterations=iters, seed=0, loss_every=LOSS_EVERY)},
                args.repeats, clock)
            base = sec["gradients"] + sec["losses"]
            print(f"{name:<10} round {r}: fused / baseline {base / sec['fused']:.3f}, "
                  f"simulator / baseline {base / sec['sim']:.3f}", flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
