"""Models built from other models: persistent stragglers, mixtures, unresponsive workers.

They share one delegation mechanism, :class:`Wrapper`: a wrapper names its ``components`` (weighted inner models)
and the i.i.d. view (``cdf``, ``sf``, ``mean``, support, tail, breakpoints, atoms) is derived from their mixture
``F(x) = sum_j w_j F_j(x)``; sampling draws the first component and lets ``_adjust`` change the draws per worker.
A new wrapper is a constructor and one or two short methods. See ``docs/references.md#delay-models``.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, check_float, check_int
from ._base import DelayModel
from ._comm import expect_over
from ._crn import STREAM_MIXTURE, STREAM_PERSISTENT, check_seed, per_worker_uniforms, uniforms


class Wrapper(DelayModel):
    """Base of the models that wrap others.

    ``components`` are ``(weight, model)`` pairs (weights summing to 1): the unit time of one worker in the i.i.d.
    view is their mixture, and every hook of that view is derived from them here (zero weights are kept where
    they cannot matter, so that a slowed copy still offers its breakpoints to the quadrature). Sampling draws the
    first component's model and passes the draws to :meth:`_adjust`; a wrapper that samples differently overrides
    ``_unit``/``_micro``. Communication is ``comm``/``comm_dist`` if given (drawn here), else the inner models'
    (which must then agree, and the first component draws it: a wrapped ``straggle`` keeps its added time).
    """

    _per_component_comm: ClassVar[bool] = False   # a mixture lets each component keep its own communication

    def __init__(self, components: list[tuple[float, DelayModel]], *, comm: float | None,
                 comm_dist: str | dict | None):
        inner = [m for _, m in components]
        self._own_comm = comm is not None or comm_dist is not None
        self._mixed_comm = not self._own_comm and len({m._comm_key() for m in inner}) > 1
        if self._mixed_comm and self._per_component_comm:
            super().__init__()   # each component keeps its own; the i.i.d. view mixes the total times
        else:
            c, d = _inherit_comm(inner, comm, comm_dist, self.name)
            super().__init__(comm=c, comm_dist=d)
            self._mixed_comm = False
            if not self._own_comm:
                self._cd = inner[0]._cd   # the wrapped model's term (a straggler's added time included)
        self.components = components

    def _comm_key(self):
        if self._own_comm:
            return super()._comm_key()
        return ("mixed", id(self)) if self._mixed_comm else self.components[0][1]._comm_key()

    def _comm(self, seed, t_arr, n, path=()):
        if self._own_comm:
            return super()._comm(seed, t_arr, n, path)
        return self.components[0][1]._comm(seed, t_arr, n, path)

    def _wrapped(self):
        models = [m for _, m in self.components]
        base = getattr(self, "base", None)
        return models + ([base] if isinstance(base, DelayModel) and base not in models else [])

    # --- sampling -------------------------------------------------------------------------------------------
    def _adjust(self, times: np.ndarray, seed: int, n: int, path: tuple) -> np.ndarray:
        """Per-worker change of the first component's draws ``times`` (``(T, n)`` or ``(T, n, M)``: axis 1 is
        the worker), in place."""
        return times

    def _unit(self, seed, t_arr, n, path):
        return self._adjust(self.components[0][1]._unit(seed, t_arr, n, path), seed, n, path)

    def _micro(self, seed, t_arr, n, M, path):
        return self._adjust(self.components[0][1]._micro(seed, t_arr, n, M, path), seed, n, path)

    # --- i.i.d. view: the mixture of the components ---------------------------------------------------------
    def _unit_cdf(self, x):
        return sum(w * m._unit_cdf(x) for w, m in self.components)

    def _unit_sf(self, x):
        return sum(w * m._unit_sf(x) for w, m in self.components)

    def _unit_mean(self):
        return float(sum(w * m._unit_mean() for w, m in self.components if w > 0))   # 0 * inf is no mean

    def _lower(self):
        return min(m._lower() for _, m in self.components)

    def _tail(self):
        return min(m._tail() for _, m in self.components)

    def _breakpoints(self):
        return sorted({b for _, m in self.components for b in m._breakpoints()})

    @property
    def _discrete(self):
        return all(m._discrete for w, m in self.components if w > 0)

    def _atoms(self):
        parts = [m._unit_atoms() for _, m in self.components]
        return (np.concatenate([v for v, _ in parts]),
                np.concatenate([w * pw for (w, _), (_, pw) in zip(self.components, parts, strict=True)]))


class PersistentDelay(Wrapper):
    """Persistent stragglers: a fixed set of workers is ``slowdown`` times slower every iteration.

    Wraps ``base``. Worker ``i`` is slow with probability ``frac`` (default 0.1), decided by a uniform keyed
    by ``(seed, i)`` only, never ``t``; or the slow set is the explicit ``workers`` list. Each slow worker's
    factor is ``slowdown`` (a number) or drawn uniformly in ``[lo, hi]`` per worker (default ``[1.2, 3]``,
    what production jobs show [paper: 2505.05713]). Unit time: ``U_{t,i} = s_i * U0_{t,i}`` with ``U0`` the
    base model's draw.

    i.i.d. view (``cdf``, ``mean``, ``expected_order_statistic``): with ``frac``, ``F(x) = (1 - frac) F0(x) +
    frac * E_s[F0(x/s)]``. Averaged over seeds this is exact (workers are then independent and identically
    distributed); for one fixed seed the slow set is fixed, so it is an approximation. With explicit
    ``workers``, ``expected_order_statistic`` is exact for the given ``n`` (two groups of i.i.d. workers) and
    ``cdf``/``mean`` describe an unlisted (normal) worker. [derived]

    >>> from gradcode.delays import make_delay
    >>> d = make_delay({"name": "persistent", "base": "constant", "workers": [1], "slowdown": 2.0})
    >>> d.sample(0, [0, 1], 3)[0]
    array([[1., 2., 1.],
           [1., 2., 1.]])
    """

    name = "persistent"
    description = "wraps base: a fixed subset of workers is slowdown times slower every iteration"
    source = "[paper: 2505.05713]"

    def __init__(self, base="shifted_exponential", frac: float | None = None, slowdown=(1.2, 3.0),
                 workers=None, *, comm: float | None = None, comm_dist: str | None = None):
        self.base = _nested("base", base)
        if workers is not None and frac is not None:
            raise ConfigError("persistent: give either frac (random slow set) or workers (explicit list), "
                              "not both")
        self.lo, self.hi = _check_slowdown(slowdown)
        self._slow = _Slowed(self.base, self.lo, self.hi)
        if workers is not None:   # the i.i.d. view is an unlisted worker's
            self.workers, self.frac = _check_workers("workers", workers), None
            iid = [(1.0, self.base)]
        else:
            self.workers, self.frac = None, check_float("frac", 0.1 if frac is None else frac, low=0.0, high=1.0)
            iid = [(1 - self.frac, self.base), (self.frac, self._slow)]
        super().__init__(iid, comm=comm, comm_dist=comm_dist)
        self._params = {"base": self.base, "frac": self.frac,
                        "slowdown": self.lo if self.lo == self.hi else [self.lo, self.hi],
                        "workers": None if self.workers is None else list(self.workers)}

    def check_workers(self, n):
        if self.workers is not None:
            _check_listed(self.name, self.workers, n)
        super().check_workers(n)

    def factors(self, seed: int, n: int) -> np.ndarray:
        """The slowdown factor of each of the ``n`` workers (1 for normal workers) under ``seed``."""
        return self._factors(check_seed(seed), check_int("n", n, low=1), ())

    def _factors(self, seed: int, n: int, path: tuple) -> np.ndarray:
        u = per_worker_uniforms(seed, STREAM_PERSISTENT, path, n, 2)
        if self.workers is None:
            slow = u[:, 0] < self.frac
        else:
            slow = np.zeros(n, dtype=bool)
            slow[[w for w in self.workers if w < n]] = True
        return np.where(slow, self.lo + (self.hi - self.lo) * u[:, 1], 1.0)

    def _adjust(self, times, seed, n, path):
        times *= self._factors(seed, n, path).reshape((1, n) + (1,) * (times.ndim - 2))
        return times

    def _groups(self, n):
        if self.workers is None:
            return [(n, self)]
        d = sum(1 for w in self.workers if w < n)
        return [(n - d, self.base._with_cd(self._cd, self.comm, self.comm_dist)),
                (d, self._slow._with_cd(self._cd, self.comm, self.comm_dist))]


class _Slowed(DelayModel):
    """A slow worker's unit time ``s * U0``: ``U0`` from ``base``, ``s`` uniform on ``[lo, hi]`` (``lo`` if
    ``lo == hi``)."""

    _NODES = 8  # slowdown grid of the quantile atoms for a [lo, hi] range

    def __init__(self, base: DelayModel, lo: float, hi: float):
        super().__init__(comm=base.comm, comm_dist=base.comm_dist)
        self._cd = base._cd
        self.base, self.lo, self.hi = base, lo, hi

    def _comm_key(self):
        return self.base._comm_key()

    def _wrapped(self):
        return [self.base]

    def _unit_cdf(self, x):
        if self.lo == self.hi:
            return self.base._unit_cdf(x / self.lo)
        # s ~ U[lo, hi]: E_s[1{s v <= x}] = clip((x/v - lo)/(hi - lo), 0, 1), averaged over the base's atoms v
        def frac(y, v):
            inside = np.clip((y / v - self.lo) / (self.hi - self.lo), 0.0, 1.0)
            return np.where(v > 0, inside, (y >= 0).astype(float))

        return expect_over(frac, x, *self.base._unit_atoms())

    def _unit_sf(self, x):
        return self.base._unit_sf(x / self.lo) if self.lo == self.hi else 1.0 - self._unit_cdf(x)

    def _unit_mean(self):
        return self.base._unit_mean() * 0.5 * (self.lo + self.hi)

    def _lower(self):
        return self.base._lower() * self.lo

    def _tail(self):
        return self.base._tail()

    def _breakpoints(self):
        b = self.base._breakpoints()
        return [x * self.lo for x in b] + [x * self.hi for x in b]

    @property
    def _discrete(self):
        return self.base._discrete and self.lo == self.hi

    def _atoms(self):
        v, w = self.base._unit_atoms()
        if self.lo == self.hi:
            return v * self.lo, w
        s = self.lo + (self.hi - self.lo) * (np.arange(self._NODES) + 0.5) / self._NODES
        return np.outer(s, v).ravel(), np.tile(w / self._NODES, self._NODES)


def _mixed(name: str, combine):
    """A hook of :class:`MixtureDelay` that, when its components keep their own communication, is ``combine`` of the
    components' own ``(weight, hook(*args))`` pairs, and otherwise the wrapper's."""
    def hook(self, *args, **kwargs):
        if not self._mixed_comm:
            return getattr(super(MixtureDelay, self), name)(*args, **kwargs)
        return combine([(w, getattr(m, name)(*args, **kwargs)) for w, m in self.components])

    hook.__name__, hook.__qualname__, hook.__doc__ = name, f"MixtureDelay.{name}", getattr(DelayModel, name).__doc__
    return hook


class MixtureDelay(Wrapper):
    """Per iteration and worker, a component chosen at random: ``P(component j) = weight_j / sum(weights)``.

    ``components`` is a list of ``{"weight": w, "model": spec}`` (or ``(w, spec)`` pairs). The choice for
    ``(t, i)`` is a uniform of its own stream, and every component draws on its own path, so components are
    independent. A worker's micro-batches of one iteration all come from the same component.
    ``F(x) = sum_j w_j F_j(x)`` (exact i.i.d. view). [derived]

    >>> from gradcode.delays import make_delay
    >>> d = make_delay("mixture", components=[{"weight": 1, "model": "constant"},
    ...                                        {"weight": 1, "model": {"name": "constant", "value": 3.0}}])
    >>> round(d.mean(), 6)
    2.0
    """

    name = "mixture"
    description = "per (t, i) one of several models, chosen with the given weights"
    source = "[derived]"

    _per_component_comm = True

    def __init__(self, components=(), *, comm: float | None = None, comm_dist: str | None = None):
        weights, models = _check_components(components)
        self.weights = np.array(weights) / sum(weights)
        self.models = models
        super().__init__(list(zip(self.weights, models, strict=True)), comm=comm, comm_dist=comm_dist)
        self._cum = np.cumsum(self.weights)
        self._cum[-1] = 1.0
        self._params = {"components": [{"weight": float(w), "model": m.spec()}
                                       for w, m in zip(weights, models, strict=True)]}

    def _pick(self, seed, t_arr, n, path, draw, shape) -> np.ndarray:
        """Per ``(t, i)`` the chosen component's ``draw(model, path)`` (component ``j`` on ``path + (j+1,)``)."""
        choice = np.searchsorted(self._cum, uniforms(seed, t_arr, STREAM_MIXTURE, path, (n,)), side="right")
        out = np.empty(shape)
        for j, m in enumerate(self.models):
            mask = choice == j
            if mask.any():
                out[mask] = draw(m, path + (j + 1,))[mask]
        return out

    def _unit(self, seed, t_arr, n, path):
        return self._pick(seed, t_arr, n, path, lambda m, p: m._unit(seed, t_arr, n, p), (len(t_arr), n))

    def _micro(self, seed, t_arr, n, M, path):
        return self._pick(seed, t_arr, n, path, lambda m, p: m._micro(seed, t_arr, n, M, p), (len(t_arr), n, M))

    # --- components with their own communication: the chosen component's, and a mixture of total times -----
    def _comm(self, seed, t_arr, n, path=()):
        if not self._mixed_comm:
            return super()._comm(seed, t_arr, n, path)
        return self._pick(seed, t_arr, n, path, lambda m, p: m._comm(seed, t_arr, n, p), (len(t_arr), n))

    def _comm_constant(self):
        return not self._mixed_comm and super()._comm_constant()

    def spec(self):
        out = super().spec()
        if self._mixed_comm:   # each component's own: a comm here would replace them all
            del out["comm"], out["comm_dist"]
        return out

    # with components of their own communication, the total time is the components' mixture: each hook below
    # combines the components' own (weights > 0: checked)
    _total_cdf = _mixed("_total_cdf", lambda parts: sum(w * v for w, v in parts))
    _total_sf = _mixed("_total_sf", lambda parts: sum(w * v for w, v in parts))
    mean = _mixed("mean", lambda parts: float(sum(w * v for w, v in parts)))
    _total_lower = _mixed("_total_lower", lambda parts: min(v for _, v in parts))
    _total_breakpoints = _mixed("_total_breakpoints", lambda parts: sorted({b for _, v in parts for b in v}))
    _total_tail = _mixed("_total_tail", lambda parts: min(v for _, v in parts))
    _total_discrete = _mixed("_total_discrete", lambda parts: all(v for _, v in parts))
    _total_atoms = _mixed("_total_atoms", lambda parts: (np.concatenate([v for _, (v, _) in parts]),
                                                         np.concatenate([w * pw for w, (_, pw) in parts])))


class UnresponsiveDelay(Wrapper):
    """Wraps ``base``; the listed ``workers`` never answer: their compute is ``inf`` (for fault tests).
    [derived]

    ``cdf`` and ``mean`` describe a responsive worker. ``E[T_(k:n)]`` with ``d`` listed workers below ``n`` is
    the base's ``E[T_(k:n-d)]``, and ``inf`` when ``k > n - d``.

    >>> from gradcode.delays import make_delay
    >>> make_delay("unresponsive", base="constant", workers=[0]).sample(0, 0, 2)[0]
    array([[inf,  1.]])
    """

    name = "unresponsive"
    description = "wraps base: the listed workers never answer (compute = inf)"
    source = "[derived]"

    def __init__(self, base="shifted_exponential", workers=(), *, comm: float | None = None,
                 comm_dist: str | None = None):
        self.base = _nested("base", base)
        super().__init__([(1.0, self.base)], comm=comm, comm_dist=comm_dist)
        self.workers = _check_workers("workers", workers)
        self._params = {"base": self.base, "workers": list(self.workers)}

    def check_workers(self, n):
        _check_listed(self.name, self.workers, n)
        super().check_workers(n)

    def _dead(self, n):
        return [w for w in self.workers if w < n]

    def _adjust(self, times, seed, n, path):
        times[:, self._dead(n)] = math.inf
        return times

    def _eos(self, k, n, load, method):
        live = n - len(self._dead(n))
        if k > live:
            return math.inf
        return self.base._with_cd(self._cd, self.comm, self.comm_dist)._eos(k, live, load, method)


# ------------------------------------------------------------------------------------------------------------
# parameter checks of the wrappers
# ------------------------------------------------------------------------------------------------------------
def _inherit_comm(inner: list[DelayModel], comm, comm_dist, what: str) -> tuple[float, str]:
    """A wrapper's communication: given, or else the wrapped models' (which must then agree)."""
    if comm is not None and comm_dist is not None:
        return comm, comm_dist
    if len({m._comm_key() for m in inner}) > 1:
        pairs = sorted({(m.comm, str(m.comm_dist)) for m in inner})
        raise ConfigError(f"{what}: the wrapped models have different communication {pairs}; give both comm "
                          f"and comm_dist on the {what} itself (they replace the wrapped models')")
    c, d = inner[0].comm, inner[0].comm_dist
    return (c if comm is None else comm), (d if comm_dist is None else comm_dist)


def _nested(what: str, spec) -> DelayModel:
    if isinstance(spec, (DelayModel, dict, str)):
        from ..plumbing.registry import DELAYS

        return DELAYS.build(spec)
    raise ConfigError(f"{what} must be a delay model, a name or a {{\"name\": ..., **params}} dict, "
                      f"got {spec!r}")


def _check_workers(what: str, workers) -> tuple[int, ...]:
    if isinstance(workers, (str, bytes, dict)) or not hasattr(workers, "__iter__"):
        raise ConfigError(f"{what} must be a list of worker indices (ints >= 0), got {workers!r}")
    return tuple(sorted({check_int(what, w, low=0) for w in workers}))


def _check_listed(what: str, workers: tuple[int, ...], n: int) -> None:
    """Every listed worker exists among the ``n`` of the cluster (else its fault would silently not happen)."""
    beyond = [w for w in workers if w >= n]
    if beyond:
        raise ConfigError(f"{what}: workers = {list(workers)} lists worker{'s' if len(beyond) > 1 else ''} "
                          f"{', '.join(map(str, beyond))}, but the cluster has n = {n} workers (0..{n - 1}); "
                          "list only workers of this cluster")


def _check_slowdown(slowdown) -> tuple[float, float]:
    if isinstance(slowdown, (list, tuple, np.ndarray)):
        if len(slowdown) != 2:
            raise ConfigError(f"slowdown must be a number >= 1 or a [lo, hi] range, got {slowdown!r}")
        lo = check_float("slowdown (lo)", slowdown[0], low=1.0)
        hi = check_float("slowdown (hi)", slowdown[1], low=1.0)
        if hi < lo:
            raise ConfigError(f"slowdown range [lo, hi] must have lo <= hi, got {slowdown!r}")
        return lo, hi
    s = check_float("slowdown", slowdown, low=1.0)
    return s, s


def _check_components(components) -> tuple[list[float], list[DelayModel]]:
    """A mixture's ``[{"weight": w, "model": spec}, ...]`` (or ``(w, spec)`` pairs) as weights and models."""
    if not isinstance(components, (list, tuple)) or not components:
        raise ConfigError("components must be a non-empty list of {\"weight\": w, \"model\": spec}")
    weights, models = [], []
    for j, comp in enumerate(components):
        if isinstance(comp, dict):
            unknown = set(comp) - {"weight", "model"}
            if unknown or "model" not in comp or "weight" not in comp:
                raise ConfigError(f"components[{j}] must have exactly the keys weight and model, got "
                                  f"{sorted(comp)}")
            w, m = comp["weight"], comp["model"]
        elif isinstance(comp, (list, tuple)) and len(comp) == 2:
            w, m = comp
        else:
            raise ConfigError(f"components[{j}] must be {{\"weight\": w, \"model\": spec}}, got {comp!r}")
        weights.append(check_float(f"components[{j}].weight", w, low=0.0, low_open=True))
        models.append(_nested(f"components[{j}].model", m))
    return weights, models
