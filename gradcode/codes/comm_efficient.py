r"""A communication-efficient gradient code: messages of ``d / m`` numbers for a load of ``s + m`` partitions
(Ye and Abbe, "Communication-Computation Efficient Gradient Coding", ICML 2018: the optimal trade-off between
computation load, stragglers tolerated and communication, reached by polynomials coding across partitions *and*
across the gradient's coordinates; ``docs/references.md#communication-efficient-gradient-coding``).

Every partial gradient ``g_j`` (``d`` numbers) is cut into ``m`` parts ``g_j^(0), ..., g_j^(m-1)`` of ``d / m``;
the sum to recover is ``u_k = sum_j g_j^(k)`` for every ``k``. Worker ``i`` holds the ``s + m`` cyclically
consecutive partitions ``i, ..., i + s + m - 1`` (mod ``n``) and evaluates one polynomial with vector coefficients
at its own node ``alpha_i`` (Chebyshev points of ``[-1, 1]``, which keep the interpolation well conditioned):

    P(x) = sum_j q_j(x) r_j(x),     q_j(x) = prod_{i not holding j} (x - alpha_i)     (monic, degree D = n - s - m)

so ``P(alpha_i)`` involves only the partitions worker ``i`` holds. ``r_j(x) = sum_{t<m} h_{j,t} x^t`` is chosen so
that the ``m`` top coefficients of ``q_j r_j`` are ``g_j^(m-1), ..., g_j^(0)``: with ``q_j = x^D + a_1 x^{D-1} +
...``, ``h_{j,m-1-t} = g_j^(m-1-t) - sum_{1 <= u <= t} a_u h_{j,m-1-t+u}`` (a triangular recursion). Then ``P`` has
degree ``n - s - 1`` and its coefficient of ``x^{D+k}`` is ``u_k``: any ``n - s`` evaluations determine ``P``
(Vandermonde interpolation) and so the whole gradient. A worker's message is ``d / m`` numbers; the master solves
one ``(n - s) x (n - s)`` system per responder set. ``m = 1`` is a plain polynomial gradient code of load ``s + 1``.

This construction is ours, written from the paper's statement of the trade-off and its idea (polynomials across
partitions and coordinates); it reaches the same point of the trade-off, it is not the paper's recursive
construction line by line.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, check_int


class CommEfficientCode:
    """The code for ``n`` workers, ``s`` stragglers and messages of ``1 / m`` of the gradient (see the module).

    ``C[i, j, k]`` is the coefficient of ``g_j^(k)`` in worker ``i``'s message; :meth:`decode` returns the gradient
    and the residual ``||D_F C_F - T||_F / sqrt(n m)`` of the decode (``T`` the identity that sums each part)."""

    def __init__(self, n: int, s: int, m: int):
        self.n, self.s, self.m = check_int("n", n, low=1), check_int("s", s, low=0), check_int("m", m, low=1)
        if s + m > n:
            raise ConfigError(f"comm_efficient: s + m = {s + m} exceeds n = {n} (a worker holds s + m partitions "
                              "of n); take s + m <= n")
        self.nodes = np.cos((2 * np.arange(n) + 1) * np.pi / (2 * n))
        self.support = [tuple(int(j) for j in (i + np.arange(s + m)) % n) for i in range(n)]
        self.C = self._coefficients()
        self._decoders: dict[tuple[int, ...], tuple[np.ndarray, float]] = {}

    def _coefficients(self) -> np.ndarray:
        n, m, alpha = self.n, self.m, self.nodes
        holders = [[i for i in range(n) if j in self.support[i]] for j in range(n)]
        C = np.zeros((n, n, m))
        for j in range(n):
            a = np.poly(np.delete(alpha, holders[j]))      # q_j's coefficients, highest first (a[0] = 1)
            H = np.zeros((m, m))     # h_{j,t} = sum_k H[t, k] g_j^(k)
            for t in range(m):
                row = m - 1 - t
                H[row, row] = 1.0
                for u in range(1, min(t, len(a) - 1) + 1):
                    H[row] -= a[u] * H[row + u]
            for i in holders[j]:
                C[i, j] = np.polyval(a, alpha[i]) * (alpha[i] ** np.arange(m)) @ H
        return C

    def message(self, i: int, partials: np.ndarray) -> np.ndarray:
        """Worker ``i``'s ``d / m`` numbers from the ``(s + m, d)`` gradients of its partitions (support order)."""
        parts = np.asarray(partials).reshape(len(self.support[i]), self.m, -1)
        return np.einsum("jk,jkx->x", self.C[i, list(self.support[i])], parts)

    def decoder(self, F) -> tuple[np.ndarray, float]:
        """``(D, residual)``: the ``(m, |F|)`` weights turning the messages of workers ``F`` into the ``m`` parts of
        the gradient, by least squares on the Vandermonde system (exact from ``n - s`` workers on)."""
        key = tuple(int(i) for i in F)
        if key not in self._decoders:
            if len(set(key)) < self.n - self.s:
                raise ConfigError(f"comm_efficient: {len(set(key))} distinct workers cannot decode; it takes "
                                  f"n - s = {self.n - self.s}")
            V = self.nodes[list(key), None] ** np.arange(self.n - self.s)[None, :]
            D = np.linalg.pinv(V)[self.n - self.s - self.m:]        # the coefficients of x^D .. x^(D+m-1)
            target = np.kron(np.eye(self.m), np.ones(self.n))      # row k: ones on every (j, k)
            got = D @ self.C[list(key)].transpose(0, 2, 1).reshape(len(key), -1)
            residual = float(np.linalg.norm(got - target) / np.sqrt(self.n * self.m))
            self._decoders[key] = (D, residual)
        return self._decoders[key]

    def decode(self, messages: np.ndarray, F) -> tuple[np.ndarray, float]:
        """The gradient ``sum_j g_j`` (``d`` numbers) from the messages of workers ``F`` (in that order), and the
        decode's residual."""
        D, residual = self.decoder(F)
        return (D @ np.asarray(messages)).reshape(-1), residual
