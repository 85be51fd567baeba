"""Every bad input to a code raises ConfigError or NotDecodableError, and the message names the problem."""

from __future__ import annotations

import numpy as np
import pytest

import gradcode
from gradcode import ConfigError, NotDecodableError

ALL = list(gradcode.list_codes())
EXACT = ["uncoded", "fractional_repetition", "cyclic_repetition", "cyclic_mds", "reed_solomon",
         "reed_solomon_gf"]


def valid(name: str) -> tuple[int, int]:
    """A small valid (n, s) for every registered code.

    (6, 2) suits them all: (s+1) | n for fractional repetition and ErasureHead, n (s+1) even for the expander,
    (s+1) | 2n and 2n/(s+1) > s+1 for the graph code. Uncoded takes s = 0 only.
    """
    return (6, 0) if name == "uncoded" else (6, 2)


def code_and_messages(name: str, d: int = 3):
    n, s = valid(name)
    code = gradcode.make_code(name, n, s, seed=0)
    partials = np.random.default_rng(0).uniform(-1, 1, size=(code.n_parts, d))
    return code, code.encode(partials)


# --- construction -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("n, s", [(3, 3), (3, 5), (1, 1)])
def test_s_not_below_n(name, n, s):
    with pytest.raises(ConfigError, match=r"\bs\b.*\bn\b|\bn\b.*\bs\b"):
        gradcode.make_code(name, n, s)


@pytest.mark.parametrize("name", ALL)
def test_negative_s(name):
    with pytest.raises(ConfigError, match=r"\bs must be >= 0"):
        gradcode.make_code(name, 6, -1)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("n", [0, -3])
def test_n_below_one(name, n):
    with pytest.raises(ConfigError, match=r"\bn must be >= 1"):
        gradcode.make_code(name, n, 0)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("n", [6.0, 6.5, "6", None, True])
def test_non_integer_n(name, n):
    with pytest.raises(ConfigError, match=r"\bn must be an integer"):
        gradcode.make_code(name, n, 0)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("s", [1.0, "1", None])
def test_non_integer_s(name, s):
    with pytest.raises(ConfigError, match=r"\bs must be an integer"):
        gradcode.make_code(name, 6, s)


@pytest.mark.parametrize("n, s, suggestions", [
    (7, 2, ["n = 6", "n = 9"]), (10, 3, ["n = 8", "n = 12"]), (2, 2, []), (5, 1, ["n = 4", "n = 6"]),
    (3, 1, ["n = 2", "n = 4"]), (2, 1, None), (3, 2, None),
])
def test_fractional_repetition_needs_s_plus_1_dividing_n(n, s, suggestions):
    if s >= n:
        with pytest.raises(ConfigError, match="smaller than n"):
            gradcode.make_code("fractional_repetition", n, s)
        return
    if suggestions is None:  # valid: builds, n_parts = n
        assert gradcode.make_code("fractional_repetition", n, s).n_parts == n
        return
    with pytest.raises(ConfigError, match=r"\(s \+ 1\) to divide n") as err:
        gradcode.make_code("fractional_repetition", n, s)
    for text in suggestions:
        assert text in str(err.value)


def test_fractional_repetition_suggestion_is_valid():
    with pytest.raises(ConfigError) as err:
        gradcode.make_code("fractional_repetition", 4, 2)
    assert "n = 3" in str(err.value) and "n = 6" in str(err.value)
    gradcode.make_code("fractional_repetition", 3, 2)
    gradcode.make_code("fractional_repetition", 6, 2)


def test_uncoded_accepts_only_s_zero():
    with pytest.raises(ConfigError, match="s must be 0"):
        gradcode.make_code("uncoded", 6, 1)


def test_unknown_code_lists_valid_names():
    with pytest.raises(ConfigError, match="unknown code 'cyclic_mdss'") as err:
        gradcode.make_code("cyclic_mdss", 6, 2)
    for name in ALL:
        assert name in str(err.value)


def test_reed_solomon_bad_node_order():
    with pytest.raises(ConfigError, match="node_order.*golden.*natural"):
        gradcode.make_code("reed_solomon", 6, 2, node_order="random")


@pytest.mark.parametrize("params, pattern", [
    ({"p": 2**31 - 3}, "p must be a prime"),
    ({"p": 2**32 + 15}, "p must be <= 2147483648"),
    ({"p": 5}, "p must exceed n"),
    ({"frac_bits": -1}, "frac_bits must be >= 0"),
    ({"frac_bits": 1.5}, "frac_bits must be an integer"),
    ({"max_abs": 0.0}, "max_abs must be > 0"),
    ({"max_abs": float("nan")}, "max_abs must be a finite number"),
    ({"max_abs": 1e9}, r"n_parts \* max_abs \* 2\^frac_bits .* below p/2"),
])
def test_reed_solomon_gf_bad_parameters(params, pattern):
    with pytest.raises(ConfigError, match=pattern):
        gradcode.make_code("reed_solomon_gf", 6, 2, **params)


@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("params, pattern", [({"tol": 0.0}, "tol must be > 0"),
                                             ({"tol": "x"}, "tol must be a number"),
                                             ({"cache_size": 0}, "cache_size must be >= 1")])
def test_bad_common_parameters(name, params, pattern):
    n, s = valid(name)
    with pytest.raises(ConfigError, match=pattern):
        gradcode.make_code(name, n, s, **params)


# --- responders ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("method", ["auto", "exact", "optimal"])
@pytest.mark.parametrize("responders, pattern", [
    ([0, 1, 6], r"out of range: \[6\]; workers are 0\.\.5"),
    ([-1, 0, 1], r"out of range: \[-1\]"),
    ([0, 1, 1, 2], r"duplicates: \[1\]"),
    ([0.0, 1.0, 2.0], "integer worker indices"),
    ([0.5, 1, 2], "integer worker indices"),
    (np.array([0.0, 1.0, 2.0]), "integer worker indices"),
    (["0", "1"], "integer worker indices"),
    ("012", "sequence of worker indices"),
    (3, "sequence of worker indices"),
    ([[0, 1], [2, 3]], r"1-D.*shape \(2, 2\)"),
    (np.array([[0, 1], [2, 3]]), r"1-D.*shape \(2, 2\)"),
    ([True, False], "integer worker indices"),
    ([0, 1, 2 ** 64], r"out of range: \[18446744073709551616\]"),
])
def test_bad_responders(name, method, responders, pattern):
    code, _ = code_and_messages(name)
    if name == "reed_solomon_gf" and method == "optimal":
        method = "auto"
    with pytest.raises(ConfigError, match=pattern):
        code.decode(responders, method)


@pytest.mark.parametrize("name", ALL)
def test_bad_responders_are_rejected_even_after_a_valid_set_was_cached(name):
    code, messages = code_and_messages(name)
    code.decode([0, 1, 2, 3, 4, 5])
    for bad in ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [True, 1, 2, 3, 4, 5]):
        with pytest.raises(ConfigError):
            code.decode(bad)
        with pytest.raises(ConfigError):
            code.combine(messages, bad)


@pytest.mark.parametrize("name", ALL)
def test_unknown_decode_method(name):
    code, messages = code_and_messages(name)
    with pytest.raises(ConfigError, match="unknown decoding method 'fastest'.*accepted: auto, exact"):
        code.decode([0, 1, 2, 3], "fastest")
    with pytest.raises(ConfigError, match="unknown decoding method 'lsq'.*accepted: auto, exact, optimal"):
        code.combine(messages[:4], [0, 1, 2, 3], "lsq")


@pytest.mark.parametrize("name", ["optimal", "one_step"])
def test_reed_solomon_gf_has_no_approximate_methods(name):
    code, _ = code_and_messages("reed_solomon_gf")
    with pytest.raises(ConfigError, match=f"method '{name}' is not available; accepted: 'exact', 'auto'"):
        code.decode([0, 1, 2, 3], name)


@pytest.mark.parametrize("name", EXACT)
def test_too_few_responders_for_exact(name):
    code, _ = code_and_messages(name)
    F = [1] if name == "fractional_repetition" else [0, 1, 2]
    with pytest.raises(NotDecodableError) as err:
        code.decode(F, "exact")
    assert err.value.needed is not None and err.value.needed > len(F)
    assert err.value.missing and not set(err.value.missing) & set(F)
    expected = "no responder in group" if name == "fractional_repetition" else f"n - s = {code.n - code.s}"
    assert expected in str(err.value)


# --- messages and partials ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("cut", ["fewer", "more", "3-D"])
def test_messages_shape_must_match_responders(name, cut):
    code, messages = code_and_messages(name)
    F = [0, 2, 3, 4, 5] if name != "uncoded" else list(range(6))
    bad = {"fewer": messages[F][:-1], "more": messages[[*F, 1]], "3-D": messages[F][:, :, None]}[cut]
    with pytest.raises(ConfigError, match=rf"one row per responder: expected shape \({len(F)}, d\)"):
        code.combine(bad, F)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_messages_name_the_worker(name, value):
    code, messages = code_and_messages(name)
    F = [5, 0, 2, 3, 4] if name != "uncoded" else [5, 0, 1, 2, 3, 4]
    bad = messages[F].astype(np.result_type(messages.dtype, float))
    bad[2, 1] = value  # the message of worker F[2]
    with pytest.raises(ConfigError, match=rf"non-finite .* workers \[{F[2]}\]"):
        code.combine(bad, F)


@pytest.mark.parametrize("name", ALL)
def test_bad_partials(name):
    code, _ = code_and_messages(name)
    with pytest.raises(ConfigError, match=rf"shape \(n_parts, d\) = \({code.n_parts}, d\)"):
        code.encode(np.zeros((code.n_parts + 1, 2)))
    with pytest.raises(ConfigError, match=r"shape \(n_parts, d\)"):
        code.encode(np.zeros((code.n_parts, 2, 2)))
    bad = np.zeros((code.n_parts, 2))
    bad[1, 1] = np.nan
    with pytest.raises(ConfigError, match="NaN or infinity"):
        code.encode(bad)


@pytest.mark.parametrize("name", EXACT)
def test_encode_row_wrong_support_size(name):
    code, _ = code_and_messages(name)
    sup = code.support(1)
    with pytest.raises(ConfigError, match=rf"worker 1 holds partitions .*expected {len(sup)} partial"):
        code.encode_row(1, np.zeros((len(sup) + 1, 2)))
    with pytest.raises(ConfigError, match="worker must be <= 5"):
        code.encode_row(6, np.zeros((len(sup), 2)))


def test_reed_solomon_gf_fixed_point_overflow():
    code = gradcode.make_code("reed_solomon_gf", 8, 2, frac_bits=20, max_abs=100.0)
    partials = np.zeros((8, 4))
    partials[3, 2] = -100.5
    pattern = r"\|partial\| = 100\.5 exceeds the fixed-point range max_abs = 100"
    with pytest.raises(ConfigError, match=pattern) as e:
        code.encode(partials)
    assert "fewer frac_bits" in str(e.value) and "larger field" in str(e.value)
    with pytest.raises(ConfigError, match="exceeds the fixed-point range"):
        code.encode_row(0, np.full((3, 2), 1e6))
    default = gradcode.make_code("reed_solomon_gf", 8, 2)
    assert 8 * default.max_abs * 2**default.frac_bits < default.p / 2
    with pytest.raises(ConfigError, match="fixed-point range"):
        default.encode(np.full((8, 1), 2 * default.max_abs))


def test_reed_solomon_gf_messages_must_be_field_elements():
    code = gradcode.make_code("reed_solomon_gf", 6, 2)
    messages = code.encode(np.ones((6, 2)))
    F = [0, 1, 2, 3]
    bad = messages[F].copy()
    bad[1, 0] = code.p
    with pytest.raises(ConfigError, match=r"messages of workers \[1\] are not field elements"):
        code.combine(bad, F)
    with pytest.raises(ConfigError, match="must be integers"):
        code.combine(messages[F] + 0.5, F)
    with pytest.raises(ConfigError, match="int64 field elements"):
        code.combine(messages[F].astype(complex), F)
    with pytest.raises(ConfigError, match="real numbers"):
        code.encode(np.ones((6, 2), dtype=complex))
