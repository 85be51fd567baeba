"""Repetition codes: uncoded, fractional repetition and cyclic repetition (Tandon et al., ICML 2017).

All three have ``k = n`` partitions and real coefficients. Fractional repetition decodes without any
floating-point algebra; cyclic repetition decodes by least squares in the base class.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, NotDecodableError
from ._base import Code


class Uncoded(Code):
    r"""No coding: ``B = I_n``, worker ``i`` computes partition ``i``; exact only when every worker answers.

    Only ``s = 0`` is accepted (the identity tolerates no straggler). The exact decode is ``a = 1`` on all
    workers.

    Examples
    --------
    >>> import numpy as np, gradcode
    >>> n, s = 4, 0
    >>> code = gradcode.make_code("uncoded", n, s)
    >>> B = code.B; B.shape
    (4, 4)
    >>> partials = np.arange(4.0).reshape(4, 1)
    >>> F = [0, 1, 2, 3]
    >>> float(code.combine(code.encode(partials)[F], F)[0])
    6.0
    """

    name = "uncoded"
    description = "identity, s = 0: every worker one partition, wait for all (exact)"

    def _check(self) -> None:
        if self.s != 0:
            raise ConfigError(
                f"uncoded tolerates no stragglers: s must be 0, got s = {self.s}; use a code such as "
                "'fractional_repetition' or 'cyclic_repetition' for s > 0"
            )

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        return np.eye(self.n)

    def _exact_weights(self, F: np.ndarray) -> np.ndarray:
        if len(F) < self.n:
            raise self._not_decodable(F)
        return np.ones(self.n)


class FractionalRepetition(Code):
    r"""Fractional repetition (Tandon, Lei, Dimakis, Karampatziakis, "Gradient Coding", ICML 2017).

    Needs ``(s + 1) | n``. Workers form ``n / (s + 1)`` groups of ``s + 1`` consecutive workers; every member
    of group ``g`` holds partitions ``g(s+1), ..., g(s+1) + s`` with coefficient 1:

        B[i, j] = 1  if  floor(i / (s+1)) == floor(j / (s+1))  else 0,      k = n.

    Decode (no linear algebra): from each group take its lowest-indexed responder with weight 1 (all members
    send the same message, so which one is immaterial; this choice makes the weights a function of the set).
    Any ``s`` stragglers leave every group covered, and so does any larger set of stragglers that spares one
    worker per group. A set that leaves a group uncovered raises :class:`NotDecodableError` naming the group
    and its workers.

    Examples
    --------
    >>> import numpy as np, gradcode
    >>> n, s = 6, 2
    >>> code = gradcode.make_code("fractional_repetition", n, s)
    >>> code.B.astype(int)
    array([[1, 1, 1, 0, 0, 0],
           [1, 1, 1, 0, 0, 0],
           [1, 1, 1, 0, 0, 0],
           [0, 0, 0, 1, 1, 1],
           [0, 0, 0, 1, 1, 1],
           [0, 0, 0, 1, 1, 1]])
    >>> partials = np.arange(6.0).reshape(6, 1)
    >>> F = [2, 4]                          # 4 stragglers, yet both groups are covered
    >>> float(code.combine(code.encode(partials)[F], F)[0])
    15.0
    >>> code.decode(F).tolist()
    [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    """

    name = "fractional_repetition"
    description = "groups of s + 1 workers share s + 1 partitions; decode without algebra (exact)"
    early_decoding = True   # one responder per group is enough, often fewer than n - s

    def _check(self) -> None:
        g = self.s + 1
        if self.n % g:
            below = (self.n // g) * g
            above = below + g
            valid = ([f"n = {below}"] if below > 0 else []) + [f"n = {above}"]
            raise ConfigError(
                f"fractional_repetition needs (s + 1) to divide n: s + 1 = {g} does not divide n = {self.n}; "
                f"nearest valid: {' or '.join(valid)} (or choose s with s + 1 dividing {self.n})"
            )

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        group = np.arange(self.n) // (self.s + 1)
        return (group[:, None] == group[None, :]).astype(float)

    def group_of(self, i: int) -> int:
        """The group of worker ``i`` (workers ``g(s+1) .. g(s+1)+s`` form group ``g``)."""
        return int(i) // (self.s + 1)

    def _exact_weights(self, F: np.ndarray) -> np.ndarray:
        g = self.s + 1
        # F is sorted, so the first index of each group in F is its lowest-indexed responder. Any member would
        # do (their messages are identical); the lowest keeps the weights a function of the set, whatever the
        # order.
        groups = F // g
        first = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]]) if len(F) else np.zeros(0, int)
        uncovered = np.setdiff1d(np.arange(self.n // g), groups[first])
        if uncovered.size:
            raise self._uncovered(F, uncovered)
        a = np.zeros(len(F))
        a[first] = 1.0
        return a

    def _uncovered(self, F: np.ndarray, uncovered: np.ndarray) -> NotDecodableError:
        g = self.s + 1
        groups = {int(u): list(range(u * g, (u + 1) * g)) for u in uncovered}
        missing = tuple(int(u) * g for u in uncovered)
        return NotDecodableError(
            f"fractional_repetition(n={self.n}, s={self.s}): no responder in group(s) "
            + "; ".join(f"{u} (workers {w})" for u, w in groups.items())
            + f"; one answer from each of these groups is needed (got {len(F)} responders)",
            needed=len(F) + len(groups),
            missing=missing,
        )


class CyclicRepetition(Code):
    r"""Cyclic repetition (Tandon, Lei, Dimakis, Karampatziakis, "Gradient Coding", ICML 2017, Algorithm 2).

    Worker ``i`` holds partitions ``i, i+1, ..., i+s (mod n)``; ``k = n``. Draw ``H = [R, -R 1]`` (``s x n``),
    ``R`` an ``s x (n-1)`` standard Gaussian from ``seed``, so every row of ``H`` sums to zero and ``1`` is in
    its null space. Row ``i`` of ``B`` has ``B[i, i] = 1`` and its other ``s`` entries solve ``H b_i = 0``:

        B[i, S_i] = -H[:, S_i]^{-1} H[:, i],      S_i = {i+1, ..., i+s} mod n.

    Almost surely any ``n - s`` rows span ``null(H)`` (dimension ``n - s``), which contains ``1``; the exact
    decode solves ``B_F^T a = 1`` by least squares and checks the residual. ``H`` is kept as ``code.H``.

    Examples
    --------
    >>> import numpy as np, gradcode
    >>> n, s = 5, 2
    >>> code = gradcode.make_code("cyclic_repetition", n, s, seed=1)
    >>> code.support(3)
    (0, 3, 4)
    >>> bool(np.allclose(code.H @ code.B.T, 0))
    True
    >>> partials = np.arange(5.0).reshape(5, 1)
    >>> F = [0, 2, 4]
    >>> round(float(code.combine(code.encode(partials)[F], F)[0]), 9)
    10.0
    """

    name = "cyclic_repetition"
    description = "cyclic windows of s + 1 partitions, seeded random H; least-squares decode (exact)"

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        n, s = self.n, self.s
        R = rng.standard_normal((s, n - 1))
        H = np.hstack([R, -R.sum(axis=1, keepdims=True)])
        H.setflags(write=False)
        self.H = H
        B = np.zeros((n, n))
        for i in range(n):
            rest = (i + np.arange(1, s + 1)) % n
            B[i, i] = 1.0
            if s:
                B[i, rest] = -np.linalg.solve(H[:, rest], H[:, i])
        return B
