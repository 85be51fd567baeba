"""Parametric unit times: constant, (shifted) exponential, Pareto, lognormal, bimodal.

Each is a few one-line methods, as in ``scipy.stats``: ``_scipy`` is the distribution frozen from ``scipy.stats``
(its definition: the mean and the support come from it, and the tests check the fast paths against it), ``_ppf``
the inverse CDF in place on the common uniforms (the sampling fast path, kept bit for bit so that a seed draws
the same delays in every version), ``_unit_cdf``/``_unit_sf`` closed forms in numpy (fast paths: the order-statistic
quadrature evaluates them a few hundred times a call, and a frozen distribution's per-call overhead would dominate
it), and
``_eos_closed`` the closed form of ``E[T_(k:n)]`` where one exists. See ``docs/references.md#delay-models``.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.special

from ..errors import ConfigError, check_float
from ._base import DelayModel
from .order_stats import harmonic_diff


class ConstantDelay(DelayModel):
    """Deterministic unit time: ``U = value``; a load ``l`` takes ``l * value``. [derived] (for tests)

    >>> from gradcode.delays import make_delay
    >>> make_delay("constant", value=2.0).sample(0, 0, 3, load=[1, 2, 0])[0]
    array([[2., 4., 0.]])
    """

    name = "constant"
    description = "deterministic unit time `value` (tests, baselines)"

    def __init__(self, value: float = 1.0, *, comm: float = 0.0, comm_dist: str = "constant"):
        super().__init__(comm=comm, comm_dist=comm_dist)
        self.value = check_float("value", value, low=0.0)
        self._params = {"value": self.value}

    def _unit(self, seed, t_arr, n, path):
        return np.full((len(t_arr), n), self.value)   # no uniforms to draw

    def _micro(self, seed, t_arr, n, M, path):
        return np.full((len(t_arr), n, M), self.value)

    def _ppf(self, u):
        return np.full(np.shape(u), self.value)

    def _unit_cdf(self, x):
        return (x >= self.value).astype(float)

    def _unit_mean(self):
        return self.value

    def _lower(self):
        return self.value

    _discrete = True

    def _atoms(self):
        return np.array([self.value]), np.array([1.0])

    def _eos_closed(self, k, n, load):
        return load * self.value + self.comm


class NoDelay(ConstantDelay):
    """Natural timing: nothing is injected (``injects`` is False). On MPI a worker computes for real and sends at
    once, so a response time is real compute plus real transfer; its draws are 0 (the shadow clock's ideal time is
    then 0 and no overhead ratio is defined). The simulator has no real work to time and refuses it
    (:func:`gradcode.clusters.sim.simulate`): replay a captured trace there instead. [derived]

    >>> from gradcode.delays import make_delay
    >>> make_delay("none").sample(0, 0, 2)[0]
    array([[0., 0.]])
    """

    name = "none"
    description = "natural timing (MPI only): workers inject nothing, real compute and transfer alone"
    injects = False

    def __init__(self):
        super().__init__(0.0)
        self._params = {}


class ShiftedExponentialDelay(DelayModel):
    """Unit time ``a + X/mu``, ``X ~ Exp(1)``; a load ``l`` takes ``l*(a + X/mu)``. [paper] (coded computing)

    ``E[T_(k:n)] = l*a + (l/mu)(H_n - H_{n-k}) + comm`` (constant comm).

    >>> from gradcode.delays import make_delay
    >>> d = make_delay("shifted_exponential", a=1.0, mu=0.5)
    >>> round(d.expected_order_statistic(2, 2), 6)   # 1 + 2 * (1 + 1/2)
    4.0
    """

    name = "shifted_exponential"
    description = "unit time a + Exp(1)/mu (standard in coded computing)"
    source = "[paper]"

    def __init__(self, a: float = 1.0, mu: float = 1.0, *, comm: float = 0.0, comm_dist: str = "constant"):
        super().__init__(comm=comm, comm_dist=comm_dist)
        self.a = check_float("a", a, low=0.0)
        self.mu = check_float("mu", mu, low=0.0, low_open=True)
        self._params = {"a": self.a, "mu": self.mu}

    def _ppf(self, u):   # a - log(1 - u)/mu, in place
        np.negative(u, out=u)
        np.log1p(u, out=u)
        u *= -1.0 / self.mu
        u += self.a
        return u

    def _scipy(self, stats):
        return stats.expon(loc=self.a, scale=1.0 / self.mu)

    def _unit_cdf(self, x):
        return np.where(x > self.a, -np.expm1(-self.mu * np.maximum(x - self.a, 0.0)), 0.0)

    def _unit_sf(self, x):
        return np.where(x > self.a, np.exp(-self.mu * np.maximum(x - self.a, 0.0)), 1.0)

    def _eos_closed(self, k, n, load):
        return load * self.a + load / self.mu * harmonic_diff(n, k) + self.comm


class ExponentialDelay(ShiftedExponentialDelay):
    """Unit time ``Exp(mu)`` (the shifted exponential with ``a = 0``); ``mean = 1/mu`` may be given instead. [paper]

    ``E[T_(k:n)] = (l/mu)(H_n - H_{n-k}) + comm`` (constant comm).

    >>> from gradcode.delays import make_delay
    >>> round(make_delay("exponential", mu=2.0).mean(), 6)
    0.5
    """

    name = "exponential"
    description = "unit time Exp(mu) (mean 1/mu; or give mean)"

    def __init__(self, mu: float | None = None, mean: float | None = None, *, comm: float = 0.0,
                 comm_dist: str = "constant"):
        if mu is not None and mean is not None:
            raise ConfigError("exponential: give either mu (the rate) or mean (= 1/mu), not both")
        if mean is not None:
            mu = 1.0 / check_float("mean", mean, low=0.0, low_open=True)
        super().__init__(a=0.0, mu=1.0 if mu is None else mu, comm=comm, comm_dist=comm_dist)
        self._params = {"mu": self.mu}


class ParetoDelay(DelayModel):
    """Unit time Pareto: ``P(U > x) = (t_m/x)^alpha`` for ``x >= t_m``, i.e. ``U = t_m (1-u)^(-1/alpha)``.

    Heavy tail; production task durations fit ``alpha`` near 1.3 [recalled]. The mean ``alpha t_m/(alpha-1)``
    is infinite for ``alpha <= 1``, and ``E[T_(k:n)]`` is finite iff ``alpha (n-k+1) > 1``: ``E[T_(k:n)] = l
    t_m Gamma(n+1) Gamma(n-k+1-1/alpha) / (Gamma(n-k+1) Gamma(n+1-1/alpha)) + comm`` [derived] (``1 - U_(k)``
    of uniforms is ``Beta(n-k+1, k)``).

    >>> from gradcode.delays import make_delay
    >>> round(make_delay("pareto", alpha=2.0, t_m=1.0).mean(), 6)
    2.0
    """

    name = "pareto"
    description = "heavy-tailed unit time, P(U > x) = (t_m/x)^alpha"
    source = "[recalled]"

    def __init__(self, alpha: float = 1.3, t_m: float = 1.0, *, comm: float = 0.0,
                 comm_dist: str = "constant"):
        super().__init__(comm=comm, comm_dist=comm_dist)
        self.alpha = check_float("alpha", alpha, low=0.0, low_open=True)
        self.t_m = check_float("t_m", t_m, low=0.0, low_open=True)
        self._params = {"alpha": self.alpha, "t_m": self.t_m}

    def _ppf(self, u):   # t_m exp(-log(1 - u)/alpha), in place
        np.negative(u, out=u)
        np.log1p(u, out=u)
        u *= -1.0 / self.alpha
        np.exp(u, out=u)
        u *= self.t_m
        return u

    def _scipy(self, stats):
        return stats.pareto(self.alpha, scale=self.t_m)

    def _unit_cdf(self, x):   # -expm1(alpha log(t_m/x)): scipy's 1 - (x/t_m)^-alpha loses the CDF near t_m
        with np.errstate(divide="ignore", invalid="ignore"):
            tail = -np.expm1(self.alpha * np.log(self.t_m / np.maximum(x, self.t_m)))
            return np.where(x > self.t_m, tail, 0.0)

    def _unit_sf(self, x):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(x > self.t_m, (self.t_m / np.maximum(x, self.t_m)) ** self.alpha, 1.0)

    def _tail(self):
        return self.alpha

    def _eos_closed(self, k, n, load):
        if load == 0:
            return self.comm
        if self.alpha * (n - k + 1) <= 1:
            return math.inf
        g = scipy.special.gammaln
        a = 1.0 / self.alpha
        return float(load * self.t_m * np.exp(g(n + 1) - g(n - k + 1) + g(n - k + 1 - a) - g(n + 1 - a))
                     + self.comm)


SIGMA_MAX = 30.0   # lognormal: exp(-sigma^2/2) of the mean-1 normalisation is 0 in floating point beyond sigma ~ 38


class LognormalDelay(DelayModel):
    """DropCompute's injected noise: ``U = base * (1 + scale * X)``, ``X = exp(sigma Z - sigma^2/2)``
    lognormal of mean 1 (``Z ~ N(0, 1)``), so ``E[U] = base (1 + scale)``. [code]

    The spread of ``X`` is given either as its standard deviation ``sd`` (default 1, so ``sigma^2 = ln 2``) or
    directly as the log-scale ``sigma``. The noise DropCompute's code injects is described as "a lognormal of mean
    1 (sigma = 1)" (``docs/references.md#delay-models``); DropCompute's table of speedups
    (``docs/references.md#dropcompute``) is reproduced by ``sd = 1`` (e.g. 1.21 at n = 200 workers for the official
    timer checks, reference 1.20), not by a log-scale ``sigma = 1`` (1.28), so ``sd = 1`` is the default [derived].
    Defaults ``base=1, scale=0.5, sd=1``.

    >>> from gradcode.delays import make_delay
    >>> round(make_delay("lognormal").mean(), 6)
    1.5
    """

    name = "lognormal"
    description = "DropCompute noise: base * (1 + scale * X), X lognormal with mean 1 and sd 1"
    source = "[code]"

    def __init__(self, base: float = 1.0, scale: float = 0.5, sd: float | None = None, sigma: float | None = None,
                 *, comm: float = 0.0, comm_dist: str = "constant"):
        super().__init__(comm=comm, comm_dist=comm_dist)
        self.base = check_float("base", base, low=0.0, low_open=True)
        self.scale = check_float("scale", scale, low=0.0, low_open=True)
        if sd is not None and sigma is not None:
            raise ConfigError("lognormal: give the spread of X either as sd (its standard deviation) or as sigma "
                              "(log-scale), not both")
        if sigma is None:
            sd = 1.0 if sd is None else check_float("sd", sd, low=0.0, low_open=True)
            sigma = math.sqrt(math.log1p(sd * sd))
            if sigma > SIGMA_MAX:
                raise ConfigError(f"lognormal: sd = {sd:g} is too large (log-scale sigma = {sigma:.3g} > "
                                  f"{SIGMA_MAX:g}: the mean-1 normalisation exp(-sigma^2/2) underflows); give sd <= "
                                  f"{math.exp(SIGMA_MAX ** 2 / 2):.3g}")
        self.sigma = check_float("sigma", sigma, low=0.0, low_open=True, high=SIGMA_MAX)
        self._params = {"base": self.base, "scale": self.scale, "sigma": self.sigma}

    def _ppf(self, u):   # base (1 + scale exp(sigma ndtri(u) - sigma^2/2)), in place
        z = scipy.special.ndtri(u, out=u)
        z *= self.sigma
        z -= 0.5 * self.sigma ** 2
        np.exp(z, out=z)
        z *= self.scale
        z += 1.0
        z *= self.base
        return z

    def _scipy(self, stats):
        return stats.lognorm(self.sigma, loc=self.base, scale=self.base * self.scale * math.exp(-0.5 * self.sigma ** 2))

    def _unit_cdf(self, x):
        positive, z = self._standardize(x)
        return np.where(positive, scipy.special.ndtr(z), 0.0)

    def _unit_sf(self, x):
        positive, z = self._standardize(x)
        return np.where(positive, scipy.special.ndtr(-z), 1.0)

    def _standardize(self, x):
        """``(X > 0, Z)`` at ``U = x``: ``X = (x/base - 1)/scale`` and ``Z = (log X + sigma^2/2)/sigma``."""
        y = (x / self.base - 1.0) / self.scale
        with np.errstate(divide="ignore", invalid="ignore"):
            return y > 0, (np.log(np.maximum(y, 1e-300)) + 0.5 * self.sigma ** 2) / self.sigma

    def _unit_mean(self):   # exact; scipy's loc + scale e^(sigma^2/2) rounds the e^(-sigma^2/2) of scale back
        return self.base * (1.0 + self.scale)


class BimodalDelay(DelayModel):
    """Two-point unit time: ``base`` with probability ``1 - p``, ``kappa * base`` with probability ``p``.

    Defaults ``p = 0.13, kappa = 2.2`` fit the micro-batch times of the ByteDance SE trace (13% near 1.9x the
    mean, 87% near 0.86x, ratio 2.2) [derived from the SE trace]. The draw is ``slow = u < p``.

    >>> from gradcode.delays import make_delay
    >>> round(make_delay("bimodal", p=0.5, kappa=3.0).mean(), 6)
    2.0
    """

    name = "bimodal"
    description = "base, or kappa*base with probability p (fit of the SE trace)"
    source = "[derived]"

    def __init__(self, p: float = 0.13, kappa: float = 2.2, base: float = 1.0, *, comm: float = 0.0,
                 comm_dist: str = "constant"):
        super().__init__(comm=comm, comm_dist=comm_dist)
        self.p = check_float("p", p, low=0.0, high=1.0)
        self.kappa = check_float("kappa", kappa, low=0.0, low_open=True)
        self.base = check_float("base", base, low=0.0, low_open=True)
        self._params = {"p": self.p, "kappa": self.kappa, "base": self.base}

    def _ppf(self, u):
        return np.where(u < self.p, self.kappa * self.base, self.base)

    def _unit_cdf(self, x):
        lo, hi = sorted((self.base, self.kappa * self.base))
        p_lo = 1 - self.p if self.kappa >= 1 else self.p
        return np.where(x >= hi, 1.0, np.where(x >= lo, p_lo, 0.0))

    def _unit_mean(self):
        return self.base * (1 - self.p + self.p * self.kappa)

    def _lower(self):
        return self.base * min(1.0, self.kappa)

    def _breakpoints(self):
        return [self.base, self.kappa * self.base]

    _discrete = True

    def _atoms(self):
        return np.array([self.base, self.kappa * self.base]), np.array([1 - self.p, self.p])
