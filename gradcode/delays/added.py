"""Straggling that does not scale with load, and workers of different speeds.

- :class:`StraggleDelay` (``straggle``): ``T_i = P_i(load) + C_i + E_i``: each iteration some workers (exactly
  ``count`` chosen at random, each independently with probability ``p``, or a fixed list ``workers``) get an added
  time ``E_i`` (``extra``: a number or a distribution) that does not grow with their load. This is the setting of
  the gradient-coding experiments (Tandon et al.: ``s`` workers delayed by a fixed time), where a code's extra load
  costs little and its tolerance of ``s`` stragglers saves the whole delay.
- :class:`HeterogeneousDelay` (``heterogeneous``): per-worker speed factors ``v_i`` on any model,
  ``P_i(load) = load * U_{t,i} / v_i`` (a list, or drawn once per run from a distribution).

Both wrap any ``base`` model (an inline table, as in a ``mixture``). Common random numbers: who straggles and the
added times come from their own streams keyed by ``(seed, t)`` (``STREAM_STRAGGLE``, ``STREAM_EXTRA``), the speeds
from ``(seed,)`` (``STREAM_SPEED``), so every scheme sees the same stragglers at the same iterations. See
``docs/references.md#delay-models``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, check_float, check_int
from ._base import DelayModel
from ._comm import Gated, Scaled, _parametric, make_extra, plus
from ._crn import per_worker_uniforms, uniforms
from .wrappers import Wrapper, _check_listed, _check_workers, _nested, _Slowed

STREAM_STRAGGLE = 7
STREAM_EXTRA = 8
STREAM_SPEED = 9


class StraggleDelay(Wrapper):
    """Added straggling: ``T_i = P_i(load) + C_i + B_{t,i} E_{t,i}``, ``B`` says who straggles at iteration ``t``.

    Give exactly one of ``count`` (exactly that many workers, a uniformly random subset each iteration: the
    ``count`` smallest of ``n`` uniforms), ``p`` (each worker independently) or ``workers`` (a fixed list, every
    iteration). ``extra`` is a number (default 1) or an inline table of a distribution with its parameters
    (``{name = "exponential", mean = 3}``), drawn per ``(t, i)``. [paper: Tandon et al. 2017, section 7]

    i.i.d. view: with ``p``, one worker's time is ``load * U + C + B E`` with ``B ~ Bernoulli(p)`` (exact). With
    ``count`` or ``workers``, ``E[T_(k:n)]`` is exact for the given ``n``: the times are then two groups of i.i.d.
    workers, ``count`` delayed and ``n - count`` not (which ones does not change the order statistics); ``cdf`` and
    ``mean`` (no ``n`` given) describe a worker that is not delayed. [derived]

    >>> from gradcode.delays import make_delay
    >>> d = make_delay({"name": "straggle", "base": {"name": "constant"}, "count": 2, "extra": 5})
    >>> compute, comm = d.sample(0, 0, 6, load=3)
    >>> compute[0].tolist(), sorted(comm[0].tolist())
    ([3.0, 3.0, 3.0, 3.0, 3.0, 3.0], [0.0, 0.0, 0.0, 0.0, 5.0, 5.0])
    >>> d.expected_order_statistic(6, 6), d.expected_order_statistic(4, 6)
    (6.0, 1.0)
    """

    name = "straggle"
    description = "wraps base: count / p / listed workers get an added time extra, independent of load"
    source = "[paper: Tandon et al. 2017]"

    def __init__(self, base="constant", count: int | None = None, p: float | None = None, workers=None,
                 extra=1.0, *, comm: float | None = None, comm_dist: str | dict | None = None):
        self.base = _nested("base", base)
        given = [k for k, v in (("count", count), ("p", p), ("workers", workers)) if v is not None]
        if len(given) != 1:
            raise ConfigError("straggle: give exactly one of count (that many workers chosen at random each "
                              "iteration), p (each worker independently) or workers (a fixed list), got "
                              f"{', '.join(given) or 'none'}")
        self.count = None if count is None else check_int("count", count, low=0)
        self.p = None if p is None else check_float("p", p, low=0.0, high=1.0)
        self.workers = None if workers is None else _check_workers("workers", workers)
        self.extra = extra if isinstance(extra, (dict, str)) else check_float("extra", extra, low=0.0)
        self._extra = make_extra(extra)
        super().__init__([(1.0, self.base)], comm=comm, comm_dist=comm_dist)
        self._plain_cd = self._cd   # the communication without the added time
        # one worker seen alone: delayed with probability p (with count or workers: a worker not delayed)
        self._cd = plus(self._plain_cd, Gated(self.p, self._extra)) if self.p is not None else self._plain_cd
        self._params = {"base": self.base, "count": self.count, "p": self.p,
                        "workers": None if self.workers is None else list(self.workers),
                        "extra": extra if isinstance(extra, (dict, str)) else self.extra}

    def _comm_key(self):
        return ("straggle", id(self))   # its added time is its own: a mixture keeps it per component

    def check_workers(self, n):
        if self.workers is not None:
            _check_listed(self.name, self.workers, n)
        self._check_count(n)
        super().check_workers(n)

    def _check_count(self, n: int) -> None:
        if self.count is not None and self.count > n:
            raise ConfigError(f"straggle: count = {self.count} delayed workers, but the cluster has n = {n}; "
                              f"give count <= {n}")

    def delayed(self, seed: int, t_arr: np.ndarray, n: int, path: tuple = ()) -> np.ndarray:
        """Who straggles: a boolean ``(T, n)`` array."""
        if self.workers is not None:
            out = np.zeros((len(t_arr), n), dtype=bool)
            out[:, [w for w in self.workers if w < n]] = True
            return out
        u = uniforms(seed, t_arr, STREAM_STRAGGLE, path, (n,))
        if self.p is not None:
            return u < self.p
        self._check_count(n)
        rank = np.argsort(np.argsort(u, axis=1, kind="stable"), axis=1)
        return rank < self.count

    def _added(self, seed, t_arr, n, path):
        if self._extra.constant:
            return np.full((len(t_arr), n), self._extra.value)
        return self._extra.ppf(uniforms(seed, t_arr, STREAM_EXTRA, path, (n,)))

    def _comm(self, seed, t_arr, n, path=()):
        if self._own_comm:
            out = self._draw_comm(self._plain_cd, seed, t_arr, n, path)
        else:
            out = self.base._comm(seed, t_arr, n, path)
        mask = self.delayed(seed, t_arr, n, path)
        if mask.any():
            out = out + np.where(mask, self._added(seed, t_arr, n, path), 0.0)
        return out

    def _groups(self, n):
        if self.p is not None:
            return [(n, self)]
        self._check_count(n)
        d = self.count if self.count is not None else sum(1 for w in self.workers if w < n)
        plain = self.base._with_cd(self._plain_cd, self.comm, self.comm_dist)
        return [(n - d, plain), (d, self.base._with_cd(plus(self._plain_cd, self._extra)))]


class HeterogeneousDelay(Wrapper):
    """Workers of different speeds: ``P_i(load) = load * U_{t,i} / v_i`` (communication unchanged).

    ``speeds`` is a list of ``n`` factors (``v_i = 2``: worker ``i`` computes twice as fast) or an inline table
    of a distribution (``{name = "lognormal", base = 0.5, scale = 1}``) from which each worker's speed is drawn
    once per run, keyed by ``(seed, i)``. [derived]

    i.i.d. view: a worker chosen at random, ``F(x) = mean_i F_U(x v_i)`` (a list; ``E[T_(k:n)]`` is exact for
    ``n = len(speeds)``, the workers being groups of equal speed) or ``E_v[F_U(x v)]`` over 64 quantiles of the
    speed distribution (averaged over seeds; for one seed the speeds are fixed).

    >>> from gradcode.delays import make_delay
    >>> d = make_delay({"name": "heterogeneous", "base": {"name": "constant"}, "speeds": [1, 2, 4]})
    >>> d.sample(0, 0, 3, load=4)[0].tolist()
    [[4.0, 2.0, 1.0]]
    """

    name = "heterogeneous"
    description = "wraps base: per-worker speed factors (a list, or drawn once per run)"
    source = "[derived]"

    _NODES = 64   # quantiles of a speed distribution in the i.i.d. view

    def __init__(self, base="shifted_exponential", speeds=(1.0,), *, comm: float | None = None,
                 comm_dist: str | dict | None = None):
        self.base = _nested("base", base)
        if isinstance(speeds, (dict, str)):
            self._speed_term = Scaled(_parametric("speeds", speeds))
            self.speeds = None
            u = (np.arange(self._NODES) + 0.5) / self._NODES
            nodes = self._speed_term.ppf(u)
            if np.any(nodes <= 0):
                raise ConfigError(f"speeds: the distribution {speeds!r} gives speeds <= 0; speeds must be > 0")
            comps = [(1.0 / self._NODES, _Slowed(self.base, 1 / v, 1 / v)) for v in nodes]
        else:
            if not hasattr(speeds, "__iter__") or not len(speeds):
                raise ConfigError("speeds must be a non-empty list of numbers > 0 (one per worker) or an inline "
                                  f"table of a distribution, got {speeds!r}")
            self.speeds = tuple(check_float(f"speeds[{i}]", v, low=0.0, low_open=True)
                                for i, v in enumerate(speeds))
            self._speed_term = None
            comps = [(1.0 / len(self.speeds), _Slowed(self.base, 1 / v, 1 / v)) for v in self.speeds]
        super().__init__(comps, comm=comm, comm_dist=comm_dist)
        self._params = {"base": self.base, "speeds": list(self.speeds) if self.speeds else dict(speeds)
                        if isinstance(speeds, dict) else speeds}

    def check_workers(self, n):
        if self.speeds is not None and len(self.speeds) != n:
            raise ConfigError(f"heterogeneous: speeds has {len(self.speeds)} entries, but the cluster has n = {n} "
                              "workers; give one speed per worker")
        super().check_workers(n)

    def factors(self, seed: int, n: int, path: tuple = ()) -> np.ndarray:
        """The speed ``v_i`` of each of the ``n`` workers under ``seed``."""
        if self.speeds is None:
            return self._speed_term.ppf(per_worker_uniforms(seed, STREAM_SPEED, path, n, 1)[:, 0])
        if len(self.speeds) != n:
            raise ConfigError(f"heterogeneous: speeds has {len(self.speeds)} entries, but n = {n}")
        return np.array(self.speeds)

    def _unit(self, seed, t_arr, n, path):
        out = self.base._unit(seed, t_arr, n, path)
        out /= self.factors(seed, n, path)[None, :]
        return out

    def _micro(self, seed, t_arr, n, M, path):
        out = self.base._micro(seed, t_arr, n, M, path)
        out /= self.factors(seed, n, path)[None, :, None]
        return out

    def _comm(self, seed, t_arr, n, path=()):
        if self._own_comm:
            return DelayModel._comm(self, seed, t_arr, n, path)
        return self.base._comm(seed, t_arr, n, path)

    def _groups(self, n):
        if self.speeds is None or len(self.speeds) != n:
            return [(n, self)]
        counts: dict[float, int] = {}
        for v in self.speeds:
            counts[v] = counts.get(v, 0) + 1
        return [(c, _Slowed(self.base, 1 / v, 1 / v)._with_cd(self._cd, self.comm, self.comm_dist))
                for v, c in counts.items()]

