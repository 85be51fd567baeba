"""Codes on the cyclic support: worker ``i`` holds partitions ``i, ..., i+s (mod n)``.

:class:`CyclicSupportCode` holds what these codes share (the windows, the support mask, building ``B`` from the
window coefficients, decoding from any ``n - s`` responders); the concrete codes differ only in their coefficients:
cyclic repetition (random null space), cyclic MDS (a generator polynomial), Reed-Solomon over the complex numbers
(:mod:`gradcode.codes.reed_solomon`) and over ``GF(p)`` (:mod:`gradcode.codes.finite_field`). See
``docs/references.md#gradient-codes``.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError
from ._base import Code


def golden_stride(n: int) -> int:
    """The integer nearest ``n / phi^2`` that is coprime with ``n`` (1 for ``n <= 2``).

    Node ``i`` of a code on the ``n``-th roots of unity becomes ``omega^(q i)``: a run of consecutive workers then
    lands on nodes spread round the circle (three-distance theorem), instead of on one arc.
    """
    if n <= 2:
        return 1
    target = n / ((1 + math.sqrt(5)) / 2) ** 2
    return min((q for q in range(1, n) if math.gcd(q, n) == 1), key=lambda q: (abs(q - target), q))


class OnTheCircle:
    """Mixin of the codes on the ``n``-th roots of unity: ``node_order`` is ``"golden"`` (the stride
    :func:`golden_stride`, default) or ``"natural"`` (stride 1)."""

    def __init__(self, n: int, s: int, *, node_order: str = "golden", **kwargs):
        if node_order not in ("golden", "natural"):
            raise ConfigError(f"{self.name}: unknown node_order {node_order!r}; accepted: 'golden', 'natural'")
        self.node_order = node_order
        super().__init__(n, s, **kwargs)

    @property
    def stride(self) -> int:
        """``q``: node ``i`` is ``omega^(q i)``, ``omega = exp(2 pi sqrt(-1) / n)``."""
        return golden_stride(self.n) if self.node_order == "golden" else 1


def _real_product(exponents, angles: np.ndarray, n: int) -> np.ndarray:
    """``prod_{j in J} (x - exp(i angle_j))`` for a set ``J`` closed under ``j -> n - j``, in real arithmetic: one
    factor ``x^2 - 2 cos(angle) x + 1`` per conjugate pair and ``x + 1`` for ``j = n / 2``, ascending powers.

    (``np.poly`` on the complex zeros leaves imaginary round-off that grows with ``s``.)
    """
    g = np.ones(1)
    for j, angle in zip(exponents, angles, strict=True):
        if 2 * j < n:
            g = np.convolve(g, [1.0, -2.0 * math.cos(angle), 1.0])
        elif 2 * j == n:
            g = np.convolve(g, [1.0, 1.0])
    return g


class CyclicSupportCode(Code):
    r"""Base class: worker ``i`` holds the cyclic window ``W_i = {i, i+1, ..., i+s} (mod n)``; ``n_parts = n``.

    Every partition ``j`` is held by the ``s + 1`` workers ``j - s, ..., j``, so the load is balanced. A subclass
    gives the coefficients of each window, ``_window_coefficients(rng) -> C`` of shape ``(n, s + 1)``, and

        B[i, (i + t) mod n] = C[i, t]   for t = 0..s,        B[i, j] = 0   for j outside W_i.

    The codes are MDS-like: any ``n - s`` responders decode exactly. Fewer may too (``early_decoding``): cyclic MDS
    decodes some structured sets (``{0, 2}`` at ``n = 4, s = 1``, where ``g(x) = x + 1``); cyclic repetition
    (random coefficients) and Reed-Solomon (its decoder interpolates from ``n - s``) never do.
    The exact decode is the base class's (least squares on ``B_F^T a = 1``, residual checked) unless a code has a
    closed form (the Reed-Solomon codes interpolate).

    Examples
    --------
    >>> import numpy as np
    >>> from gradcode.codes.cyclic import CyclicSupportCode
    >>> class Averaging(CyclicSupportCode):          # every window summed with weight 1 / (s + 1)
    ...     name = "averaging"
    ...     def _window_coefficients(self, rng):
    ...         return np.full((self.n, self.s + 1), 1 / (self.s + 1))
    >>> code = Averaging(4, 1)
    >>> code.windows.tolist()
    [[0, 1], [1, 2], [2, 3], [3, 0]]
    >>> code.B.tolist()[3]
    [0.5, 0.0, 0.0, 0.5]
    """

    @property
    def windows(self) -> np.ndarray:
        """``(n, s + 1)`` partitions of each worker, in window order: ``windows[i, t] = (i + t) mod n``."""
        return (np.arange(self.n)[:, None] + np.arange(self.s + 1)[None, :]) % self.n

    @property
    def mask(self) -> np.ndarray:
        """``(n, n)`` support mask: ``mask[i, j]`` is True if worker ``i`` holds partition ``j``."""
        M = np.zeros((self.n, self.n), dtype=bool)
        M[np.arange(self.n)[:, None], self.windows] = True
        return M

    def _window_coefficients(self, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        C = self._window_coefficients(rng)
        B = np.zeros((self.n, self.n), dtype=C.dtype)
        B[np.arange(self.n)[:, None], self.windows] = C
        return B


class CyclicRepetition(CyclicSupportCode):
    r"""Cyclic repetition (Tandon, Lei, Dimakis, Karampatziakis, "Gradient Coding", ICML 2017, Algorithm 2).

    Draw ``H = [R, -R 1]`` (``s x n``), ``R`` an ``s x (n-1)`` standard Gaussian from ``seed``, so every row of
    ``H`` sums to zero and ``1`` is in its null space. Row ``i`` of ``B`` has ``B[i, i] = 1`` and its other ``s``
    entries solve ``H b_i = 0``:

        B[i, S_i] = -H[:, S_i]^{-1} H[:, i],      S_i = {i+1, ..., i+s} mod n.

    Almost surely any ``n - s`` rows span ``null(H)`` (dimension ``n - s``), which contains ``1``; the exact decode
    solves ``B_F^T a = 1`` by least squares and checks the residual. ``H`` is kept as ``code.H``.

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
    early_decoding = False   # a set of fewer than n - s rows spans 1 only on a null set of the Gaussian H

    def _window_coefficients(self, rng: np.random.Generator) -> np.ndarray:
        n, s = self.n, self.s
        R = rng.standard_normal((s, n - 1))
        H = np.hstack([R, -R.sum(axis=1, keepdims=True)])
        H.setflags(write=False)
        self.H = H
        C = np.ones((n, s + 1))
        if s:
            for i, window in enumerate(self.windows):
                C[i, 1:] = -np.linalg.solve(H[:, window[1:]], H[:, i])
        return C


class CyclicMDS(OnTheCircle, CyclicSupportCode):
    r"""Cyclic MDS code over the complex numbers (Raviv, Tamo, Tandon, Dimakis, "Gradient Coding from Cyclic MDS
    Codes and Expander Graphs", ICML 2018), with its zeros spread round the unit circle.

    With ``omega = exp(2 pi i / n)``, ``beta = omega^q`` (``q`` coprime with ``n``, so ``beta`` is also a primitive
    ``n``-th root of unity) and ``J`` a set of ``s`` consecutive exponents not containing 0,

        g(x) = c prod_{j in J} (x - beta^j),        row i of B = coefficients of  x^i g(x) mod (x^n - 1),

    a cyclic shift of ``g``: every window has the coefficients of ``g``. The code is MDS (any ``n - s`` rows are
    independent: the BCH argument in ``beta``) and ``1`` is a codeword because ``g(1) != 0``; the exact decode is
    least squares (base class), its residual checked.

    ``q`` is the stride of :func:`golden_stride` (``node_order="golden"``, default) or 1 (``node_order="natural"``,
    the paper's ``B``): same support, same guarantees, but with ``q = 1`` the zeros of ``g`` crowd round ``-1`` and
    a burst of consecutive stragglers is catastrophically ill-conditioned, which the golden stride avoids
    (``docs/references.md#gradient-codes``). An ill-conditioned decode fails its residual check, and
    ``method="auto"`` warns (:class:`~gradcode.errors.DecodeFallbackWarning`).

    ``J`` is centred on ``n / 2``, the zeros of ``g`` as far from ``x = 1`` as possible (in powers of ``beta``): if
    ``n - s`` is odd, ``J = {(n-s+1)/2, ..., (n+s-1)/2}`` is closed under ``j -> n - j`` and ``B`` is real (built
    from real quadratic factors); if ``n - s`` is even, ``J = {(n-s)/2 + 1, ..., (n+s)/2}`` and ``B`` is
    ``complex128``: every message is two real vectors, **twice the communication** (``code.is_complex``);
    :meth:`combine` returns the real part. ``c = (s+1)/g(1)`` makes every row sum to ``s + 1`` like a repetition
    code, which keeps messages on the scale of the partial gradients.

    Examples
    --------
    >>> import numpy as np, gradcode
    >>> n, s = 5, 2                                   # n - s odd: real code
    >>> code = gradcode.make_code("cyclic_mds", n, s)
    >>> B = code.B; B.dtype, code.support(0), code.stride
    (dtype('float64'), (0, 1, 2), 2)
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
        """The exponent set ``J``: the zeros of ``g`` are ``beta^j`` for ``j in J``."""
        n, s = self.n, self.s
        start = (n - s + 1) // 2 if (n - s) % 2 else (n - s) // 2 + 1
        return tuple(range(start, start + s))

    def generator(self) -> np.ndarray:
        """Coefficients ``g_0 .. g_s`` of ``c g(x)``, ascending; real if ``n - s`` is odd or ``s = 0``."""
        n, q = self.n, self.stride
        real = self.s == 0 or (n - self.s) % 2 == 1
        angles = 2 * np.pi * ((q * np.array(self.exponents, dtype=np.int64)) % n) / n
        if real:
            g = _real_product(self.exponents, angles, n)
        else:
            g = np.poly(np.exp(1j * angles))[::-1]  # np.poly gives descending powers
        g = g * (self.s + 1) / g.sum()
        # Coefficients that are zero in exact arithmetic must not become tiny nonzeros: they would enter the
        # support.
        g[np.abs(g) < 1e-13 * np.abs(g).max()] = 0.0
        return g

    def _window_coefficients(self, rng: np.random.Generator) -> np.ndarray:
        return np.tile(self.generator(), (self.n, 1))
