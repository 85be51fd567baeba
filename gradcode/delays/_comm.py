"""Load-independent terms of a response time: the communication ``C_i`` and a straggler's added time ``E_i``.

``T_i = P_i(load) + C_i (+ E_i)``: the terms here do not grow with the load. Each is a small distribution object
with what the i.i.d. view needs (mean, CDF, survival function, lower end, breakpoints, tail index, atoms) and, for
the communication, an inverse CDF for sampling:

- :class:`Const` ``c`` (the default communication, and a numeric ``extra``);
- :class:`Scaled` ``scale * X`` with ``X`` the unit time of a parametric delay model (``comm_dist = "pareto"``
  is a Pareto rescaled to mean ``comm``; ``extra = {name = "exponential", mean = 3}`` is that distribution as
  given, ``scale = 1``);
- :class:`Gated` ``B * E`` with ``B ~ Bernoulli(q)`` (a straggler's added time, seen from one worker);
- :class:`Sum` ``A + B`` of independent terms (communication plus added time).

:func:`make_comm` reads ``comm`` (the mean) and ``comm_dist`` (a name or an inline table) and :func:`make_extra`
reads ``extra`` (a number or an inline table). See ``docs/references.md#delay-models``.

>>> from gradcode.delays._comm import make_comm
>>> c = make_comm(2.0, "pareto")          # Pareto(alpha = 1.3) rescaled to mean 2
>>> round(c.mean, 6), c.tail()
(2.0, 1.3)
>>> make_comm(0.5, "constant").value
0.5
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError, check_float

_MAX_ATOMS = 1 << 16   # a sum of two terms keeps at most this many atoms (else it convolves by CDF)
_CHUNK = 4_000_000      # elements per block of an expectation over atoms (bounds its memory)


def expect_over(pair, x, values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``sum_j w_j pair(x, v_j)`` elementwise in ``x``, clipped to ``[0, 1]``: a probability averaged over the atoms
    ``(values, weights)`` of an independent discrete variable. The one form of every such mixture in the delay
    models: a shift (``pair(y, v) = F_A(y - v)``: the CDF of ``A + V``), a shift of a scaled variable (the CDF of
    ``load * U + C`` over the atoms of ``C``), a scale (a persistent slowdown's ``s * V``). ``pair(column, row)``
    gets ``x`` as a column and the values as a row; ``x`` is taken in blocks of about ``_CHUNK`` pairs, so memory
    stays bounded for any size of ``x``.

    >>> import numpy as np
    >>> expect_over(lambda y, v: (y >= 2 * v).astype(float), np.array([1.0, 3.0]), np.array([1.0, 2.0]),
    ...             np.array([0.5, 0.5])).tolist()
    [0.0, 0.5]
    """
    x = np.asarray(x, dtype=float)
    flat = x.reshape(-1)
    out = np.empty(flat.shape)
    step = max(1, _CHUNK // max(len(values), 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        for s in range(0, len(flat), step):
            out[s:s + step] = pair(flat[s:s + step, None], values[None, :]) @ weights
    return np.clip(out, 0.0, 1.0).reshape(x.shape)


class Term:
    """A non-negative, load-independent random time (base class; every method is one line in a subclass)."""

    mean: float = 0.0
    constant: bool = False
    value: float = 0.0          # the value of a constant term
    discrete: bool = False      # True if ``atoms`` is the exact distribution

    def cdf(self, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def sf(self, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def lower(self) -> float:
        return 0.0

    def tail(self) -> float:
        """Power-law tail index (``inf`` for lighter tails)."""
        return math.inf

    def breakpoints(self) -> list[float]:
        return [self.lower()]

    def atoms(self) -> tuple[np.ndarray, np.ndarray]:
        """``(values, weights)``: exact if ``discrete``, else midpoint quantiles."""
        raise NotImplementedError

    def ppf(self, u: np.ndarray) -> np.ndarray:
        raise ConfigError(f"{type(self).__name__} cannot be sampled from uniforms")


class Const(Term):
    """The constant ``c``."""

    constant = discrete = True

    def __init__(self, c: float):
        self.value = self.mean = float(c)

    def cdf(self, y):
        return (np.asarray(y) >= self.value).astype(float)

    def sf(self, y):
        return (np.asarray(y) < self.value).astype(float)

    def lower(self):
        return self.value

    def atoms(self):
        return np.array([self.value]), np.array([1.0])

    def ppf(self, u):
        return np.full(np.shape(u), self.value)


class Scaled(Term):
    """``scale * X``, ``X`` the unit time of a parametric model (one with an inverse CDF ``_ppf``)."""

    def __init__(self, model, scale: float = 1.0):
        self.model, self.scale = model, float(scale)
        self.mean = self.scale * model._unit_mean()
        self.discrete = model._discrete

    def cdf(self, y):
        return self.model._unit_cdf(np.asarray(y, dtype=float) / self.scale)

    def sf(self, y):
        return self.model._unit_sf(np.asarray(y, dtype=float) / self.scale)

    def lower(self):
        return self.scale * self.model._lower()

    def tail(self):
        return self.model._tail()

    def breakpoints(self):
        return [self.scale * b for b in self.model._breakpoints()]

    def atoms(self):
        v, w = self.model._unit_atoms()
        return self.scale * v, w

    def ppf(self, u):
        out = self.model._ppf(u)
        out *= self.scale
        return out


class Gated(Term):
    """``B * E``, ``B ~ Bernoulli(q)`` independent of ``E``: 0 with probability ``1 - q``."""

    def __init__(self, q: float, extra: Term):
        self.q, self.extra = float(q), extra
        self.mean = self.q * extra.mean if self.q > 0 else 0.0
        self.constant = self.q == 0 or (extra.constant and (extra.value == 0 or self.q == 1))
        self.value = self.mean if self.constant else 0.0
        self.discrete = extra.discrete

    def cdf(self, y):
        y = np.asarray(y, dtype=float)
        return (1 - self.q) * (y >= 0) + self.q * self.extra.cdf(y)

    def sf(self, y):
        y = np.asarray(y, dtype=float)
        return (1 - self.q) * (y < 0) + self.q * self.extra.sf(y)

    def lower(self):
        return self.value if self.constant else min(0.0, self.extra.lower())

    def tail(self):
        return self.extra.tail() if self.q > 0 else math.inf

    def breakpoints(self):
        return [0.0] + self.extra.breakpoints()

    def atoms(self):
        v, w = self.extra.atoms()
        return np.concatenate([[0.0], v]), np.concatenate([[1 - self.q], self.q * w])


class Empirical(Term):
    """The empirical distribution of measured ``values`` (each with weight ``1/N``): a replayed trace's
    communication times in the i.i.d. view."""

    discrete = True

    def __init__(self, values):
        self.values = np.sort(np.asarray(values, dtype=float).ravel())
        self.mean = float(self.values.mean())
        self.constant = bool(self.values[0] == self.values[-1])
        self.value = float(self.values[0]) if self.constant else 0.0

    def cdf(self, y):
        return np.searchsorted(self.values, np.asarray(y, dtype=float), side="right") / self.values.size

    def sf(self, y):
        return 1.0 - self.cdf(y)

    def lower(self):
        return float(self.values[0])

    def breakpoints(self):
        return [float(v) for v in np.unique(self.values)]

    def atoms(self):
        return self.values, np.full(self.values.size, 1.0 / self.values.size)

    def ppf(self, u):
        idx = np.minimum((np.asarray(u) * self.values.size).astype(np.int64), self.values.size - 1)
        return self.values[idx]


class Sum(Term):
    """``A + B`` of independent terms. ``P(A + B <= y) = E_B[F_A(y - B)]`` over ``B``'s atoms (exact when ``B`` is
    discrete; over its 2048 midpoint quantiles otherwise, a CDF error below ``1/2048``)."""

    def __init__(self, a: Term, b: Term):
        if a.discrete and not b.discrete:   # convolve over the discrete one's atoms (b): exact
            a, b = b, a
        self.a, self.b = a, b
        self.mean = a.mean + b.mean
        self.constant = a.constant and b.constant
        self.value = a.value + b.value if self.constant else 0.0
        self.discrete = a.discrete and b.discrete

    def cdf(self, y):
        return expect_over(lambda x, v: self.a.cdf(x - v), y, *self.b.atoms())

    def sf(self, y):
        return expect_over(lambda x, v: self.a.sf(x - v), y, *self.b.atoms())

    def lower(self):
        return self.a.lower() + self.b.lower()

    def tail(self):
        return min(self.a.tail(), self.b.tail())

    def breakpoints(self):
        return sorted({x + y for x in self.a.breakpoints()[:50] for y in self.b.breakpoints()[:50]})

    def atoms(self):
        (va, wa), (vb, wb) = self.a.atoms(), self.b.atoms()
        if len(va) * len(vb) > _MAX_ATOMS:   # keep the finer one, shifted by the other's mean
            return (va + self.b.mean, wa) if len(va) >= len(vb) else (vb + self.a.mean, wb)
        return (va[:, None] + vb[None, :]).ravel(), (wa[:, None] * wb[None, :]).ravel()


class _Exponential(Scaled):
    """Exponential communication of mean ``scale``: draws ``-scale log(1 - u)``, this exact arithmetic, so that a
    seed draws the same times bit for bit in every version."""

    def ppf(self, u):
        np.negative(u, out=u)
        np.log1p(u, out=u)
        u *= -self.scale
        return u


def plus(a: Term, b: Term) -> Term:
    """``a + b``, folding constants."""
    if a.constant and b.constant:
        return Const(a.value + b.value)
    if b.constant and b.value == 0:
        return a
    if a.constant and a.value == 0:
        return b
    return Sum(a, b)


# ------------------------------------------------------------------------------------------------------------
# reading comm/comm_dist and extra
# ------------------------------------------------------------------------------------------------------------
COMM_DIST_NAMES = ("constant", "exponential", "pareto", "lognormal", "bimodal")


def _parametric(what: str, spec):
    """A parametric model (one with an inverse CDF) named by ``spec``, whose unit time is the term's shape."""
    from ..plumbing.registry import DELAYS  # here, not at the top: the registry imports the models it names

    if isinstance(spec, dict) and spec.get("comm", 0) not in (0, 0.0):
        raise ConfigError(f"{what}: a load-independent term has no communication of its own; drop 'comm' "
                          f"from {spec!r}")
    model = DELAYS.build(spec)
    if not model.parametric:
        raise ConfigError(f"{what} must name a parametric distribution ({', '.join(COMM_DIST_NAMES)}, or an "
                          f"inline table of one with its parameters), got {model.name!r}")
    return model


def make_comm(comm: float, comm_dist) -> Term:
    """The communication term: mean ``comm``, shape ``comm_dist`` (a name, or an inline table of a parametric
    model whose unit time is rescaled to mean ``comm``)."""
    comm = check_float("comm", comm, low=0.0)
    if isinstance(comm_dist, str) and comm_dist not in COMM_DIST_NAMES:
        raise ConfigError(f"comm_dist must be one of {', '.join(COMM_DIST_NAMES)} or an inline table "
                          f"{{name = ..., params}} of a parametric model, got {comm_dist!r}")
    if not isinstance(comm_dist, (str, dict)):
        raise ConfigError(f"comm_dist must be a name ({', '.join(COMM_DIST_NAMES)}) or an inline table, "
                          f"got {comm_dist!r}")
    if isinstance(comm_dist, dict):
        _parametric("comm_dist", comm_dist)   # checked even where it cannot matter (comm = 0)
    if comm == 0 or comm_dist == "constant":
        return Const(comm)
    model = _parametric("comm_dist", comm_dist)
    mean = model._unit_mean()
    if not (math.isfinite(mean) and mean > 0):
        raise ConfigError(f"comm_dist {comm_dist!r} has no finite positive mean to rescale to comm = {comm} "
                          "(a Pareto needs alpha > 1)")
    return (_Exponential if comm_dist == "exponential" else Scaled)(model, comm / mean)


def make_extra(extra) -> Term:
    """A straggler's added time: a number >= 0, or an inline table naming a parametric distribution as is
    (``{name = "exponential", mean = 3}``, ``{name = "pareto", alpha = 2, t_m = 1}``)."""
    if isinstance(extra, (dict, str)):
        return Scaled(_parametric("extra", extra), 1.0)
    return Const(check_float("extra", extra, low=0.0))
