"""Expected order statistics ``E[T_(k:n)]`` of workers' response times: the machinery behind
:meth:`DelayModel.expected_order_statistic`.

Workers come as independent groups ``(count, model)`` of i.i.d. workers (one group in the i.i.d. view; an explicit
persistent straggler set is two). With ``S_g(t) = P(T > t)`` in group ``g``, ``P(T_(k:n) > t)`` is the
probability that fewer than ``k`` workers are done by ``t``; for one group ``binom.cdf(k-1, n, 1 - S(t))``. Then

- discrete unit times (exact finite sum over the sorted support ``v_1 < v_2 < ...``):
  ``E = v_1 + sum_j (v_{j+1} - v_j) P(T_(k:n) > v_j)``;
- otherwise ``E = integral_0^inf P(T_(k:n) > t) dt`` by quadrature, split at quantiles of the average
  CDF (where ``T_(k:n)``'s Beta(k, n-k+1) mass is), and on the far tail over ``t = q e^s`` (a power-law tail
  becomes an exponential one): fixed Gauss-Legendre rules on those panels, all nodes in one vectorised call, when
  two rules agree to 1e-9; else adaptive quadrature (``scipy.integrate.quad``). Closed forms (harmonic numbers,
  Gamma ratios) live on the models as fast paths.

See ``docs/references.md#order-statistics``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.special

# probabilities of T_(k:n) ~ F^-1(Beta(k, n-k+1)) where the quadrature is split
_BETA_LEVELS = (1e-12, 1e-8, 1e-4, 0.01, 0.1, 0.5, 0.9, 0.99, 1 - 1e-4, 1 - 1e-8, 1 - 1e-12)


def harmonic_diff(n: int, k: int) -> float:
    """``H_n - H_{n-k}`` summed exactly (``sum_{j=n-k+1}^{n} 1/j``)."""
    return float(np.sum(1.0 / np.arange(n - k + 1, n + 1, dtype=float)))


def binom_cdf(m: np.ndarray, n: int, S: np.ndarray) -> np.ndarray:
    """``binom.cdf(m, n, 1 - S)`` from the survival probability ``S`` (precise when ``S`` is tiny):
    ``P(Bin(n, p) <= m) = I_S(n - m, m + 1)``."""
    m, S = np.broadcast_arrays(np.asarray(m), np.asarray(S, dtype=float))
    out = np.where(m >= n, 1.0, 0.0)
    ok = (m >= 0) & (m < n)
    out[ok] = scipy.special.betainc(n - m[ok], m[ok] + 1, np.clip(S[ok], 0.0, 1.0))
    return out


def order_survival(k: int, counts: list[int], Ss: list[np.ndarray]) -> np.ndarray:
    """``P(fewer than k of the workers are <= t)`` for independent groups (``counts[g]`` workers whose
    survival ``P(T > t)`` is ``Ss[g]``).

    One group: ``binom.cdf(k-1, n, F)``. Several: the first group by its binomial CDF, the others convolved
    (truncated to ``k - 1`` successes).
    """
    if len(counts) == 1:
        return binom_cdf(k - 1, counts[0], Ss[0])
    m = len(Ss[0])
    K = min(k, sum(counts[1:]) + 1)
    # pmf of the number of successes among groups 1.. (truncated to 0..K-1), per point
    pmf = np.zeros((m, K))
    pmf[:, 0] = 1.0
    for c, S in zip(counts[1:], Ss[1:], strict=True):
        j = np.arange(min(c, K - 1) + 1)
        S_ = np.clip(S[:, None], 0.0, 1.0)   # binomial pmf in numpy (scipy.stats' per-call overhead would dominate)
        gp = scipy.special.comb(c, j)[None, :] * (1.0 - S_) ** j[None, :] * S_ ** (c - j)[None, :]  # (m, len(j))
        new = np.zeros((m, K))
        for jj in j:
            new[:, jj:] += pmf[:, :K - jj] * gp[:, [jj]]
        pmf = new
    j = np.arange(K)
    return np.sum(pmf * binom_cdf(k - 1 - j[None, :], counts[0], Ss[0][:, None]), axis=1)


def quantiles(F, probs: np.ndarray, lower: float) -> np.ndarray:
    """Quantiles of the CDF ``F`` at ``probs`` by bracketing and bisection (vectorised)."""
    lo = np.full(probs.shape, lower)
    hi = np.full(probs.shape, lower + 1.0)
    for _ in range(1100):
        short = F(hi) < probs
        if not short.any():
            break
        hi = np.where(short, lower + 2 * (hi - lower), hi)
        if not np.all(np.isfinite(hi)):
            break
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        below = F(mid) < probs
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return hi


def exact_discrete(k: int, groups: list, load: float) -> float:
    """``E[T_(k:n)]`` of discrete total times (unit time and load-independent term), summed over the support."""
    supports = []
    for _, g in groups:
        v, w = g._total_atoms(load)
        order = np.argsort(v, kind="stable")
        supports.append((v[order], np.cumsum(w[order])))
    pts = np.unique(np.concatenate([s[0] for s in supports]))
    Fs = []
    for vals, cum in supports:
        idx = np.searchsorted(vals, pts, side="right")
        Fs.append(np.where(idx > 0, cum[np.maximum(idx - 1, 0)], 0.0))
    surv = order_survival(k, [c for c, _ in groups], [np.clip(1.0 - F, 0, 1) for F in Fs])
    return float(pts[0] + np.sum(np.diff(pts) * surv[:-1]))


def integrate(k: int, n: int, groups: list, load: float) -> tuple[float, float]:
    """``(E[T_(k:n)], error estimate)`` by quadrature of ``P(T_(k:n) > t)`` (the groups' total CDFs include
    their load-independent terms)."""
    import scipy.integrate  # imported here: slow to import, on every MPI rank
    import scipy.stats

    counts = [c for c, _ in groups]

    def G(t: float) -> float:
        return float(order_survival(k, counts, [g._total_sf(np.array([t]), load) for _, g in groups])[0])

    def F_avg(x: np.ndarray) -> np.ndarray:
        return sum(c * g._total_cdf(x, load) for c, g in groups) / n

    lower = min(g._total_lower(load) for _, g in groups)
    probe = quantiles(F_avg, np.asarray(scipy.stats.beta.ppf(_BETA_LEVELS, k, n - k + 1)), lower)
    bps = sorted({b for _, g in groups for b in g._total_breakpoints(load)})
    edges = [lower] + sorted({float(p) for p in probe if np.isfinite(p) and p > lower})
    tol = 1e-9 * max(abs(edges[len(edges) // 2]), 1e-12)
    fast = _gauss_legendre(k, counts, groups, load, edges, bps, tol)
    if fast is not None:
        return fast
    total, err = lower, 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.integrate.IntegrationWarning)
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            inner = [p for p in bps if a < p < b][:100]
            val, e = scipy.integrate.quad(G, a, b, points=inner or None, limit=200, epsabs=tol, epsrel=1e-8)
            total, err = total + val, err + e
        q = edges[-1]
        if q > 0:  # t = q e^s: a power-law tail of G becomes an exponential one, which quad handles
            def G_log(s: float) -> float:
                return G(q * math.exp(s)) * q * math.exp(s) if s < 700 else 0.0

            val, e = scipy.integrate.quad(G_log, 0.0, math.inf, limit=200, epsabs=tol, epsrel=1e-8)
        else:
            val, e = scipy.integrate.quad(G, q, math.inf, limit=200, epsabs=tol, epsrel=1e-8)
    return float(total + val), err + e


_GL_LOOSE = 1e-6     # relative agreement of the two finest Gauss-Legendre rules accepted without quad (see below)
_TAIL_PANELS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0)


def _gauss_legendre(k: int, counts: list[int], groups: list, load: float, edges: list[float], bps: list[float],
                    tol: float) -> tuple[float, float] | None:
    """The same integral by fixed Gauss-Legendre rules on the same panels (split at every breakpoint, the tail
    over ``t = q e^s`` on doubling panels), all nodes in one vectorised evaluation of ``P(T_(k:n) > t)``: some
    milliseconds where :func:`scipy.integrate.quad` calls the integrand point by point for a tenth of a second
    (adaptive_k_load plans with dozens of order statistics). Returns None (the caller then uses ``quad``) unless
    two rules (32 to 256 nodes a panel) agree to ``tol`` or ``1e-9`` relative, or the last two to
    :data:`_GL_LOOSE` relative: an integrand that is itself accurate to about that (a convolution over 2048
    quantile atoms is a fine staircase) never converges further, and ``quad`` then spent seconds point by point
    for the same digits."""
    cuts = sorted({*edges, *(p for p in bps if edges[0] < p < edges[-1])})
    a, b = np.array(cuts[:-1]), np.array(cuts[1:])
    q = edges[-1]
    if q <= 0 or not np.isfinite(q):
        return None
    sa, sb = np.array(_TAIL_PANELS[:-1]), np.array(_TAIL_PANELS[1:])

    def rule(m: int) -> float:
        x, w = np.polynomial.legendre.leggauss(m)
        t_body = (0.5 * (a + b)[:, None] + 0.5 * (b - a)[:, None] * x).ravel()
        w_body = (0.5 * (b - a)[:, None] * w).ravel()
        s_tail = (0.5 * (sa + sb)[:, None] + 0.5 * (sb - sa)[:, None] * x).ravel()
        t_tail = q * np.exp(s_tail)
        w_tail = (0.5 * (sb - sa)[:, None] * w).ravel() * t_tail
        t = np.concatenate([t_body, t_tail])
        G = order_survival(k, counts, [g._total_sf(t, load) for _, g in groups])
        return float(edges[0] + G[:len(t_body)] @ w_body + G[len(t_body):] @ w_tail), float(G[-1])

    with np.errstate(all="ignore"):
        coarse, _ = rule(32)
        for m in (64, 128, 256):   # double the nodes until two rules agree (kinks at unlisted points converge slowly)
            fine, last = rule(m)
            err = abs(fine - coarse)
            if err <= max(tol, 1e-9 * abs(fine)):
                break
            coarse = fine
    # the tail must be over by the last panel (t = q e^512: far beyond any finite mean), else quad decides
    if not (np.isfinite(fine) and last * q * math.exp(_TAIL_PANELS[-1]) < tol) or err > max(tol, _GL_LOOSE * abs(fine)):
        return None
    return fine, err
