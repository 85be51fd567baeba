"""Cyclic MDS gradient code (Raviv, Tamo, Tandon, Dimakis, "Gradient Coding from Cyclic MDS Codes and Expander
Graphs", ICML 2018)."""

from __future__ import annotations

import numpy as np

from ..errors import GradcodeError
from ._base import Code


class CyclicMDS(Code):
    r"""Cyclic MDS code over the complex numbers (Raviv, Tamo, Tandon, Dimakis, ICML 2018).

    With ``omega = exp(2 pi i / n)`` and ``J`` a set of ``s`` consecutive exponents not containing 0,

        g(x) = prod_{j in J} (x - omega^j),        row i of B = coefficients of  c * x^i g(x) mod (x^n - 1),

    so worker ``i`` holds the cyclic window ``i, ..., i+s (mod n)`` (``k = n``). The code is MDS: any
    ``n - s`` rows are independent, and ``1`` is a codeword because ``g(1) != 0``. The exact decode solves
    ``a^T B_F = 1^T`` by least squares (base class) and checks the residual.

    ``J`` is centred on ``n / 2`` (the zeros of ``g`` as far from ``x = 1`` as possible):

    - ``n - s`` odd: ``J = {(n-s+1)/2, ..., (n+s-1)/2}`` is closed under ``j -> n - j``, so ``g`` and ``B``
      are real (``float64``; the imaginary round-off is checked to be negligible and dropped);
    - ``n - s`` even: no consecutive ``J`` is symmetric, ``J = {(n-s)/2 + 1, ..., (n+s)/2}`` and ``B`` is
      ``complex128``: every message is complex, i.e. **two real vectors, twice the communication**
      (``code.is_complex`` is True). :meth:`combine` returns the real part of the decoded sum.

    The constant ``c = (s+1)/g(1)`` scales every row to sum to ``s + 1``, like a repetition code. It is the
    same for every row, so it changes neither the conditioning nor the relative error of a decode; it keeps
    messages and weights on the scale of the partial gradients. ``s = 0`` gives the (real) identity. This is
    the project's reading of the construction (REFERENCES section 5, [derived, checked]).

    Examples
    --------
    >>> import numpy as np, gradcode
    >>> n, s = 5, 2                                   # n - s odd: real code
    >>> code = gradcode.make_code("cyclic_mds", n, s)
    >>> B = code.B; B.dtype, code.support(0)
    (dtype('float64'), (0, 1, 2))
    >>> bool(np.allclose(B.sum(axis=1), s + 1))
    True
    >>> partials = np.arange(5.0).reshape(5, 1)
    >>> F = [1, 2, 4]                                 # workers 0 and 3 straggle
    >>> round(float(code.combine(code.encode(partials)[F], F)[0]), 9)
    10.0
    >>> gradcode.make_code("cyclic_mds", 6, 2).is_complex
    True
    """

    name = "cyclic_mds"
    description = "cyclic MDS code from g(x); real if n - s is odd, else complex: 2x message size (exact)"

    @property
    def exponents(self) -> tuple[int, ...]:
        """The exponent set ``J``: the zeros of ``g`` are ``omega^j`` for ``j in J``."""
        n, s = self.n, self.s
        start = (n - s + 1) // 2 if (n - s) % 2 else (n - s) // 2 + 1
        return tuple(range(start, start + s))

    def generator(self) -> np.ndarray:
        """Coefficients ``g_0 .. g_s`` of ``c g(x)``, ascending; real if ``n - s`` is odd or ``s = 0``."""
        roots = np.exp(2j * np.pi * np.array(self.exponents, dtype=float) / self.n)
        g = np.poly(roots)[::-1] if self.s else np.ones(1, dtype=complex)  # np.poly gives descending powers
        g = g * (self.s + 1) / g.sum()
        # Coefficients that are zero in exact arithmetic must not become tiny nonzeros: they would enter the
        # support.
        g[np.abs(g) < 1e-13 * np.abs(g).max()] = 0.0
        if self.s == 0 or (self.n - self.s) % 2:
            # J is symmetric by construction, so this only guards against a broken J
            if np.abs(g.imag).max() > 1e-9 * np.abs(g).max():  # pragma: no cover
                raise GradcodeError(f"cyclic_mds(n={self.n}, s={self.s}): g(x) is not real: {g}")
            return g.real.copy()
        return g

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        n, g = self.n, self.generator()
        B = np.zeros((n, n), dtype=g.dtype)
        cols = np.arange(len(g))
        for i in range(n):
            B[i, (i + cols) % n] = g  # x^i g(x) mod (x^n - 1): a cyclic shift of g's coefficients
        return B
