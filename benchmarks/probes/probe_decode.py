"""Probe: exact-code decodes of random responder sets; count gradients off by more than 1e-8 that came
back with no warning. Not a test (thousands of decodes).

    OPENBLAS_NUM_THREADS=1 python benchmarks/probes/probe_decode.py [--cases 3000] [--seed 0] [--code cyclic_mds]
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

from gradcode import DecodeFallbackWarning, make_code
from gradcode.errors import NotDecodableError


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--code", default="cyclic_mds")
    ap.add_argument("--nmax", type=int, default=100)
    ap.add_argument("--json", action="store_true", help="end with the counts as one JSON line")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    codes: dict = {}
    counts = dict(tried=0, exact_ok=0, warned=0, raised=0, silent_wrong=0)
    worst = []
    for _ in range(args.cases):
        n = int(rng.integers(2, args.nmax + 1))
        s = int(rng.integers(0, n))
        if (n, s) not in codes:
            if len(codes) > 200:
                codes.clear()
            codes[n, s] = make_code(args.code, n, s)
        code = codes[n, s]
        k = n - s
        F = sorted(rng.choice(n, k, replace=False).tolist())
        partials = rng.standard_normal((code.n_parts, 3))
        truth = partials.sum(axis=0)
        counts["tried"] += 1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DecodeFallbackWarning)
            try:
                got = code.combine(code.encode(partials)[F], F)
            except NotDecodableError:
                counts["raised"] += 1
                continue
        err = float(np.linalg.norm(got - truth) / np.linalg.norm(truth))
        dec = code.decoding(F)
        if dec.method == "fallback" or caught:
            counts["warned"] += 1
        elif err > 1e-8:
            counts["silent_wrong"] += 1
            worst.append((err, n, s, dec.residual))
        else:
            counts["exact_ok"] += 1
    print(args.code, counts)
    for err, n, s, r in sorted(worst, reverse=True)[:10]:
        print(f"  silent: n={n} s={s} rel.err={err:.2e} residual={r:.2e}")
    if args.json:
        print(json.dumps(counts))


if __name__ == "__main__":
    main()
