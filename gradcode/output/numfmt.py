"""Numbers for reports and figures, formatted by magnitude.

- :func:`fmt_value`: a lone number, 4 significant figures in the usual range, a plain integer from 1000 to 99999,
  scientific notation below 1e-3 and from 1e5;
- :func:`fmt_ci`: a mean and the half-width of its confidence interval, the mean shown to the decimal place the
  interval warrants (the half-width rounded to one significant figure, two when its first digit is 1, as the usual
  rule for uncertainties has it), so ``1.234 ± 0.05`` reads ``1.23 ± 0.05`` and two schemes that differ in the
  third figure are not shown as equal. A mean that the interval does not tell from zero (``|mean| <= half``), e.g.
  a residual of ``2.017e-14 ± 2.485e-14``, is noise: both get one figure, ``2e-14 ± 2e-14`` (a time of
  ``3.2 ± 8.4`` reads ``3 ± 8``: the interval says how little the mean says, without hiding it).
"""

from __future__ import annotations

import math
import numbers

from ..errors import ConfigError

MAX_FIGURES = 6   # a tiny interval (a deterministic run's round-off) does not print 15 digits
FIXED = (1e-3, 1e5)   # |x| in [1e-3, 1e5): fixed notation, else scientific


def _number(x, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ConfigError(f"{what} must be a real number or None, not {x!r} ({type(x).__name__})")
    return float(x)


def _fixed(x: float) -> bool:
    return x == 0 or FIXED[0] <= abs(x) < FIXED[1]


def _exponent(x: float) -> int:
    """The power of ten of ``x``'s first significant digit."""
    return math.floor(math.log10(abs(x)))


def _at_place(x: float, place: int, fixed: bool) -> str:
    """``x`` rounded to the digit at ``10**place``: fixed notation, or scientific with as many figures."""
    if fixed:
        return f"{round(x, -place):.{max(0, -place)}f}"
    rounded = float(f"{x:.{max(0, _exponent(x) - place)}e}") if x else 0.0
    return f"{rounded:.{max(0, _exponent(rounded or 1) - place)}e}"


def fmt_value(x) -> str:
    """One number by magnitude (``-`` for None): ``0.1235``, ``12.35``, ``12346``, ``1.235e+05``, ``1.000e-04``."""
    if x is None:
        return "-"
    x = _number(x, "a value to format")
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if not _fixed(x):
        return f"{x:.3e}"
    return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _half_figures(half: float) -> tuple[float, int]:
    """The half-width rounded as shown, and the power of ten of its last digit shown."""
    two = float(f"{half:.1e}")
    if f"{two:.1e}".startswith("1"):   # 0.012 keeps its 2: 0.01 would be a fifth off
        return two, _exponent(two) - 1
    one = float(f"{half:.0e}")
    return one, _exponent(one)


def fmt_ci(mean, half) -> str:
    """``mean ± half`` with the figures the interval warrants (see the module docstring); ``half`` None: the mean
    alone (:func:`fmt_value`); mean None: ``-``."""
    if mean is None:
        return "-"
    mean = _number(mean, "the mean")
    if half is None:
        return fmt_value(mean)
    half = _number(half, "the confidence half-width")
    if half < 0:
        raise ConfigError(f"the confidence half-width must be >= 0 (or None), not {half!r}")
    if not (math.isfinite(mean) and math.isfinite(half)) or half == 0:
        return f"{fmt_value(mean)} ± {fmt_value(half)}"
    if abs(mean) <= half:
        place = _exponent(half)
        return f"{_at_place(mean, place, _fixed(half))} ± {_at_place(half, place, _fixed(half))}"
    shown, place = _half_figures(half)
    place = max(place, _exponent(mean) - MAX_FIGURES + 1)
    fixed = _fixed(mean)
    half_text = _at_place(shown, place, fixed) if shown >= 10.0 ** place else _at_place(half, _exponent(half), False)
    return f"{_at_place(mean, place, fixed)} ± {half_text}"
