"""The exceptions gradcode raises.

Bad input is a :class:`ConfigError` (a ``ValueError``) raised before any work starts, and its message says what was
wrong and what would be accepted. A decoder that cannot deliver the exact gradient raises
:class:`NotDecodableError`; one whose linear algebra lost too much precision raises :class:`IllConditionedError`.
Neither is ever swallowed into a silently wrong gradient: where ``method="auto"`` falls back to least squares instead,
it issues a :class:`DecodeFallbackWarning` and the decoding's ``method`` is ``"fallback"``.
"""

from __future__ import annotations

import numbers


class GradcodeError(Exception):
    """Base class of every error gradcode raises on purpose."""


class ConfigError(GradcodeError, ValueError):
    """Bad input: a parameter, a spec key, a responder set or a message that cannot be accepted."""


class NotDecodableError(GradcodeError):
    """The responders cannot give the exact sum of the partial gradients.

    ``needed`` is how many responders an exact decode needs (at least), ``missing`` a set of workers whose answers
    would make the set decodable (when the code can name one).
    """

    def __init__(self, message: str, *, needed: int | None = None, missing: tuple[int, ...] = ()):
        super().__init__(message)
        self.needed = needed
        self.missing = missing


class IllConditionedError(NotDecodableError):
    """An exact decode whose residual ``||B_F^T a - 1|| / sqrt(n_parts)`` exceeds the tolerance (float round-off)."""

    def __init__(self, message: str, *, residual: float):
        super().__init__(message)
        self.residual = residual


class DecodeFallbackWarning(UserWarning):
    """``method="auto"`` could not decode an exact code exactly (too few responders, or an ill-conditioned set)
    and returned least-squares weights whose residual exceeds the tolerance: the gradient is approximate.

    Issued once per responder set and code object; a run counts these decodes in its summary
    (``fallback_decodes``). Silence it with :func:`warnings.filterwarnings` or decode with ``method="optimal"``.
    """


def check_int(name: str, value, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an int, or raise :class:`ConfigError` naming ``name`` and the accepted range.

    One rule for numbers everywhere (:func:`check_float` too): a number must be given as a number. A string
    (``"3"``), a bool (``true`` is not 1) or a float (``2.0``) is refused, never converted.
    """
    if not _is_int(value):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if low is not None and value < low:
        raise ConfigError(f"{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise ConfigError(f"{name} must be <= {high}, got {value}")
    return value


def check_seed(value, name: str = "seed") -> int:
    """The one check of every seed in gradcode (codes, schemes, delays, workloads, runs): an integer >= 0."""
    return check_int(name, value, low=0)


def check_float(name: str, value, *, low: float | None = None, high: float | None = None,
                low_open: bool = False) -> float:
    """Return ``value`` as a finite float in range, or raise :class:`ConfigError` naming ``name``.

    Ints and floats (numpy's too) are accepted; a string (``"1.5"``) or a bool is not, as in :func:`check_int`.
    """
    if not _is_number(value):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    x = float(value)
    if x != x or x in (float("inf"), float("-inf")):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    if low is not None and (x <= low if low_open else x < low):
        raise ConfigError(f"{name} must be {'>' if low_open else '>='} {low}, got {x}")
    if high is not None and x > high:
        raise ConfigError(f"{name} must be <= {high}, got {x}")
    return x


def check_workers(values, n: int, name: str = "responders"):
    """``values`` as an int64 array of distinct worker indices in ``[0, n)`` (order kept), or a
    :class:`ConfigError` naming ``name``: not a 1-D sequence of integers, out of range, or repeated."""
    import numpy as np

    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise ConfigError(f"{name} must be a sequence of worker indices, got {type(values).__name__}")
    if isinstance(values, (list, tuple)) and set(map(type, values)) == {int}:
        # the common case (the drivers pass lists of Python ints), checked at C speed: no bool, no float
        try:
            arr = np.array(values, dtype=np.int64)
        except OverflowError:
            raise ConfigError(f"{name} out of range: {[v for v in values if not 0 <= v < n]}; workers are "
                              f"0..{n - 1}") from None
    elif isinstance(values, (list, tuple)) and all(_is_int(v) for v in values):
        # Range-check as Python ints: numpy would turn [uint64(2**63), 1] into floats and 2**64 into objects.
        bad = [int(v) for v in values if not 0 <= int(v) < n]
        if bad:
            raise ConfigError(f"{name} out of range: {bad}; workers are 0..{n - 1}")
        arr = np.array([int(v) for v in values], dtype=np.int64)
    else:
        try:
            arr = np.asarray(values)
        except ValueError:  # ragged nested sequences
            raise ConfigError(f"{name} must be a 1-D sequence of integer worker indices") from None
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ConfigError(f"{name} must be a 1-D sequence of integer worker indices, got {arr.dtype} with shape "
                          f"{arr.shape}")
    # Range check in the array's own dtype: a uint64 beyond 2^63 must not wrap to a negative int64 first.
    outside = (arr >= n) if arr.dtype.kind == "u" else (arr < 0) | (arr >= n)
    if outside.any():
        raise ConfigError(f"{name} out of range: {arr[outside].tolist()}; workers are 0..{n - 1}")
    arr = arr.astype(np.int64)
    ordered = np.sort(arr)
    repeated = ordered[1:] == ordered[:-1]
    if repeated.any():
        raise ConfigError(f"{name} contain duplicates: {np.unique(ordered[1:][repeated]).tolist()}")
    return arr


def check_numeric(name: str, values):
    """``values`` as a numeric (integer, float or complex) numpy array, or a :class:`ConfigError` naming ``name``
    (strings, objects or ragged rows would otherwise fail deep inside numpy)."""
    import numpy as np

    try:
        arr = np.asarray(values)
    except ValueError:  # ragged nested sequences
        raise ConfigError(f"{name} must be a numeric array (rows of equal length)") from None
    if arr.dtype.kind not in "iufc":
        raise ConfigError(f"{name} must be numeric (integers, floats or complex numbers), got dtype {arr.dtype}")
    return arr


# numpy registers its scalar types with the ``numbers`` ABCs (``np.bool_`` is not registered; Python's bool is, and
# is refused: ``true`` is not 1)
def _is_int(value) -> bool:
    """An integer given as one: Python's or numpy's, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value) -> bool:
    """A real number given as one: Python's or numpy's ints and floats, not a string, not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
