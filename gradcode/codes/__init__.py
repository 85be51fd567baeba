"""Gradient codes: encoders and their decoders behind one API (:class:`gradcode.codes._base._Code`).

    >>> import gradcode
    >>> code = gradcode.make_code("cyclic_mds", n=10, s=3, seed=0)
    >>> partials = [[float(j)] for j in range(code.k)]
    >>> messages = code.encode(partials)
    >>> responders = [0, 2, 3, 5, 6, 8, 9]            # workers 1, 4, 7 straggle
    >>> round(float(code.combine(messages[responders], responders)[0]), 6)
    45.0

The registry maps each name to ``module:Class``; modules are imported on first use, so that ``import gradcode``
stays fast (the finite-field code pulls in galois and numba only when it is built).
"""

from __future__ import annotations

import importlib

from .._params import check_params
from ..errors import ConfigError
from ._base import METHODS, Decoding, _Code

# name -> (module, class, one-line description)
_REGISTRY: dict[str, tuple[str, str, str]] = {
    "uncoded": ("repetition", "Uncoded", "identity, s = 0: every worker one partition, wait for all (exact)"),
    "fractional_repetition": ("repetition", "FractionalRepetition",
                              "groups of s + 1 workers share s + 1 partitions; decode without algebra (exact)"),
    "cyclic_repetition": ("repetition", "CyclicRepetition",
                          "cyclic windows of s + 1 partitions, seeded random H; least-squares decode (exact)"),
    "cyclic_mds": ("mds", "CyclicMDS",
                   "cyclic MDS code from g(x); real if n - s is odd, else complex: 2x message size (exact)"),
    "reed_solomon": ("reed_solomon", "ReedSolomon",
                     "balanced mask, unit-circle nodes, O((n-s)^2) Lagrange decoding at zero (exact)"),
    "reed_solomon_gf": ("finite_field", "ReedSolomonGF",
                        "fixed-point gradients, MDS code over GF(p) via galois: exact to the bit (exact)"),
    "expander": ("approximate", "Expander",
                 "B = A(G)/d for a random d-regular graph, d = s + 1; optimal or one-step decode (approximate)"),
    "graph": ("approximate", "GraphCode",
              "workers are edges of a random (s+1)-regular graph on the partitions; O(n + m) optimal decoder "
              "(approximate)"),
    "bernoulli": ("approximate", "Bernoulli",
                  "each worker takes each partition with probability (s+1)/k (approximate)"),
    "stochastic": ("approximate", "Stochastic",
                   "each partition on s + 1 random workers, scaled 1/((s+1)(1-p)): unbiased (approximate)"),
    "erasurehead": ("approximate", "ErasureHead",
                    "fractional repetition, stop early and sum one message per covered group (approximate)"),
}


def list_codes() -> dict[str, str]:
    """Names of the codes with a one-line description of each."""
    return {name: entry[2] for name, entry in _REGISTRY.items()}


def code_class(name: str) -> type[_Code]:
    """The class registered under ``name``."""
    if name not in _REGISTRY:
        raise ConfigError(f"unknown code {name!r}; accepted: {', '.join(_REGISTRY)}")
    module, cls, _ = _REGISTRY[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def make_code(name: str, n: int, s: int = 0, **params) -> _Code:
    """Build the code registered as ``name`` for ``n`` workers tolerating ``s`` stragglers.

    Extra ``params`` (``seed``, ``tol``, and code-specific ones) go to the code's constructor.
    """
    if isinstance(name, _Code):
        return name
    cls = code_class(name)
    check_params(cls, params, f"code {name!r}")
    return cls(n, s, **params)


__all__ = ["METHODS", "Decoding", "code_class", "list_codes", "make_code"]
