"""Random sparse approximate codes: the support of ``B`` is drawn from ``seed``.

- :class:`Expander`: ``B = A(G)/d`` for a random ``d``-regular graph, ``d = s + 1`` (Raviv et al.; Glasgow and
  Wootters).
- :class:`Bernoulli`: random support with density ``(s+1)/n_parts`` (Charles, Papailiopoulos, Ellenberg, 1711.06771).
- :class:`Stochastic`: each partition on ``s + 1`` random workers, scaled to be unbiased (Bitar, Wootters,
  El Rouayheb).

None promises the exact sum; every decoding reports its residual ``||B_F^T a - 1||_2 / sqrt(n_parts)``: ``optimal``
minimises it (least squares), ``one_step`` applies one fixed, cheap rule. See ``docs/references.md#gradient-codes``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, check_float
from ._base import Code
from .regular_graphs import random_regular_edges


class Expander(Code):
    """Expander code: ``B = A(G) / d``, ``G`` a random ``d``-regular graph on ``n_parts = n`` vertices, d = s + 1.

    Worker ``i`` holds the partitions of its ``d`` neighbours in ``G``, so every partition is held by
    ``d = s + 1`` workers. Optimal decoding is least squares on ``B_F^T a = 1``; one-step decoding scales
    every responder by ``n_parts / sum(B_F) = n / |F|``. Needs ``n * (s + 1)`` even and ``s + 1 < n``. The graph is
    a seeded random regular graph (circulant start plus double-edge swaps). Sources: Raviv, Tamo, Tandon,
    Dimakis; Glasgow and Wootters, "Approximate Gradient Coding with Optimal Decoding" (2006.09638).

        >>> import numpy as np
        >>> from gradcode import make_code
        >>> code = make_code("expander", n=10, s=2, seed=1)
        >>> sorted(set((code.B > 0).sum(axis=0).tolist()))   # every partition on s + 1 workers
        [3]
        >>> code.residual(list(range(10)), "optimal") < 1e-8  # no stragglers: exact
        True
        >>> F = [0, 1, 2, 3, 5, 6, 8]                          # workers 4, 7, 9 straggle
        >>> bool(code.residual(F, "optimal") <= code.residual(F, "one_step"))
        True
    """

    name = "expander"
    description = "B = A(G)/d for a random d-regular graph, d = s + 1; optimal or one-step decode (approximate)"
    exact = False

    def _check(self) -> None:
        d = self.s + 1
        if d >= self.n:
            raise ConfigError(
                f"expander: degree d = s + 1 = {d} must be smaller than n = {self.n} (no simple {d}-regular "
                f"graph on {self.n} vertices); accepted: 0 <= s <= {self.n - 2}"
            )
        if self.n * d % 2:
            odd_s = self.s - 1 if self.s else 1
            raise ConfigError(
                f"expander: n * (s + 1) must be even for a {d}-regular graph on n vertices, got "
                f"n = {self.n}, s = {self.s}; accepted: an even n (e.g. n = {self.n + 1}) or an odd s "
                f"(e.g. s = {odd_s})"
            )

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        d = self.s + 1
        edges = random_regular_edges(self.n, d, rng)
        A = np.zeros((self.n, self.n))
        A[edges[:, 0], edges[:, 1]] = 1.0
        A[edges[:, 1], edges[:, 0]] = 1.0
        return A / d


class Bernoulli(Code):
    """Bernoulli code: ``B[i, j] ~ Bernoulli((s+1)/n_parts)`` independently, coefficient 1, ``n_parts = n``, seeded.

    Each partition is held by ``s + 1`` workers on average (possibly none). Optimal decoding is least squares;
    one-step decoding scales every responder by ``n_parts / sum(B_F)``. Source: Charles, Papailiopoulos, Ellenberg,
    "Approximate gradient coding via sparse random graphs" (1711.06771).

        >>> from gradcode import make_code
        >>> code = make_code("bernoulli", n=16, s=3, seed=0)
        >>> round(float(code.B.sum()) / code.n_parts, 1)      # about s + 1 workers per partition
        3.6
        >>> F = [0, 1, 2, 4, 5, 6, 8, 9, 11, 12, 14, 15]
        >>> bool(code.residual(F, "optimal") <= code.residual(F, "one_step"))
        True
    """

    name = "bernoulli"
    description = "each worker takes each partition with probability (s+1)/n_parts (approximate)"
    exact = False

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        return (rng.random((self.n, self.n)) < (self.s + 1) / self.n).astype(float)


class Stochastic(Code):
    """Stochastic gradient coding: each partition on ``s + 1`` distinct random workers, B = 1/((s+1)(1-p)).

    ``n_parts = n``; ``p`` is the probability that a worker straggles (``0 <= p < 1``). If each worker responds
    independently with probability ``1 - p``, the plain sum of what arrives is unbiased:
    ``E[sum_{i in F} y_i] = sum_j (s+1)(1-p) g_j / ((s+1)(1-p)) = sum_j g_j``. So one-step decoding is all
    ones (the master just sums); optimal decoding is least squares. Source: Bitar, Wootters, El Rouayheb,
    "Stochastic gradient coding for straggler mitigation in distributed learning".

        >>> from gradcode import make_code
        >>> code = make_code("stochastic", n=8, s=1, p=0.5, seed=0)
        >>> sorted(set((code.B > 0).sum(axis=0).tolist())), float(code.B.max())
        ([2], 1.0)
        >>> code.decode([0, 3, 4], "one_step").tolist()
        [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    """

    name = "stochastic"
    description = "each partition on s + 1 random workers, scaled 1/((s+1)(1-p)): unbiased (approximate)"
    exact = False

    def __init__(self, n: int, s: int, *, p: float = 0.0, **kwargs):
        self.p = check_float("p", p)
        if not 0.0 <= self.p < 1.0:
            raise ConfigError(f"stochastic: straggling probability p must satisfy 0 <= p < 1, got {self.p}")
        super().__init__(n, s, **kwargs)

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        B = np.zeros((self.n, self.n))
        for j in range(self.n):
            B[rng.choice(self.n, size=self.s + 1, replace=False), j] = 1.0
        return B / ((self.s + 1) * (1.0 - self.p))

    def _one_step_weights(self, F: np.ndarray) -> np.ndarray:
        return np.ones(len(F))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, s={self.s}, n_parts={self.n_parts}, p={self.p}, seed={self.seed})"
