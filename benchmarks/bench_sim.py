"""Simulator throughput: timing-only and training runs against what any simulator must spend.

1. Timing only: 10,000 workers x 1,000 iterations of fastest-k (k = 9,000), late workers abandoning (one
   vectorised pass) and finishing (delays drawn ahead, one vectorised step per iteration). Target: under 2 s, and
   at most 3x the numpy baseline measured in the same run: the same delays drawn (``delay.sample``, 256 iterations
   at a time) and each row partitioned for its k-th arrival (``np.partition``), the least any simulator of this
   run must do. Exact codes timing only (the stop is each iteration's first decodable prefix), as a ratio to
   fastest_k with ``k = n - s``.
2. Full training: least squares, n = 100 workers, d = 1000, mini-batches of 10 samples per partition, in iterations
   per second. Target: >= 500/s and >= 0.95x the baseline in the same run: the bare gradient computation of the
   same partitions and the loss evaluations the run asks for (every 50 iterations and the last: each a pass over
   all 20,000 samples, ~10 iterations' gradients), what any simulator must spend, so the ratio is the simulator's
   own overhead. ``ratio_to_gradients`` is the ratio to the gradients alone (it counts the loss evaluations as
   overhead). ``floor_ratio_to_baseline``: the same ratio for the
   least loop any simulator of this design runs (:func:`training_floor`: each iteration's delays from its own
   seeded generators, drawn a block ahead as the simulator does, the gradients, their sum and the step), so the best
   ratio a simulator could reach;
   ``ratio_to_floor`` is the simulator's share of what it cannot avoid. Two ceilings, measured in the same run:
   ``scheme_ms_per_iteration``, the time spent inside the scheme's own methods (a code's encoding, its stop rule's
   decodability checks and its decode; partial_coded's chunk ordering), and ``scheme_bound_ratio_to_baseline``,
   the ratio a simulator that added nothing but that arithmetic would reach; for sync and fastest_k
   ``lean_loop_ratio_to_baseline``, a loop that does only what such a training iteration must (:func:`lean_loop`).

Each repeat times the baseline and the simulator one after the other (interleaved, so load from other processes
falls on both); the ratio is of the medians.

    python benchmarks/bench_sim.py [--repeats 5] [--clock cpu] [--part timing|training|all]

``--clock cpu`` times with this process's CPU time instead of the wall clock: steadier on a shared machine, to
compare two versions of the library (the targets are wall-clock ones).
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import statistics
import time
from pathlib import Path

# one BLAS thread, as the Makefile's targets and docs/benchmarks.md's machine: with two on a shared 2-core host a
# decode's small least-squares solve stalls for milliseconds, and coded training runs several times slower
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402  (after the BLAS setting)

from gradcode import make_delay, make_scheme, make_workload, simulate
from gradcode.clusters.driver import default_lr
from gradcode.clusters.sim import block_rows
from gradcode.schemes import chunk_order

LOSS_EVERY = 50   # the runs' loss evaluations and the last iteration's (evaluates_loss): in the baseline too

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def steady_allocator() -> None:
    """Fix glibc's mmap and trim thresholds (32 MB, 64 MB) for this process, so that no block of either side is
    page-faulted in afresh: by default they move with the largest array freed so far, and the same baseline can take
    twice as long depending on what the simulator had allocated before it (tens of thousands of page faults a run).
    The ratio then compares the arithmetic; a fresh process pays the faults once per block (docs/benchmarks.md)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:       # not glibc: its allocator, its own behaviour
        return
    libc.mallopt(-3, 32 << 20)    # M_MMAP_THRESHOLD
    libc.mallopt(-1, 64 << 20)    # M_TRIM_THRESHOLD


def timed(fn, repeats: int, clock=time.perf_counter) -> float:
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def interleaved(fns: dict, repeats: int, clock=time.perf_counter) -> dict:
    """Median seconds of each function, the functions called in turn within every repeat."""
    times: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = clock()
            fn()
            times[name].append(clock() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def draw_and_partition(delay, n: int, k: int, iterations: int, seed: int = 0) -> float:
    """The timing baseline: the same delays, each row partitioned for its k-th arrival; the sum of those times. In
    the simulator's blocks of rows (``block_rows``: 4 MB an array; 256 rows of 10,000 workers made this 10-20%
    slower)."""
    chunk = block_rows(n)
    total = 0.0
    for t0 in range(0, iterations, chunk):
        compute, comm = delay.sample(seed, np.arange(t0, min(t0 + chunk, iterations)), n, 1.0)
        total += float(np.partition(compute + comm, k - 1, axis=1)[:, k - 1].sum())
    return total


def bare_gradients(wl, w, parts: int, batch: int, iterations: int) -> None:
    """The training baseline: every partition's mini-batch gradient, each iteration's dropped before the next (as
    the simulator's: a list keeping all of them, 240 MB here, made the baseline pay for fresh pages and flattered
    the ratio by ~10%)."""
    for t in range(iterations):
        wl.gradients(w, t, range(parts), parts, batch)


def training_floor(wl, delay, w0, parts: int, batch: int, iterations: int, ahead: int = 64) -> None:
    """The least loop any simulator of this design runs: the delays (common random numbers: each iteration's from
    its own seeded generators, so every scheme meets the same delays; ``gradcode.delays._crn``), drawn ``ahead``
    iterations at a time as the simulator does while the load stays the same, every partition's gradient, their sum
    and the step. No stop rule, no combine but the sum, no record."""
    w = np.array(w0, dtype=float)
    lr = default_lr(None, wl)
    for t in range(iterations):
        if t % ahead == 0:
            delay.sample(0, np.arange(t, min(t + ahead, iterations)), parts, 1.0)
        w -= lr * wl.gradients(w, t, range(parts), parts, batch).sum(axis=0)


def lean_loop(wl, delay, w0, n: int, k: int, batch: int, iterations: int, ahead: int = 64) -> list[dict]:
    """A sync (``k = n``) or fastest-k training run with late workers finishing, in one loop: the delays drawn a
    block ahead, when each worker begins and answers, the stop at the k-th arrival, the responders' average and the
    full sum from one product of weights and partials (as the simulator's), the gradient error, the step, the losses,
    and a record of per-worker arrays. No schemes, no stop policy, few record fields: not a simulator, the least
    loop a training iteration of these two schemes needs."""
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
            free = np.where(begin < end, arrive, free)
            clock = end
            partials = wl.gradients(w, t, range(n), n, batch)
            weights[0] = 0.0
            weights[0, responders] = n / k
            g, truth = weights @ partials
            grad_error = float(np.linalg.norm(g - truth) / np.linalg.norm(truth))
            w -= lr * g
            loss = float(wl.loss(w)) if t % LOSS_EVERY == 0 or t == iterations - 1 else None
            records.append({"iteration": t, "start": start, "end": end, "responders": responders, "loss": loss,
                            "grad_error": grad_error, "begin": begin - start, "arrive": arrive - start})
    return records


# the scheme methods a simulated iteration calls: what they spend is the scheme's own arithmetic
SCHEME_METHODS = ("plan", "messages", "message", "message_weights", "combine", "combine_sum", "combine_partials",
                  "stop_index", "emits", "observe_chunks", "adapt", "record")


def scheme_seconds(fresh, delay, wl, iterations: int, clock) -> float:
    """Seconds a training run (as :func:`fresh_run`) spends inside its scheme's own methods (``SCHEME_METHODS``,
    the outermost call only: a method calling another is counted once), by ``clock``."""
    scheme, spent, depth = fresh(), [0.0], [0]

    def timed_method(method):
        def call(*args, **kwargs):
            depth[0] += 1
            t0 = clock()
            try:
                return method(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    spent[0] += clock() - t0
        return call

    for name in SCHEME_METHODS:
        setattr(scheme, name, timed_method(getattr(scheme, name)))
    fresh_run(lambda: scheme, delay, wl, iterations)
    return spent[0]


def fresh_run(fresh, delay, wl, iterations: int):
    """A training run of a fresh scheme (``fresh()``) with partial_coded's process-wide ordering caches emptied, as
    in a new process: a code's decodes are cached per responder set, the orderings per capacity vector, and the
    same seed brings the same sets, so the repeats after the first would decode and order for free."""
    chunk_order._feasible.cache_clear()
    chunk_order._feasible_multi.cache_clear()
    return simulate(fresh(), delay, wl, iterations=iterations, seed=0, loss_every=LOSS_EVERY)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument("--part", choices=("timing", "training", "all"), default="all")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sim.json"))
    args = parser.parse_args()
    steady_allocator()
    clock = CLOCKS[args.clock]
    bench = functools.partial(timed, repeats=args.repeats, clock=clock)
    delay = make_delay("shifted_exponential", mu=1.0)
    rows = []

    n, k, iters = 10_000, 9_000, 1_000
    if args.part in ("timing", "all"):
        scheme = make_scheme("fastest_k", n=n, k=k)
        fns = {"baseline": lambda: draw_and_partition(delay, n, k, iters)}
        for late in ("abandon", "finish"):
            fns[late] = lambda lw=late: simulate(scheme, delay, iterations=iters, seed=0, late_workers=lw)
        sec = interleaved(fns, args.repeats, clock)
        for late in ("abandon", "finish"):
            ratio = sec[late] / sec["baseline"]
            rows.append({"case": f"timing only, n={n}, k={k}, {iters} iterations, late workers {late}",
                         "seconds": sec[late], "baseline_seconds": sec["baseline"], "ratio_to_baseline": ratio,
                         "target": "< 2 s, <= 3x baseline", "met": sec[late] < 2.0 and ratio <= 3.0})

        # Exact codes in the timing-only path: the stop is the first decodable prefix of each iteration's arrival
        # order, against fastest_k with k = n - s on the same draws (the fixed-count pass) as baseline.
        for code, n, s, iters in (("cyclic_mds", 8, 2, 20_000), ("cyclic_repetition", 100, 10, 1_000),
                                  ("cyclic_mds", 100, 10, 1_000)):
            # a fresh scheme each repeat: its remembered verdicts would make the later repeats free
            sec = bench(lambda c=code, n=n, s=s, it=iters: simulate(make_scheme("coded", n=n, code=c, s=s), delay,
                                                                    iterations=it, seed=0, late_workers="abandon"))
            base_scheme = make_scheme("fastest_k", n=n, k=n - s)
            base = bench(lambda sc=base_scheme, it=iters: simulate(sc, delay, iterations=it, seed=0,
                                                                   late_workers="abandon"))
            rows.append({"case": f"timing only, coded/{code} n={n} s={s}, {iters} iterations, late workers abandon",
                         "seconds": sec, "baseline_fastest_k_seconds": base, "ratio_to_baseline": sec / base})

    if args.part in ("training", "all"):
        wl = make_workload("least_squares", n_samples=20_000, dim=1000, seed=0)
        n, iters, batch = 100, 300, 10
        w = wl.init_params()
        for name, params in (("sync", {}), ("fastest_k", {"k": 80}),
                             ("coded", {"code": "cyclic_repetition", "s": 3}), ("partial_coded", {"s": 3})):
            fresh = functools.partial(make_scheme, name, n=n, batch=batch, **params)
            parts = fresh().plan(0).n_parts
            fns = {"gradients": functools.partial(bare_gradients, wl, w, parts, batch, iters),
                   "floor": functools.partial(training_floor, wl, delay, w, parts, batch, iters),
                   "losses": lambda: [wl.loss(w) for t in range(iters) if t % LOSS_EVERY == 0 or t == iters - 1],
                   "sim": functools.partial(fresh_run, fresh, delay, wl, iters)}
            k = params.get("k", n) if name in ("sync", "fastest_k") else None
            if k is not None:
                fns["lean"] = functools.partial(lean_loop, wl, delay, w, n, k, batch, iters)
            sec = interleaved(fns, args.repeats, clock)
            arithmetic = statistics.median(scheme_seconds(fresh, delay, wl, iters, clock) for _ in range(args.repeats))
            base = sec["gradients"] + sec["losses"]
            ceilings = {"scheme_ms_per_iteration": 1e3 * arithmetic / iters,
                        "scheme_bound_ratio_to_baseline": base / (base + arithmetic)}
            if k is not None:
                ceilings["lean_loop_ratio_to_baseline"] = base / sec["lean"]
            rows.append({"case": f"training {name}, least squares n={n}, d=1000, batch {batch}",
                         "iterations_per_second": iters / sec["sim"],
                         "baseline_gradients_per_second": iters / sec["gradients"],
                         "ratio_to_gradients": sec["gradients"] / sec["sim"],
                         "loss_evaluations_seconds": sec["losses"],
                         "ratio_to_baseline": base / sec["sim"],
                         "floor_ratio_to_baseline": base / (sec["floor"] + sec["losses"]),
                         "ratio_to_floor": (sec["floor"] + sec["losses"]) / sec["sim"], **ceilings,
                         "target": ">= 500/s, >= 0.95x",
                         "met": iters / sec["sim"] >= 500 and base / sec["sim"] >= 0.95})

    for row in rows:
        shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
        print(json.dumps(shown))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
