"""Reed-Solomon gradient code over a prime field GF(p) with fixed-point gradients: exact to the bit, whatever ``n``.

The code of :mod:`gradcode.codes.reed_solomon` in ``GF(p)`` instead of the complex numbers: no round-off, so no
ill-conditioning, at the price of a fixed-point range (see ``docs/references.md#gradient-codes``). ``galois`` is
imported lazily, inside functions only, so that ``import gradcode`` stays fast.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError, check_float, check_int
from .reed_solomon import ReedSolomonBase

_FIELDS: dict[int, type] = {}


def _field(p: int):
    """The galois field class GF(p), built once per ``p`` (building it costs ~1 s)."""
    if p not in _FIELDS:
        import galois  # lazy: galois and numba take seconds to import

        _FIELDS[p] = galois.GF(p)
    return _FIELDS[p]


def _mulsum(coefs, rows, p: int) -> np.ndarray:
    """``sum_t coefs[t] * rows[t] mod p`` with int64 numpy arithmetic.

    Entries are in ``[0, p)`` with ``p <= 2^31``, so every product is below ``2^62``; it is reduced mod ``p``
    before it is added, so the running sum of ``m`` terms stays below ``m p < 2^63``. Zero coefficients are
    skipped. ``rows`` may be a list of views (no copy of the data).
    """
    shape = np.shape(rows[0]) if len(rows) else ()
    acc = np.zeros(shape, dtype=np.int64)
    tmp = np.empty(shape, dtype=np.int64)
    for c, row in zip(coefs, rows, strict=True):
        if c:
            np.multiply(row, int(c), out=tmp)
            np.remainder(tmp, p, out=tmp)
            acc += tmp
    np.remainder(acc, p, out=acc)
    return acc


class ReedSolomonGF(ReedSolomonBase):
    r"""Reed-Solomon gradient code over ``GF(p)`` with fixed-point gradients: exact recovery, bit for bit.

    The code of :class:`~gradcode.codes.reed_solomon.ReedSolomonBase` (Halbawi, Azizan, Salehi, Hassibi,
    ISIT 2018) over a finite field: worker ``i`` holds partitions ``i, ..., i+s (mod n)`` (``n_parts = n``) and has the
    node ``alpha_i = i + 1`` (distinct and nonzero, needs ``p > n``); ``B[i, j] = p_j(alpha_i)`` and the Lagrange
    weights at zero of the first ``n - s`` responders give ``a @ B = 1`` **in GF(p)**. ``B`` and the weights are int64
    arrays of field elements in ``[0, p)``; the identity holds modulo ``p``, not over the reals.

    Data path: a partial gradient entry ``x`` becomes ``round(x 2^f) mod p`` (``f = frac_bits``); messages are
    int64 in ``[0, p)``; :meth:`combine` lifts the field sum to the signed integer in ``(-p/2, p/2)`` and
    divides by ``2^f``. This is exact as long as ``n_parts * max_abs * 2^f < p / 2``, where ``max_abs`` is the
    largest ``|x|`` the caller promises (default: the largest value the bound allows); :meth:`encode` raises
    :class:`ConfigError` for a larger entry. The only error is the rounding to fixed point: every entry of the
    decoded sum is within ``n_parts * 2^-(f+1)`` of the float sum, and integer-valued partials round-trip
    bit-exactly. Arithmetic is int64 numpy with a reduction after every product (``p <= 2^31`` keeps products
    below ``2^62``); galois is used for the field itself (building ``B``, Lagrange weights).

    Decoding methods: ``exact`` and ``auto`` (the same here: a field has no least-squares approximation, so a
    set of fewer than ``n - s`` responders raises :class:`NotDecodableError`). ``optimal`` and ``one_step``
    raise :class:`ConfigError`. The residual is computed in the field: 0.0 when ``a @ B_F == 1`` in ``GF(p)``,
    else ``sqrt(#wrong coordinates / n_parts)``.

    Examples
    --------
    >>> import numpy as np, gradcode
    >>> n, s = 6, 2
    >>> code = gradcode.make_code("reed_solomon_gf", n, s, frac_bits=16)
    >>> B = code.B; B.dtype, code.support(0)
    (dtype('int64'), (0, 1, 2))
    >>> partials = np.arange(6.0).reshape(6, 1) - 2.5
    >>> messages = code.encode(partials)               # int64 field elements in [0, p)
    >>> F = [0, 1, 3, 5]
    >>> float(code.combine(messages[F], F)[0])         # bit-exact: 0.5 is a multiple of 2^-16
    0.0
    >>> a = code.decode(F)
    >>> GF = code.field                                 # galois.GF(p)
    >>> bool(np.all(GF(a) @ GF(B) == 1))                # a @ B = 1 holds in GF(p), not over the integers
    True
    """

    name = "reed_solomon_gf"
    description = "fixed-point gradients, MDS code over GF(p) via galois: exact to the bit (exact)"

    def __init__(self, n: int, s: int, *, p: int = 2**31 - 1, frac_bits: int = 16,
                 max_abs: float | None = None, **kwargs):
        self.p = check_int("p", p, low=3, high=2**31)
        self.frac_bits = check_int("frac_bits", frac_bits, low=0, high=52)
        self._max_abs_arg = max_abs
        super().__init__(n, s, **kwargs)

    # --- construction ---------------------------------------------------------------------------------------
    def _check(self) -> None:
        import galois  # lazy

        if not galois.is_prime(self.p):
            raise ConfigError(f"reed_solomon_gf: p must be a prime <= 2^31, got p = {self.p}; e.g. 2**31 - 1")
        if self.p <= self.n:
            raise ConfigError("reed_solomon_gf: p must exceed n (n distinct nonzero nodes), got "
                              f"p = {self.p}, n = {self.n}")
        half, n_parts, scale = (self.p - 1) // 2, self.n, 2.0**self.frac_bits
        if self._max_abs_arg is None:
            qmax = half // n_parts
            if qmax < 1:  # pragma: no cover - needs p < 2 n_parts + 1, excluded above only for p <= n
                raise ConfigError(f"reed_solomon_gf: field p = {self.p} too small for n_parts = {n_parts} partitions")
            self.max_abs = qmax / scale
        else:
            self.max_abs = check_float("max_abs", self._max_abs_arg, low=0.0, low_open=True)
            scaled = self.max_abs * scale      # inf for max_abs near 1e308: too large, as any value above the bound
            if not math.isfinite(scaled) or n_parts * math.ceil(scaled) > half:
                raise ConfigError(
                    f"reed_solomon_gf: n_parts * max_abs * 2^frac_bits = {n_parts} * {self.max_abs:g} * "
                    f"2^{self.frac_bits} must be below p/2 = {half}; accepted: max_abs <= "
                    f"{half // n_parts / scale:g}, or fewer frac_bits, or a larger field p (<= 2^31)"
                )

    def _node_values(self) -> np.ndarray:
        return np.arange(1, self.n + 1, dtype=np.int64)

    def _to_field(self, values):
        return self.field(values)

    def _from_field(self, elements) -> np.ndarray:
        return elements.view(np.ndarray).astype(np.int64)

    @property
    def field(self):
        """The galois field class ``GF(p)`` (imports galois)."""
        return _field(self.p)

    # --- fixed point ----------------------------------------------------------------------------------------
    def quantize(self, x) -> np.ndarray:
        """Floats -> int64 field elements ``round(x 2^frac_bits) mod p``; ConfigError if ``|x| > max_abs``."""
        x = np.asarray(x)
        if x.dtype.kind not in "biuf":
            raise ConfigError(f"reed_solomon_gf: partial gradients must be real numbers, got dtype {x.dtype}")
        x = x.astype(np.float64, copy=False)
        if not np.all(np.isfinite(x)):
            raise ConfigError("partials contain NaN or infinity")
        peak = float(np.abs(x).max()) if x.size else 0.0
        if peak > self.max_abs:
            raise ConfigError(
                f"reed_solomon_gf: |partial| = {peak:g} exceeds the fixed-point range max_abs = "
                f"{self.max_abs:g} (n_parts * max_abs * 2^frac_bits must stay below p/2 with n_parts = {self.n_parts}, "
                f"frac_bits = {self.frac_bits}, p = {self.p}); use fewer frac_bits (each one doubles the "
                "range) or a larger field p (<= 2^31)"
            )
        q = np.rint(x * 2.0**self.frac_bits).astype(np.int64)
        return np.remainder(q, self.p, out=q)

    def lift(self, v) -> np.ndarray:
        """Field elements -> floats: the signed representative in ``(-p/2, p/2)``, divided by ``2^f``."""
        v = np.asarray(v, dtype=np.int64)
        signed = np.where(v > self.p // 2, v - self.p, v)
        return signed / 2.0**self.frac_bits

    # --- encoding -------------------------------------------------------------------------------------------
    def encode(self, partials) -> np.ndarray:
        """``(n_parts, d)`` float partials -> ``(n, d)`` int64 messages in ``[0, p)``."""
        Q = self.quantize(self._check_partials(partials))
        Y = np.empty((self.n,) + Q.shape[1:], dtype=np.int64)
        for i, window in enumerate(self.windows):
            Y[i] = _mulsum(self.B[i, window], [Q[j] for j in window], self.p)
        return Y

    def encode_row(self, i: int, partials) -> np.ndarray:
        """Worker ``i``'s int64 message from the float partials of its support (``(s + 1, d)``)."""
        sup, partials = self._row_partials(i, partials)
        return _mulsum(self.B[i, sup], self.quantize(partials), self.p)

    # --- decoding -------------------------------------------------------------------------------------------
    def _decode(self, F: np.ndarray, method: str):
        if method in ("optimal", "one_step"):
            raise ConfigError(
                f"reed_solomon_gf decodes exactly over GF(p) or not at all: method {method!r} is not "
                "available; accepted: 'exact', 'auto'"
            )
        return super()._decode(F, "exact")

    def _residual_of(self, F: np.ndarray, a: np.ndarray) -> float:
        wrong = np.count_nonzero(_mulsum(a, self.B[F], self.p) != 1)
        return math.sqrt(wrong / self.n_parts)

    def combine(self, messages, responders, method: str = "auto") -> np.ndarray:
        """``(len(responders), d)`` int64 messages -> ``(d,)`` float64 sum of the partial gradients."""
        weights = self.decode(responders, method)
        messages = self._check_messages(messages, responders)
        w = weights[np.asarray(responders, dtype=np.int64)]
        return self.lift(_mulsum(w, messages, self.p))

    def _check_messages(self, messages, responders) -> np.ndarray:
        messages = self._one_row_each(np.asarray(messages), responders)
        if messages.dtype.kind not in "iuf":
            raise ConfigError(
                f"reed_solomon_gf messages must be int64 field elements, got dtype {messages.dtype}")
        rows = messages.reshape(len(responders), -1)
        if messages.dtype.kind == "f":
            bad = [int(r) for r, m in zip(responders, rows, strict=True) if not np.all(np.isfinite(m))]
            if bad:
                raise ConfigError(f"non-finite values (NaN or infinity) in the messages of workers {bad}")
            if not np.array_equal(messages, np.round(messages)):
                raise ConfigError("reed_solomon_gf messages must be integers (field elements in [0, p))")
        outside = [m.size and (m.min() < 0 or m.max() >= self.p) for m in rows]
        bad = [int(r) for r, out in zip(responders, outside, strict=True) if out]
        if bad:
            raise ConfigError(f"messages of workers {bad} are not field elements in [0, p = {self.p})")
        return messages.astype(np.int64, copy=False)
