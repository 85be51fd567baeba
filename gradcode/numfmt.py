"""Numbers for reports, formatted by magnitude (placeholder; the helper "regimes" writes the real module).

- :func:`fmt_value`: a number without a confidence interval, to 4 significant figures (at least 3 are always shown);
- :func:`fmt_ci`: a mean and the half-width of its confidence interval, the mean to as many digits as the interval
  warrants (``1.234 ± 0.05`` -> ``1.23 ± 0.05``); a mean smaller than its half-width cannot be told from zero
  (``2.017e-14 ± 2.485e-14`` -> ``≈0 (±2e-14)``).
"""

from __future__ import annotations

import math

SIGNIFICANT = 4        # digits of a value without a CI
MAX_SIGNIFICANT = 6    # a very narrow CI does not make a table cell 15 digits long


def _special(x) -> str | None:
    if x is None:
        return "-"
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    return None


def _fixed_range(x: float) -> bool:
    return 1e-3 <= abs(x) < 1e6


def fmt_value(x) -> str:
    """``x`` to 4 significant figures; scientific notation outside ``[1e-3, 1e6)``."""
    special = _special(x)
    if special is not None:
        return special
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) < 1e6:
        return str(x)
    x = float(x)
    if _fixed_range(x):
        decimals = max(0, SIGNIFICANT - 1 - math.floor(math.log10(abs(x))))
        return f"{x:.{decimals}f}" if decimals else f"{round(x):d}"
    return f"{x:.{SIGNIFICANT - 1}e}"


def _half_digits(half: float) -> tuple[int, int]:
    """The half-width's significant figures (2 when its leading digit is 1 or 2, whose rounding to one figure would
    move it by up to a third; else 1) and its last digit's power of 10."""
    exp = math.floor(math.log10(half))
    figures = 2 if f"{half:.1e}"[0] in "12" else 1
    return figures, exp - figures + 1


def fmt_ci(mean, half) -> str:
    """``mean ± half`` with the digits the CI warrants; ``≈0 (±half)`` when the CI covers zero by more than the mean."""
    if half is None or _special(mean) not in (None, "0") or not math.isfinite(float(half)):
        return fmt_value(mean)
    mean, half = float(mean), abs(float(half))
    if half == 0:
        return f"{fmt_value(mean)} ± 0"
    figures, last = _half_digits(half)
    shown_half = _fixed(half, last) if _fixed_range(half) else f"{half:.{figures - 1}e}"
    if abs(mean) < half:
        return f"≈0 (±{shown_half})"
    digits = min(MAX_SIGNIFICANT, math.floor(math.log10(abs(mean))) - last + 1)
    if _fixed_range(mean):
        return f"{_fixed(mean, math.floor(math.log10(abs(mean))) - digits + 1)} ± {shown_half}"
    return f"{mean:.{digits - 1}e} ± {shown_half}"


def _fixed(x: float, last: int) -> str:
    """``x`` rounded to the digit of ``10**last``, in fixed notation."""
    decimals = max(0, -last)
    return f"{round(x, -last):.{decimals}f}" if decimals else f"{round(x, -last):.0f}"
