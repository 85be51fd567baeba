"""Reed-Solomon gradient code over the complex numbers, nodes on the unit circle (Halbawi, Azizan, Salehi, Hassibi,
"Improving Distributed Gradient Descent Using Reed-Solomon Codes", ISIT 2018).

The construction and the decoder are Lagrange interpolation at zero (:mod:`gradcode.codes.lagrange`); the same
code over ``GF(p)`` is :mod:`gradcode.codes.finite_field`. See ``docs/references.md#gradient-codes``.
"""

from __future__ import annotations

import numpy as np

from .cyclic import CyclicSupportCode, OnTheCircle
from .lagrange import vanishing_values, weights_at_zero


class ReedSolomonBase(CyclicSupportCode):
    r"""Base of the two Reed-Solomon codes: nodes, coefficients ``p_j(alpha_i)``, decoding by interpolation.

    Worker ``i`` has the node ``alpha_i`` (distinct, nonzero). For partition ``j``,

        p_j(x) = prod_{l : j not in W_l} (x - alpha_l) / (-alpha_l),      B[i, j] = p_j(alpha_i),

    of degree ``n - s - 1`` with ``p_j(0) = 1`` and zeros on the workers without ``j``. A polynomial of degree
    ``n - s - 1`` is fixed by its values on any ``n - s`` responders ``F'``, so Lagrange interpolation at zero
    gives ``sum_{i in F'} a_i B[i, j] = p_j(0) = 1`` for every ``j`` with

        a_i = prod_{l in F', l != i} alpha_l / (alpha_l - alpha_i),

    ``O((n-s)^2)`` and no linear solve. The exact decode uses the first ``n - s`` responders in index order.

    A subclass gives the nodes (``_node_values``, an array of numbers kept as ``code.nodes``) and, if its field is
    not the complex numbers, the maps between those numbers and field elements (``_to_field``, ``_from_field``).
    """

    early_decoding = False   # the exact decoder interpolates from n - s responders and refuses fewer

    def _node_values(self) -> np.ndarray:
        raise NotImplementedError

    def _to_field(self, values):
        return values

    def _from_field(self, elements) -> np.ndarray:
        return elements

    def _window_coefficients(self, rng: np.random.Generator) -> np.ndarray:
        nodes = self._node_values()
        nodes.setflags(write=False)
        self.nodes = nodes
        alpha, mask, t = self._to_field(nodes), self.mask, np.arange(self.s + 1)
        C = np.zeros_like(alpha, shape=(self.n, self.s + 1))
        for j in range(self.n):
            held = (j - t) % self.n  # worker j - t holds partition j at place t of its window
            C[held, t] = vanishing_values(alpha[held], alpha[~mask[:, j]])
        return self._from_field(C)

    def _exact_weights(self, F: np.ndarray) -> np.ndarray:
        m = self.n - self.s
        if len(F) < m:
            raise self._not_decodable(F)
        a = np.zeros(len(F), dtype=self.B.dtype)
        a[:m] = self._from_field(weights_at_zero(self._to_field(self.nodes[F[:m]])))
        return a


class ReedSolomon(OnTheCircle, ReedSolomonBase):
    r"""Reed-Solomon gradient code (Halbawi, Azizan, Salehi, Hassibi, ISIT 2018), nodes on the unit circle.

    The code of :class:`ReedSolomonBase` with ``alpha_i = omega^(q i mod n)``, ``omega = exp(2 pi sqrt(-1) / n)``,
    and the stride ``q`` of :func:`~gradcode.codes.cyclic.golden_stride` (``node_order="golden"``, default) or
    ``q = 1`` (``node_order="natural"``). Real nodes are catastrophically ill-conditioned; on the circle the golden
    stride spreads a burst of consecutive stragglers, keeping the Lagrange weights moderate, as for cyclic MDS
    (``docs/references.md#gradient-codes``). ``B`` is ``complex128``: every message is two real vectors, twice the
    communication; :meth:`combine` returns the real part.

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

    def _node_values(self) -> np.ndarray:
        return np.exp(2j * np.pi * ((self.stride * np.arange(self.n)) % self.n) / self.n)
