"""Straggler-mitigation schemes behind one interface (:class:`gradcode.schemes._base.Scheme`).

One file per family: ``uncoded`` (sync, fastest-k, backup workers), ``adaptive`` (adaptive k, adaptive k and load),
``coded`` (any gradient code), ``dropcompute``. :func:`make_scheme` maps names to constructors.
"""

from __future__ import annotations

from .._params import check_params
from ..errors import ConfigError
from ._base import Combined, Plan, Scheme
from .adaptive import AdaptiveK, AdaptiveKLoad
from .coded import Coded
from .dropcompute import DropCompute
from .uncoded import Backup, FastestK, Sync

_REGISTRY: dict[str, type[Scheme]] = {
    cls.name: cls for cls in (Sync, FastestK, Backup, AdaptiveK, AdaptiveKLoad, Coded, DropCompute)
}


def list_schemes() -> dict[str, str]:
    """Names of the schemes with a one-line description of each."""
    return {name: cls.description for name, cls in _REGISTRY.items()}


def make_scheme(name, n: int, **params) -> Scheme:
    """Build the scheme registered as ``name`` for ``n`` workers (a :class:`Scheme` is returned as is)."""
    if isinstance(name, Scheme):
        if name.n != n:
            raise ConfigError(f"scheme {name.name} was built for n = {name.n} workers, the cluster has n = {n}")
        return name
    if name not in _REGISTRY:
        raise ConfigError(f"unknown scheme {name!r}; accepted: {', '.join(_REGISTRY)}")
    cls = _REGISTRY[name]
    # a coded scheme passes extra parameters on to its code, which checks them
    check_params(cls, params, f"scheme {name!r}", allow_unknown=cls is Coded)
    return cls(n, **params)


__all__ = ["Combined", "Plan", "Scheme", "list_schemes", "make_scheme"]
