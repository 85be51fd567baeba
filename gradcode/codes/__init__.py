"""Gradient codes: encoders and their decoders behind one API (:class:`gradcode.codes._base.Code`).

    >>> import gradcode
    >>> code = gradcode.make_code("cyclic_mds", n=10, s=3, seed=0)
    >>> partials = [[float(j)] for j in range(code.n_parts)]
    >>> messages = code.encode(partials)
    >>> responders = [0, 2, 3, 5, 6, 8, 9]            # workers 1, 4, 7 straggle
    >>> round(float(code.combine(messages[responders], responders)[0]), 6)
    45.0

Modules group the codes by construction: :mod:`~gradcode.codes.repetition` (uncoded, fractional repetition,
ErasureHead), :mod:`~gradcode.codes.cyclic` (the cyclic-support base, cyclic repetition, cyclic MDS),
:mod:`~gradcode.codes.reed_solomon` and :mod:`~gradcode.codes.finite_field` (Reed-Solomon over the complex numbers and
over GF(p), both by :mod:`~gradcode.codes.lagrange` interpolation), :mod:`~gradcode.codes.graph` (the graph code and
its peeling decoder) and :mod:`~gradcode.codes.random_codes` (expander, Bernoulli, stochastic).

Names map to classes in :data:`gradcode.plumbing.registry.CODES` (``docs/design.md#registry``); modules are imported on
first use, so that ``import gradcode`` stays fast (the finite-field code pulls in galois and numba only when it is
built).
"""

from __future__ import annotations

from ..plumbing.registry import CODES
from ._base import METHODS, Code, Decoding


def list_codes() -> dict[str, str]:
    """Names of the codes with a one-line description of each."""
    return CODES.list()


def code_class(name: str) -> type[Code]:
    """The class registered under ``name`` (or named by ``"package.module:ClassName"``)."""
    return CODES.get(name)


def make_code(name, n: int, s: int = 0, **params) -> Code:
    """Build the code ``name`` (a name, an import path or a ``{"name": ..., **params}`` dict) for ``n`` workers
    tolerating ``s`` stragglers; a built :class:`Code` is returned as is.

    Extra ``params`` (``seed``, ``tol``, and code-specific ones) go to the code's constructor.
    """
    if isinstance(name, Code):
        return name
    return CODES.build(name, n, s, **params)


__all__ = ["METHODS", "Code", "Decoding", "code_class", "list_codes", "make_code"]
