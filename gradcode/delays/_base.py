"""The base class of every delay model: ``T_i = load_i * U_{t,i} + C_i``, a unit compute time scaled by the load
plus communication.

A subclass says what its unit time ``U`` is, the way a ``scipy.stats`` distribution does: an inverse CDF for
sampling (``_ppf``, applied to the common uniforms of :mod:`._crn`), and for the i.i.d. view a frozen
``scipy.stats`` distribution (``_scipy``) from which ``cdf``/``sf``/``mean``/support follow, or those one-liners
itself. Everything else is shared and lives here: scaling by the load, communication (constant or exponential,
mean ``comm``), the CDF of the total time, the mean, and ``E[T_(k:n)]`` (a model's closed form if it has one,
else :mod:`.order_stats`). See ``docs/references.md#delay-models``.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import warnings
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, check_int
from . import order_stats
from ._comm import Term, expect_over, make_comm
from ._crn import (
    STREAM_COMM,
    STREAM_COMPUTE,
    STREAM_MICRO,
    check_load,
    check_scalar_load,
    check_seed,
    check_t,
    uniforms,
)

_GRID = 2048  # quantile-grid size of a continuous unit time (for the exponential-communication convolution)
_FEW_ATOMS = 64      # a discrete communication term with at most this many values is summed over exactly


# E[T_(k:n)] of every model built in this process, keyed by its spec: (spec, k, n, load, method) -> value
_EOS_SHARED: dict[tuple, float] = {}
EOS_SHARED_SIZE = 65536


class DelayModel:
    """Base class of every delay model; the shared algorithm lives here.

    A subclass defines its unit compute time by ``_ppf(u)`` (inverse CDF applied to uniforms, the sampling fast
    path) and ``_scipy(stats)`` (the same distribution frozen from ``scipy.stats``, for ``cdf``/``sf``/``mean``
    and the lower end), overriding the one-line hooks ``_unit_cdf``/``_unit_sf``/``_unit_mean``/``_lower`` where
    a closed form is more exact or there is no scipy distribution; ``_tail``, ``_breakpoints`` and ``_atoms`` help
    the integrator. Models that are not i.i.d. (trace replay, the wrappers of :mod:`.wrappers`) override
    ``_unit``/``_micro`` instead of ``_ppf``. Communication (``comm`` mean, ``comm_dist`` any load-independent
    shape, :mod:`._comm`) is handled here for every model.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    source: ClassVar[str] = ""
    injects: ClassVar[bool] = True    # False: natural timing (``none``), MPI workers wait out nothing

    def __init__(self, *, comm: float = 0.0, comm_dist: str | dict = "constant"):
        self._cd: Term = make_comm(comm, comm_dist)   # the communication term (see ._comm)
        self.comm = float(comm)
        self.comm_dist = comm_dist if isinstance(comm_dist, str) else dict(comm_dist)
        self._params: dict = {}

    # --- the unit time: hooks for subclasses ------------------------------------------------------------------
    def _ppf(self, u: np.ndarray) -> np.ndarray:
        """Unit compute times from uniforms (may overwrite ``u``)."""
        raise NotImplementedError

    @property
    def parametric(self) -> bool:
        """Whether the unit time has an inverse CDF (``_ppf``): what a communication term or ``extra`` can be."""
        return type(self)._ppf is not DelayModel._ppf

    def _scipy(self, stats):
        """The unit time as a frozen ``scipy.stats`` distribution (``stats`` is the module), or None."""
        return None

    @functools.cached_property
    def _dist(self):
        import scipy.stats  # imported here: slow to import, on every MPI rank

        return self._scipy(scipy.stats)

    def _unit_cdf(self, x: np.ndarray) -> np.ndarray:
        return self._dist.cdf(x)

    def _unit_sf(self, x: np.ndarray) -> np.ndarray:
        """``P(U > x)``, computed directly where possible (``1 - cdf`` loses the right tail)."""
        return 1.0 - self._unit_cdf(x) if self._dist is None else self._dist.sf(x)

    def _unit_mean(self) -> float:
        return float(self._dist.mean())

    def _lower(self) -> float:
        """Lower end of the unit-time support."""
        return 0.0 if self._dist is None else float(self._dist.support()[0])

    def _tail(self) -> float:
        """Power-law tail index of the unit time (``P(U > x) ~ x^-tail``); ``inf`` for lighter tails."""
        return math.inf

    def _breakpoints(self) -> list[float]:
        """Unit times where the CDF jumps or has a kink (help for the quadrature)."""
        return [self._lower()]

    _discrete: bool = False   # True if ``_atoms`` is the exact (finite) distribution (a property in wrappers)

    def _atoms(self) -> tuple[np.ndarray, np.ndarray]:
        """``(values, weights)`` of the unit time: exact for discrete models, else the midpoint quantiles
        ``ppf((j + 1/2)/G)`` with weights ``1/G`` (``G = _GRID`` points)."""
        u = (np.arange(_GRID) + 0.5) / _GRID
        return np.asarray(self._ppf(u), dtype=float), np.full(_GRID, 1.0 / _GRID)

    def _unit_atoms(self) -> tuple[np.ndarray, np.ndarray]:
        """``_atoms()``, cached on the model."""
        cached = self.__dict__.get("_atoms_cache")
        if cached is None:
            cached = self.__dict__["_atoms_cache"] = self._atoms()
        return cached

    def _unit(self, seed: int, t_arr: np.ndarray, n: int, path: tuple) -> np.ndarray:
        """Unit compute times ``(T, n)``."""
        return self._ppf(uniforms(seed, t_arr, STREAM_COMPUTE, path, (n,)))

    def _micro(self, seed: int, t_arr: np.ndarray, n: int, M: int, path: tuple) -> np.ndarray:
        """Per-micro-batch compute times ``(T, n, M)``."""
        return self._ppf(uniforms(seed, t_arr, STREAM_MICRO, path, (n, M)))

    # --- the cluster it is used on -----------------------------------------------------------------------------
    def check_workers(self, n: int) -> None:
        """Raise :class:`ConfigError` if the model names a worker that a cluster of ``n`` workers does not have
        (``unresponsive`` or ``persistent`` with ``workers = [99]`` at ``n = 6``): its fault would silently never
        happen. A cluster calls this once it knows ``n``; :meth:`sample` itself stays prefix-stable in ``n``."""
        n = check_int("n", n, low=1)
        for model in self._wrapped():
            model.check_workers(n)

    def _wrapped(self) -> list[DelayModel]:
        """The models this one is built from (none here; wrappers name theirs)."""
        return []

    # --- sampling -------------------------------------------------------------------------------------------
    def _comm(self, seed: int, t_arr: np.ndarray, n: int, path: tuple = ()) -> np.ndarray:
        """Load-independent times ``(T, n)``: the communication (a wrapper may add to it)."""
        return self._draw_comm(self._cd, seed, t_arr, n, path)

    @staticmethod
    def _draw_comm(term: Term, seed: int, t_arr: np.ndarray, n: int, path: tuple) -> np.ndarray:
        """Draws ``(T, n)`` of a communication term from the comm stream."""
        if term.constant:
            return np.full((len(t_arr), n), term.value)
        return term.ppf(uniforms(seed, t_arr, STREAM_COMM, path, (n,)))

    def sample(self, seed: int, t, n: int, load=1.0) -> tuple[np.ndarray, np.ndarray]:
        """Compute and communication times, each ``(T, n)``, of workers ``0..n-1`` at iterations ``t``.

        ``t`` is an int (``T = 1``) or a 1-D array of iteration numbers; ``load`` a scalar, an ``(n,)`` or a
        ``(T, n)`` array of units of work (compute = ``load * unit time``; load 0 takes 0, except a worker
        that never answers, whose compute stays ``inf``).
        """
        seed = check_seed(seed)
        t_arr = check_t(t)
        n = check_int("n", n, low=1)
        load_arr = check_load(load, len(t_arr), n)
        compute = self._unit(seed, t_arr, n, ())  # a fresh array: scaled in place
        if not (load_arr.ndim == 2 and load_arr.strides == (0, 0) and load_arr[0, 0] == 1.0):
            with np.errstate(invalid="ignore"):
                compute *= load_arr
            if not np.all(load_arr[0] if load_arr.strides[0] == 0 else load_arr):
                compute[np.isnan(compute)] = math.inf  # inf * 0: a dead worker stays dead
        return compute, self._comm(seed, t_arr, n)

    def sample_micro(self, seed: int, t, n: int, M: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-micro-batch compute times ``(T, n, M)`` (one unit of work each) and communication ``(T, n)``.

        The communication is the same as :meth:`sample`'s. Micro-batch draws use their own stream, so the sum
        of a worker's ``M`` micro-batches is *not* ``sample(load=M)`` (which scales a single draw).
        """
        seed = check_seed(seed)
        t_arr = check_t(t)
        n = check_int("n", n, low=1)
        M = check_int("M", M, low=1)
        return self._micro(seed, t_arr, n, M, ()), self._comm(seed, t_arr, n)

    # --- one worker's distribution (i.i.d. view) ------------------------------------------------------------
    def _comm_constant(self) -> bool:
        return self._cd.constant

    def _few_comm_atoms(self) -> bool:
        """A discrete communication term with few values (a constant that a straggler's constant ``extra`` is added
        to with probability ``p``): the CDF is then an exact, short sum over its atoms (:meth:`_total`)."""
        return self._cd.discrete and len(self._cd.atoms()[0]) <= _FEW_ATOMS

    def _total(self, x, load: float, unit, term, step) -> np.ndarray:
        """The CDF of ``load * U + C`` (``load`` a checked scalar) from ``unit``, ``term`` and ``step``, the CDFs of
        ``U``, ``C`` and of 0; or its survival function, given theirs.

        A constant ``C = c`` shifts: ``unit((x - c) / load)``. A ``C`` of few atoms ``(c_j, w_j)`` is summed over
        exactly, ``sum_j w_j unit((x - c_j) / load)`` (closed form: an order statistic with a continuous ``U`` and a
        straggler's added time took seconds over ``U``'s quantiles, and adaptive_k_load plans with dozens). Any other
        ``C`` (independent of ``U``) is convolved over the atoms of ``U``, ``E_U[term(x - load U)]``: exact for a
        discrete ``U``, within ``1/2048`` in the CDF over the 2048 midpoint quantiles of a continuous one (in practice
        far less).
        """
        x = np.asarray(x, dtype=float)
        if self._comm_constant():
            y = x - self._cd.value
            if load == 0:
                return step(y).astype(float)
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.clip(unit(y / load), 0.0, 1.0)
        if load == 0:
            return term(x)
        if self._few_comm_atoms():
            return expect_over(lambda y, c: unit((y - c) / load), x, *self._cd.atoms())
        v, w = self._unit_atoms()
        return expect_over(lambda y, u: term(y - u), x, load * v, w)

    def _total_cdf(self, x: np.ndarray, load: float) -> np.ndarray:
        return self._total(x, load, self._unit_cdf, self._cd.cdf, lambda y: y >= 0)

    def _total_sf(self, x: np.ndarray, load: float) -> np.ndarray:
        """``P(load * U + C > x)``, computed directly (no ``1 - cdf`` cancellation in the right tail)."""
        return self._total(x, load, self._unit_sf, self._cd.sf, lambda y: y < 0)

    def cdf(self, x, load=1.0) -> np.ndarray:
        """CDF of one worker's total response time ``load * U + C`` at ``x`` (i.i.d. view)."""
        return self._total_cdf(np.asarray(x, dtype=float), check_scalar_load(load))

    def mean(self, load=1.0) -> float:
        """``E[load * U + C]`` (``inf`` if the unit time has no mean and ``load > 0``)."""
        load = check_scalar_load(load)
        return (load * self._unit_mean() if load > 0 else 0.0) + self._cd.mean

    def _total_lower(self, load: float) -> float:
        """Lower end of ``load * U + C``."""
        return (load * self._lower() if load > 0 else 0.0) + self._cd.lower()

    def _total_breakpoints(self, load: float) -> list[float]:
        """Where the CDF of ``load * U + C`` may jump or kink (help for the quadrature)."""
        unit = [load * b for b in self._breakpoints() if np.isfinite(b)] if load > 0 else [0.0]
        return sorted({u + c for u in unit[:100] for c in self._cd.breakpoints()[:50] if np.isfinite(c)})

    def _total_tail(self, load: float) -> float:
        """Power-law tail index of ``load * U + C``."""
        return min(self._tail() if load > 0 else math.inf, self._cd.tail())

    def _total_discrete(self, load: float) -> bool:
        return (self._discrete or load == 0) and self._cd.discrete

    def _total_atoms(self, load: float) -> tuple[np.ndarray, np.ndarray]:
        """``(values, weights)`` of ``load * U + C`` (exact when :meth:`_total_discrete`)."""
        v, w = self._unit_atoms() if load > 0 else (np.zeros(1), np.ones(1))
        cv, cw = self._cd.atoms()
        return (load * v[:, None] + cv[None, :]).ravel(), (w[:, None] * cw[None, :]).ravel()

    # --- order statistics -----------------------------------------------------------------------------------
    def expected_order_statistic(self, k: int, n: int, load=1.0, *, method: str = "auto") -> float:
        """``E[T_(k:n)]``, the mean of the ``k``-th fastest of ``n`` total times (``k = n``: the slowest).

        ``method``: ``"auto"`` (closed form if the model has one, else exact sum for discrete distributions,
        else numeric integration), ``"closed"`` (raise if none), ``"numeric"`` (always integrate
        ``integral_0^inf binom.cdf(k-1, n, F(t)) dt`` of this model's own CDF). Returns ``inf`` when the
        expectation diverges (heavy tail with ``tail * (n - k + 1) <= 1``).
        """
        n = check_int("n", n, low=1)
        k = check_int("k", k, low=1)
        if k > n:
            raise ConfigError(f"k must be <= n (the k-th fastest of n workers), got k = {k} > n = {n}")
        load = check_scalar_load(load)
        if method not in ("auto", "closed", "numeric"):
            raise ConfigError(f"method must be one of auto, closed, numeric, got {method!r}")
        # cached per model: adaptive schemes plan with the same (k, n, load) again and again, and a numeric
        # integration costs tens of milliseconds (a model is not changed after it is built); and per process, by
        # the model's spec: a sweep builds every cell twice (checked, then run), a new model each time
        cache = self.__dict__.setdefault("_eos_cache", {})
        key = (k, n, load, method)
        if key not in cache:
            shared = self._spec_key()
            shared = None if shared is None else (shared, *key)
            if shared is not None and shared in _EOS_SHARED:
                cache[key] = _EOS_SHARED[shared]
            else:
                cache[key] = self._eos(k, n, load, method)
                if shared is not None:
                    if len(_EOS_SHARED) >= EOS_SHARED_SIZE:
                        _EOS_SHARED.pop(next(iter(_EOS_SHARED)))      # the oldest first
                    _EOS_SHARED[shared] = cache[key]
        return cache[key]

    def _spec_key(self) -> str | None:
        """The model's spec as a string (the key of the process-wide cache), or None when the spec does not say
        everything: a model of a user's class (its code may change), or one whose spec is not plain JSON."""
        if not type(self).__module__.startswith("gradcode."):
            return None
        try:
            return json.dumps([self.spec(), self._sources()], sort_keys=True, allow_nan=True)
        except (TypeError, ValueError):
            return None

    def _sources(self) -> list:
        """What the model read besides its spec: the ``source_stamp`` (a trace file's path, size and modification
        time) of every model in its tree, wherever it sits (a wrapper's ``base``, a mixture's components, a
        heterogeneous model's slowed copies, a component of a component)."""
        out, seen, todo = [], set(), [self]
        while todo:
            obj = todo.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if isinstance(obj, DelayModel):
                stamp = obj.__dict__.get("source_stamp")
                if stamp is not None:
                    out.append(stamp)
                todo.extend(v for k, v in obj.__dict__.items() if not k.startswith("_eos"))
            elif isinstance(obj, (list, tuple)):
                todo.extend(obj)
            elif isinstance(obj, dict):
                todo.extend(obj.values())
        return sorted(out)

    def _eos(self, k: int, n: int, load: float, method: str) -> float:
        """:meth:`expected_order_statistic` of checked arguments."""
        if method != "numeric":
            closed = self._eos_closed(k, n, load) if self._comm_constant() else None
            if closed is not None:
                return closed
            if method == "closed":
                raise ConfigError(f"{self.name} has no closed form for E[T_(k:n)] with "
                                  f"comm_dist={self.comm_dist!r}; use method='auto' or 'numeric'")
        groups = [(c, g) for c, g in self._groups(n) if c > 0]
        tail = min(g._total_tail(load) for _, g in groups)
        if tail * (n - k + 1) <= 1:
            return math.inf
        if method == "auto" and all(g._total_discrete(load) for _, g in groups):
            return order_stats.exact_discrete(k, groups, load)
        total, err = order_stats.integrate(k, n, groups, load)
        if err > 1e-4 * abs(total):
            warnings.warn(f"{self.name}: E[T_({k}:{n})] = {total:.6g} by numeric integration is accurate "
                          f"only to about {err:.2g}", RuntimeWarning, stacklevel=3)
        return total

    def _eos_closed(self, k: int, n: int, load: float) -> float | None:
        """``E[T_(k:n)]`` in closed form (constant communication), or None if the model has none."""
        return None

    def _groups(self, n: int) -> list[tuple[int, DelayModel]]:
        """Workers ``0..n-1`` as groups ``(count, model)`` of i.i.d. workers, each with this model's comm."""
        return [(n, self)]

    def _with_cd(self, cd: Term, comm: float | None = None, comm_dist=None) -> DelayModel:
        """A shallow copy of this model whose load-independent term is ``cd`` (in the i.i.d. view)."""
        out = copy.copy(self)
        out.__dict__.pop("_eos_cache", None)   # the copy's order statistics differ
        out._cd = cd
        if comm is not None:
            out.comm, out.comm_dist = comm, comm_dist
        return out

    def _comm_key(self):
        """What identifies this model's load-independent term (wrappers compare their inner models' keys)."""
        return (self.comm, json.dumps(self.comm_dist, sort_keys=True))

    # --- misc -----------------------------------------------------------------------------------------------
    def spec(self) -> dict:
        """The ``{"name": ..., **params}`` dict that :func:`make_delay` rebuilds this model from."""
        out = {"name": self.name}
        for key, val in self._params.items():
            out[key] = val.spec() if isinstance(val, DelayModel) else val
        out["comm"] = self.comm
        out["comm_dist"] = self.comm_dist
        return out

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.spec().items() if k != "name")
        return f"{type(self).__name__}({inner})"
