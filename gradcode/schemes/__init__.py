"""Straggler-mitigation schemes behind one interface (:class:`gradcode.schemes._base.Scheme`).

One file per family: ``uncoded`` (sync, fastest-k, backup workers), ``adaptive`` (adaptive k, adaptive k and load),
``coded`` (any gradient code), ``dropcompute``, ``anytime``. :func:`make_scheme` builds one by name
(:data:`gradcode.plumbing.registry.SCHEMES`).
"""

from __future__ import annotations

from ..errors import ConfigError
from ..plumbing.registry import SCHEMES
from ._base import Combined, Plan, Scheme


def list_schemes() -> dict[str, str]:
    """Names of the schemes with a one-line description of each."""
    return SCHEMES.list()


def make_scheme(name, n: int, **params) -> Scheme:
    """Build the scheme ``name`` (a name, an import path or a ``{"name": ..., **params}`` dict) for ``n`` workers; a
    built :class:`Scheme` is returned as is."""
    if isinstance(name, Scheme):
        if name.n != n:
            raise ConfigError(f"scheme {name.name} was built for n = {name.n} workers, the cluster has n = {n}")
        return name
    name, params = SCHEMES.split(name, params)
    cls = SCHEMES.get(name)
    SCHEMES.check(cls, params, name, allow_unknown=cls.forwards_params)
    return cls(n, **params)


__all__ = ["Combined", "Plan", "Scheme", "list_schemes", "make_scheme"]
