"""Benchmark the gradient codes: decode latency (uncached and cached) and ``combine`` throughput.

For n in {8, 32, 128} and message length d in {1e4, 1e6}, for a few representative codes:

- decode, uncached: the cache is cleared before every call (validation, the decoder itself and the
  residual), over a fresh random straggler set each time; median over repeats;
- decode, cached: the same responder list again and again (the dictionary fast path); median over batches;
- combine: ``code.combine(messages, responders)`` in GB/s (bytes of the messages read per second) next to
  a plain ``messages.sum(axis=0)`` over the same buffer in the same run (the baseline), and their ratio.

Targets printed next to the figures: combine >= 0.5x the baseline, cached decode < 20 us, uncached exact
decode < 5 ms at n = 128. The machine is noisy: every figure is a median over repeats.

``combine`` is one BLAS matrix-vector product; ``messages.sum`` is single-threaded numpy. On a loaded machine
with few cores a multi-threaded BLAS can stall for a scheduler time slice (milliseconds) waiting for its
threads, so ``--blas-threads 1`` (needs threadpoolctl) gives the fairer, steadier comparison; the JSON
records the setting.

    .venv/bin/python benchmarks/bench_codes.py                    # full run, writes results/codes.json
    .venv/bin/python benchmarks/bench_codes.py --quick            # smaller run
    .venv/bin/python benchmarks/bench_codes.py --blas-threads 1   # single-threaded BLAS
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from gradcode import ConfigError, list_codes, make_code

DEFAULT_CODES = ("cyclic_repetition", "cyclic_mds", "fractional_repetition", "reed_solomon", "expander")
TARGET_COMBINE_RATIO = 0.5
TARGET_CACHED_US = 20.0
TARGET_UNCACHED_MS = 5.0  # exact codes, at n = 128


def pick_s(name: str, n: int) -> int | None:
    """The valid ``s`` closest to ``n // 8`` for this code (codes constrain s, e.g. (s + 1) | n), or None."""
    target = max(1, n // 8)
    for delta in range(n):
        for s in (target - delta, target + delta):
            if 1 <= s < n:
                try:
                    make_code(name, n, s, seed=0)
                except ConfigError:
                    continue
                return s
    return None


def stragglers_out(rng: np.random.Generator, n: int, s: int) -> list[int]:
    """A random responder list with exactly ``s`` stragglers, as plain ints in arrival (random) order."""
    return [int(i) for i in rng.permutation(n)[: n - s]]


def time_uncached(code, rng: np.random.Generator, repeats: int) -> float:
    """Median seconds of one decode with an empty cache (a fresh responder set every time)."""
    times = []
    for _ in range(repeats):
        F = stragglers_out(rng, code.n, code.s)
        code._cache.clear()  # a new code object would rebuild B too; clearing isolates the decode
        t = time.perf_counter()
        code.decoding(F)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def time_cached(code, F: list[int], batches: int, calls: int) -> float:
    """Median seconds per call of ``decoding`` on the same responder list (after one warm-up call)."""
    code.decoding(F)
    per_call = []
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(calls):
            code.decoding(F)
        per_call.append((time.perf_counter() - t) / calls)
    return statistics.median(per_call)


def time_combine(code, F: list[int], d: int, repeats: int, rng: np.random.Generator
                 ) -> tuple[float, float, int]:
    """Median seconds of ``combine`` and of ``messages.sum(axis=0)`` on the same buffer; its size in bytes."""
    dtype = np.complex128 if code.is_complex else np.float64
    messages = rng.standard_normal((len(F), d)).astype(dtype)
    code.combine(messages, F)  # warm the decode cache and the buffer
    messages.sum(axis=0)
    t_comb, t_sum = [], []
    for _ in range(repeats):  # interleave, so that drifts in machine load hit both alike
        t = time.perf_counter()
        code.combine(messages, F)
        t_comb.append(time.perf_counter() - t)
        t = time.perf_counter()
        messages.sum(axis=0)
        t_sum.append(time.perf_counter() - t)
    return statistics.median(t_comb), statistics.median(t_sum), messages.nbytes


def run(codes, ns, ds, quick: bool, seed: int) -> tuple[list[dict], list[dict]]:
    rng = np.random.default_rng(seed)
    decode_rows, combine_rows = [], []
    for name in codes:
        for n in ns:
            s = pick_s(name, n)
            if s is None:
                print(f"# skip {name} n={n}: no valid s", file=sys.stderr)
                continue
            code = make_code(name, n, s, seed=seed)
            F = stragglers_out(rng, n, s)
            uncached = time_uncached(code, rng, repeats=10 if quick else 40)
            cached = time_cached(code, F, batches=5 if quick else 15, calls=200 if quick else 2000)
            method = code.decoding(F).method
            decode_rows.append(dict(code=name, n=n, s=s, method=method, exact=code.exact,
                                    uncached_ms=uncached * 1e3, cached_us=cached * 1e6))
            for d in ds:
                repeats = 5 if quick else (11 if n * d >= 10**7 else 30)
                t_comb, t_sum, nbytes = time_combine(code, F, d, repeats, rng)
                combine_rows.append(dict(
                    code=name, n=n, s=s, d=d, bytes=nbytes, complex=code.is_complex,
                    combine_gbps=nbytes / t_comb / 1e9, numpy_sum_gbps=nbytes / t_sum / 1e9,
                    ratio=t_sum / t_comb,
                ))
    return decode_rows, combine_rows


def blas_limit(threads: int | None):
    """Context limiting BLAS threads to ``threads`` (None: no change)."""
    if threads is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        sys.exit("--blas-threads needs threadpoolctl (pip install threadpoolctl)")
    return threadpool_limits(limits=threads, user_api="blas")


def blas_info() -> str:
    """BLAS library and thread count in use, if threadpoolctl can tell."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    described = [f"{p.get('internal_api')} {p.get('version')} x{p.get('num_threads')}" for p in pools]
    return ", ".join(described) or "none"


def ok(flag: bool) -> str:
    return "ok" if flag else "MISS"


def decode_table(rows: list[dict]) -> str:
    lines = [
        "| code | n | s | method | uncached decode (ms) "
        f"| target < {TARGET_UNCACHED_MS:g} ms at n = 128 (exact) "
        f"| cached decode (us) | target < {TARGET_CACHED_US:g} us |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        uncached_target = ok(r["uncached_ms"] < TARGET_UNCACHED_MS) if r["exact"] and r["n"] == 128 else "-"
        lines.append(
            f"| {r['code']} | {r['n']} | {r['s']} | {r['method']} | {r['uncached_ms']:.3f} "
            f"| {uncached_target} "
            f"| {r['cached_us']:.2f} | {ok(r['cached_us'] < TARGET_CACHED_US)} |"
        )
    return "\n".join(lines)


def combine_table(rows: list[dict]) -> str:
    lines = [
        "| code | n | s | d | messages (MB) | combine (GB/s) | numpy sum (GB/s) | ratio "
        f"| target >= {TARGET_COMBINE_RATIO:g}x |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kind = " (complex)" if r["complex"] else ""
        lines.append(
            f"| {r['code']}{kind} | {r['n']} | {r['s']} | {r['d']:.0e} | {r['bytes'] / 1e6:.1f} "
            f"| {r['combine_gbps']:.2f} | {r['numpy_sum_gbps']:.2f} | {r['ratio']:.2f} "
            f"| {ok(r['ratio'] >= TARGET_COMBINE_RATIO)} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n in {8, 32}, d in {1e4, 1e5}, fewer repeats")
    parser.add_argument("--codes", nargs="+", default=list(DEFAULT_CODES),
                        help=f"registry names (default: {' '.join(DEFAULT_CODES)})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="limit BLAS threads (threadpoolctl) for the whole run; default: leave as is")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "codes.json")
    args = parser.parse_args(argv)

    known = list_codes()
    unknown = [c for c in args.codes if c not in known]
    if unknown:
        parser.error(f"unknown codes {unknown}; accepted: {', '.join(known)}")
    codes = []
    for name in args.codes:  # the registry may name codes whose module has not landed yet
        try:
            make_code(name, 8, 1, seed=0)
        except ImportError as err:
            print(f"# skip {name}: {err}", file=sys.stderr)
            continue
        except ConfigError:
            pass
        codes.append(name)

    ns = (8, 32) if args.quick else (8, 32, 128)
    ds = (10**4, 10**5) if args.quick else (10**4, 10**6)
    with blas_limit(args.blas_threads):
        blas = blas_info()
        decode_rows, combine_rows = run(codes, ns, ds, args.quick, args.seed)

    print(f"BLAS: {blas}\n")
    print("## Decode\n")
    print(decode_table(decode_rows))
    print("\n## Combine\n")
    print(combine_table(combine_rows))

    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(python=platform.python_version(), numpy=np.__version__, machine=platform.machine(),
                processor=platform.processor(), quick=args.quick, seed=args.seed, blas=blas,
                targets=dict(combine_ratio=TARGET_COMBINE_RATIO, cached_us=TARGET_CACHED_US,
                             uncached_exact_ms_at_128=TARGET_UNCACHED_MS))
    args.out.write_text(json.dumps(dict(meta=meta, decode=decode_rows, combine=combine_rows), indent=1))
    print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
