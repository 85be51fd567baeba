"""The exceptions gradcode raises.

Bad input is a :class:`ConfigError` (a ``ValueError``) raised before any work starts, and its message says what was
wrong and what would be accepted. A decoder that cannot deliver the exact gradient raises
:class:`NotDecodableError`; one whose linear algebra lost too much precision raises :class:`IllConditionedError`.
Neither is ever swallowed into a silently wrong gradient.
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


def check_int(name: str, value, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an int, or raise :class:`ConfigError` naming ``name`` and the accepted range.

    One rule for numbers everywhere (:func:`check_float` too): a number must be given as a number. A string
    (``"3"``), a bool (``true`` is not 1) or a float (``2.0``) is refused, never converted.
    """
    if not _is_number(value) or not (isinstance(value, int) or _is_integral(value)):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if low is not None and value < low:
        raise ConfigError(f"{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise ConfigError(f"{name} must be <= {high}, got {value}")
    return value


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


def _is_integral(value) -> bool:
    # numpy integers are not Python ints but are fine.
    try:
        import numpy as np

        return isinstance(value, np.integer)
    except ImportError:  # pragma: no cover
        return False


def _is_number(value) -> bool:
    """A real number given as one: Python's or numpy's ints and floats, not a string, not a bool."""
    # numpy registers its scalar types with the ``numbers`` ABCs; ``np.bool_`` is not registered, Python's bool is
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
