"""Numbers formatted by magnitude: a mean to the figures its confidence interval warrants, noise shown as noise."""

from __future__ import annotations

import pytest

from gradcode.errors import ConfigError
from gradcode.output.numfmt import fmt_ci, fmt_value


@pytest.mark.parametrize("mean, half, text", [
    (1.234, 0.05, "1.23 ± 0.05"),            # a typical mean and CI
    (1.234, 0.0123, "1.234 ± 0.012"),         # a half-width starting with 1 keeps two figures
    (1.43, 0.2, "1.4 ± 0.2"),
    (-3.2, 0.15, "-3.20 ± 0.15"),             # trailing zeros are figures too
    (0.9996, 0.004, "1.000 ± 0.004"),         # rounding carries over
    (12345, 230, "12300 ± 200"),              # an interval wider than 1 rounds the integer part
    (2.345e-5, 3e-7, "2.35e-05 ± 3e-07"),     # small: scientific, same last place
    (2e5, 300, "2.000e+05 ± 3e+02"),
    (6.0, 1e-12, "6.00000 ± 1e-12"),          # round-off of a deterministic run: at most 6 figures
    (1.0, 0.0, "1 ± 0"),
])
def test_the_mean_has_the_figures_its_interval_warrants(mean, half, text):
    assert fmt_ci(mean, half) == text


@pytest.mark.parametrize("mean, half, text", [
    (2.017e-14, 2.485e-14, "2e-14 ± 2e-14"),   # a decoding residual: noise, one figure
    (-0.4, 0.5, "-0.4 ± 0.5"),
    (0.0, 3.0, "0 ± 3"),
    (3.2, 8.4, "3 ± 8"),
])
def test_a_mean_the_interval_cannot_tell_from_zero_reads_as_zero(mean, half, text):
    assert fmt_ci(mean, half) == text


def test_two_means_that_differ_beyond_their_intervals_read_differently():
    # 4 significant figures of the old report hid nothing here, but 2 would: the interval decides
    assert fmt_ci(1.2345, 0.0004) != fmt_ci(1.2351, 0.0004)


@pytest.mark.parametrize("mean, half, text", [
    (None, 0.1, "-"), (1.5, None, "1.5"), (3.0, float("nan"), "3 ± nan"), (float("inf"), 1.0, "inf ± 1"),
])
def test_missing_and_non_finite(mean, half, text):
    assert fmt_ci(mean, half) == text


@pytest.mark.parametrize("x, text", [
    (None, "-"), (0, "0"), (3, "3"), (1.0, "1"), (0.1234567, "0.1235"), (12.3456, "12.35"), (12345.6, "12346"),
    (123456, "1.235e+05"), (1e-4, "1.000e-04"), (-2.5e-7, "-2.500e-07"), (float("inf"), "inf"),
])
def test_fmt_value_by_magnitude(x, text):
    assert fmt_value(x) == text


@pytest.mark.parametrize("call", [
    lambda: fmt_value("1.5"), lambda: fmt_value(True), lambda: fmt_ci("a", 0.1), lambda: fmt_ci(1.0, "0.1"),
    lambda: fmt_ci(1.0, -0.1), lambda: fmt_ci(1.0, [0.1]),
])
def test_bad_input_is_a_config_error(call):
    with pytest.raises(ConfigError, match="must be"):
        call()
