"""The quick-start demo: build every code, lose stragglers, decode, print a table of residuals.

For each code at ``n = 12, s = 3`` (``s = 0`` for ``uncoded``), random partial gradients are encoded, a straggler
pattern is dropped (``s`` random workers, a burst of ``s`` neighbours, then ``s + 2`` workers: more than an exact code
tolerates) and the rest are decoded with ``method='auto'``. The table shows what each decode reports: the method it
used (``exact``, or ``optimal`` when the set is not decodable), the residual ``||B_F^T a - 1|| / sqrt(n_parts)`` and the
relative error of the recovered gradient.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..codes import list_codes, make_code
from ..errors import DecodeFallbackWarning


def rows(n: int = 12, s: int = 3, d: int = 1000, seed: int = 0):
    rng = np.random.default_rng(seed)
    for name in list_codes():
        code = make_code(name, n=n, s=0 if name == "uncoded" else s, seed=seed)
        partials = rng.standard_normal((code.n_parts, d))
        if name == "reed_solomon_gf":
            partials = np.round(partials, 3)
        truth = partials.sum(axis=0)
        messages = code.encode(partials)
        patterns = {
            f"{code.s} random": rng.choice(n, size=code.s, replace=False),
            f"burst of {code.s}": (np.arange(code.s) + 5) % n,
            f"{code.s + 2} random": rng.choice(n, size=min(code.s + 2, n - 1), replace=False),
        }
        for label, lost in patterns.items():
            responders = [i for i in range(n) if i not in set(lost.tolist())]
            try:
                with warnings.catch_warnings():     # the table's method column says "fallback"; main() explains it
                    warnings.simplefilter("ignore", DecodeFallbackWarning)
                    dec = code.decoding(responders, "auto")
                    estimate = code.combine(messages[responders], responders, "auto")
            except Exception as err:  # the finite-field code has no approximate decoder: say so
                yield name, code, label, f"none: {type(err).__name__}", float("nan"), float("nan")
                continue
            error = np.linalg.norm(estimate - truth) / np.linalg.norm(truth)
            yield name, code, label, dec.method, dec.residual, error


def main(n: int = 12, s: int = 3) -> None:
    print(f"gradcode demo: n = {n} workers, s = {s} (each partition on s + 1 workers), d = 1000, method='auto'\n")
    header = (f"{'code':<22} {'exact':<5} {'load':>5} {'stragglers':<12} {'method':<18} {'residual':>10} "
              f"{'rel. error':>10}")
    print(header)
    print("-" * len(header))
    for name, code, label, method, residual, error in rows(n, s):
        print(f"{name:<22} {'yes' if code.exact else 'no':<5} {code.load:>5.2f} {label:<12} {method:<18} "
              f"{residual:>10.2e} {error:>10.2e}")
    print("\nexact codes decode to round-off up to s stragglers; beyond that, and for approximate codes, the optimal "
          "decoder reports how far it is from the full gradient. 'fallback': an exact code given a set it cannot "
          "decode exactly used least-squares weights (in a run, a DecodeFallbackWarning says so).")
