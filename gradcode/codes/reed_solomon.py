"""Reed-Solomon gradient code over the complex numbers.

Halbawi, Azizan, Salehi, Hassibi, "Improving Distributed Gradient Descent Using Reed-Solomon Codes",
ISIT 2018.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError
from ._base import Code


def cyclic_mask(n: int, s: int) -> np.ndarray:
    """Balanced ``(n, n)`` support mask: worker ``i`` holds partitions ``i, ..., i+s (mod n)``."""
    M = np.zeros((n, n), dtype=bool)
    for t in range(s + 1):
        M[np.arange(n), (np.arange(n) + t) % n] = True
    return M


def golden_stride(n: int) -> int:
    """The integer nearest ``n / phi^2`` that is coprime with ``n`` (1 for ``n <= 2``).

    Worker ``i`` gets node ``omega^(q i)``: a run of consecutive workers then lands on nodes spread round the
    circle (three-distance theorem), instead of on one arc.
    """
    if n <= 2:
        return 1
    target = n / ((1 + math.sqrt(5)) / 2) ** 2
    return min((q for q in range(1, n) if math.gcd(q, n) == 1), key=lambda q: (abs(q - target), q))


class ReedSolomon(Code):
    r"""Reed-Solomon gradient code (Halbawi, Azizan, Salehi, Hassibi, ISIT 2018), nodes on the unit circle.

    Support mask ``M``: worker ``i`` holds partitions ``i, ..., i+s (mod n)`` (every partition on ``s + 1``
    workers, ``k = n``). Worker ``i`` has the node ``alpha_i`` (distinct ``n``-th roots of unity). For
    partition ``j``,

        p_j(x) = prod_{i : M[i, j] = 0} (x - alpha_i) / (-alpha_i),      B[i, j] = p_j(alpha_i),

    of degree ``n - s - 1`` with ``p_j(0) = 1`` and zeros on the workers without ``j``. A polynomial of degree
    ``n - s - 1`` is fixed by its values on any ``n - s`` responders ``F'``, so Lagrange interpolation at zero
    gives ``sum_{i in F'} a_i B[i, j] = p_j(0) = 1`` for every ``j`` with

        a_i = prod_{l in F', l != i} alpha_l / (alpha_l - alpha_i),

    ``O((n-s)^2)`` and no linear solve. The exact decode uses the first ``n - s`` responders in index order.

    Nodes: ``alpha_i = omega^(q i mod n)``, ``omega = exp(2 pi sqrt(-1) / n)``, with the stride ``q`` of
    :func:`golden_stride` (``node_order="golden"``, default) or ``q = 1`` (``node_order="natural"``). Real
    nodes are catastrophically ill-conditioned (REFERENCES section 5). With natural order a burst of
    consecutive stragglers removes one arc of the circle and interpolation at 0 from the remaining arc
    amplifies round-off; the golden stride spreads any burst of consecutive workers round the circle, which
    keeps the Lagrange weights and the entries of ``B`` moderate (the worst case moves to stragglers spaced
    ``q^{-1} mod n`` apart, which is unlikely in practice). ``B`` is ``complex128``: every message is two real
    vectors, twice the communication; :meth:`combine` returns the real part.

    Examples
    --------
    >>> import numpy as np, gradcode
    >>> n, s = 6, 2
    >>> code = gradcode.make_code("reed_solomon", n, s)
    >>> B = code.B; B.dtype, code.support(5)
    (dtype('complex128'), (0, 1, 5))
    >>> partials = np.arange(6.0).reshape(6, 1)
    >>> F = [0, 2, 3, 5]
    >>> round(float(code.combine(code.encode(partials)[F], F)[0]), 9)
    15.0
    >>> a = code.decode(F, "exact")
    >>> bool(np.allclose(a @ B, 1))
    True
    """

    name = "reed_solomon"
    description = "balanced mask, unit-circle nodes, O((n-s)^2) Lagrange decoding at zero (exact)"

    def __init__(self, n: int, s: int, *, node_order: str = "golden", **kwargs):
        if node_order not in ("golden", "natural"):
            raise ConfigError(
                f"reed_solomon: unknown node_order {node_order!r}; accepted: 'golden', 'natural'")
        self.node_order = node_order
        super().__init__(n, s, **kwargs)

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        n, s = self.n, self.s
        q = golden_stride(n) if self.node_order == "golden" else 1
        alpha = np.exp(2j * np.pi * ((q * np.arange(n)) % n) / n)
        alpha.setflags(write=False)
        self.nodes = alpha
        M = cyclic_mask(n, s)
        B = np.zeros((n, n), dtype=complex)
        for j in range(n):
            zeros = alpha[~M[:, j]]  # nodes of the workers without partition j
            held = np.flatnonzero(M[:, j])
            # p_j(x) = prod (1 - x / alpha_l): the same polynomial, one division per factor.
            B[held, j] = np.prod(1.0 - alpha[held, None] / zeros[None, :], axis=1)
        return B

    def _exact_weights(self, F: np.ndarray) -> np.ndarray:
        m = self.n - self.s
        if len(F) < m:
            raise self._not_decodable(F)
        x = self.nodes[F[:m]]
        diff = x[None, :] - x[:, None]  # diff[i, l] = alpha_l - alpha_i
        np.fill_diagonal(diff, 1.0)
        ratio = x[None, :] / diff
        np.fill_diagonal(ratio, 1.0)
        a = np.zeros(len(F), dtype=complex)
        a[:m] = np.prod(ratio, axis=1)
        return a
