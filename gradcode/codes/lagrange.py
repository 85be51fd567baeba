"""Lagrange interpolation at zero, in any field: the construction and the decoder of the Reed-Solomon codes.

Both functions use only ``+ - * /`` and ``np.prod`` on the arrays they are given, so the same code runs on complex
numbers (:class:`~gradcode.codes.reed_solomon.ReedSolomon`) and on ``galois`` field arrays
(:class:`~gradcode.codes.finite_field.ReedSolomonGF`). See ``docs/references.md#gradient-codes``.
"""

from __future__ import annotations

import numpy as np


def vanishing_values(x, zeros):
    r"""``p(x)`` at each ``x`` for the polynomial with ``p(0) = 1`` that vanishes on ``zeros``:

        p(x) = prod_l (x - z_l) / (-z_l) = prod_l (1 - x / z_l)      (one division per factor).

    ``zeros`` must be nonzero; with no zeros ``p = 1``.

    >>> import numpy as np
    >>> vanishing_values(np.array([0.0, 1.0, 3.0]), np.array([1.0, 2.0])).tolist()   # (1 - x)(1 - x/2)
    [1.0, 0.0, 1.0]
    """
    one = np.ones_like(x)  # 1 in the arithmetic of x: a galois field has no mixed int - element operations
    if len(zeros) == 0:
        return one
    return np.prod(one[:, None] - x[:, None] / zeros[None, :], axis=1)


def weights_at_zero(x):
    r"""Lagrange weights at zero for the distinct nonzero nodes ``x``: ``sum_i a_i f(x_i) = f(0)`` for every
    polynomial ``f`` of degree below ``len(x)``,

        a_i = prod_{l != i} x_l / (x_l - x_i).

    ``O(m^2)`` for ``m`` nodes, no linear solve.

    >>> import numpy as np
    >>> a = weights_at_zero(np.array([1.0, 2.0, 4.0]))
    >>> float(a @ (np.array([1.0, 2.0, 4.0]) ** 2 - 3))    # f(x) = x^2 - 3 at 0
    -3.0
    """
    m = len(x)
    diff = x[None, :] - x[:, None]  # diff[i, l] = x_l - x_i
    diff[np.diag_indices(m)] = 1
    ratio = x[None, :] / diff
    ratio[np.diag_indices(m)] = 1
    return np.prod(ratio, axis=1)
