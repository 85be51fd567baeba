"""Exact gradient codes.

Every decodable responder set gives the true sum; B matches independent constructions; ill-conditioning is
detected, never silent.
"""

from __future__ import annotations

import functools
import itertools
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradcode
from gradcode import IllConditionedError, NotDecodableError
from gradcode.codes.cyclic import golden_stride

# auto's fallback warns (tested in test_codes_decode.py); here it would only be noise
pytestmark = pytest.mark.filterwarnings("ignore::gradcode.errors.DecodeFallbackWarning")

EXACT = ["uncoded", "fractional_repetition", "cyclic_repetition", "cyclic_mds", "reed_solomon",
         "reed_solomon_gf"]


def valid_s(name: str, n: int) -> list[int]:
    if name == "uncoded":
        return [0]
    if name == "fractional_repetition":
        return [s for s in range(n) if n % (s + 1) == 0]
    return list(range(n))


@functools.cache
def build(name: str, n: int, s: int, seed: int = 0, **params):
    return gradcode.make_code(name, n, s, seed=seed, **params)


def make_partials(code, rng: np.random.Generator, d: int = 3) -> np.ndarray:
    if code.name == "reed_solomon_gf":  # integers: the field code must then be bit-exact
        return rng.integers(-50, 51, size=(code.n_parts, d)).astype(float)
    return rng.standard_normal((code.n_parts, d))


def assert_decodes(code, F, partials) -> None:
    """combine(encode(P)[F], F) == P.sum(0): bit-exact for the field code, to round-off for the others."""
    F = list(F)
    estimate = code.combine(code.encode(partials)[F], F)
    truth = partials.sum(axis=0)
    assert code.residual(F) <= code.tol
    if code.name == "reed_solomon_gf":
        np.testing.assert_array_equal(estimate, truth)
    else:
        scale = np.abs(partials).sum(axis=0).max()
        np.testing.assert_allclose(estimate, truth, rtol=0, atol=1e-8 * scale)


def bursts(n: int, s: int):
    """Every contiguous (cyclic) burst of s stragglers, as the sorted responder set."""
    for b in range(n):
        yield np.setdiff1d(np.arange(n), (b + np.arange(s)) % n)


code_params = st.sampled_from(EXACT).flatmap(
    lambda name: st.integers(1, 24).flatmap(
        lambda n: st.tuples(st.just(name), st.just(n), st.sampled_from(valid_s(name, n))))
)


# --- every decodable set decodes to the true sum ------------------------------------------------------------
@settings(max_examples=120, deadline=None)
@given(params=code_params, data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_random_responders_decode(params, data, seed):
    name, n, s = params
    code = build(name, n, s)
    order = data.draw(st.permutations(range(n)))  # responders in arrival order, not sorted
    size = data.draw(st.integers(n - s, n))
    assert_decodes(code, order[:size], make_partials(code, np.random.default_rng(seed)))


@settings(max_examples=60, deadline=None)
@given(params=code_params, seed=st.integers(0, 2**32 - 1))
def test_every_burst_decodes(params, seed):
    name, n, s = params
    code = build(name, n, s)
    partials = make_partials(code, np.random.default_rng(seed))
    for F in bursts(n, s):
        assert_decodes(code, F, partials)
        assert code.decoding(F).method == "exact"


# --- fractional repetition: coverage, not count -------------------------------------------------------------
fr_params = st.integers(1, 24).flatmap(
    lambda n: st.tuples(st.just(n), st.sampled_from(valid_s("fractional_repetition", n))))


@settings(max_examples=60, deadline=None)
@given(params=fr_params, data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_fractional_repetition_covering_sets_decode(params, data, seed):
    n, s = params
    code = build("fractional_repetition", n, s)
    g = s + 1
    F = []
    for group in range(n // g):  # a nonempty subset of every group: usually far more than s stragglers
        members = list(range(group * g, (group + 1) * g))
        F += data.draw(st.lists(st.sampled_from(members), min_size=1, unique=True))
    F = data.draw(st.permutations(F))
    assert_decodes(code, F, make_partials(code, np.random.default_rng(seed)))
    weights = code.decode(F)
    # One responder per group with weight 1, no algebra.
    assert sorted(weights[weights != 0].tolist()) == [1.0] * (n // g)
    assert sorted(np.flatnonzero(weights) // g) == list(range(n // g))


@settings(max_examples=60, deadline=None)
@given(params=fr_params, data=st.data())
def test_fractional_repetition_uncovered_group_raises(params, data):
    n, s = params
    code = build("fractional_repetition", n, s)
    g = s + 1
    hole = data.draw(st.integers(0, n // g - 1))
    F = [i for i in range(n) if i // g != hole and data.draw(st.booleans(), label=f"keep {i}")]
    with pytest.raises(NotDecodableError) as err:
        code.decode(F, "exact")
    workers = list(range(hole * g, (hole + 1) * g))
    assert f"{hole} (workers {workers})" in str(err.value)
    assert hole * g in err.value.missing
    assert err.value.needed >= len(F) + 1
    assert code.decoding(F, "auto").method == "fallback"


# --- B against independent constructions --------------------------------------------------------------------
def fold_mod_xn_minus_1(coeffs: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=complex)
    for m, c in enumerate(coeffs):
        out[m % n] += c
    return out


@pytest.mark.parametrize("node_order", ["golden", "natural"])
@pytest.mark.parametrize("n, s", [(5, 2), (9, 4), (7, 2), (10, 3), (6, 0), (41, 36)])
def test_cyclic_mds_matches_polynomial_product(n, s, node_order):
    code = build("cyclic_mds", n, s, node_order=node_order)
    q = code.stride
    assert q == (1 if node_order == "natural" else golden_stride(n))
    beta = np.exp(2j * np.pi * q / n)
    J = range((n - s + 1) // 2, (n + s - 1) // 2 + 1)  # real case (n - s odd), docs/references.md#gradient-codes
    g = np.array([1.0 + 0j])
    for j in J:
        g = np.polynomial.polynomial.polymul(g, [-(beta**j), 1.0])
    rows = np.array([fold_mod_xn_minus_1(np.r_[np.zeros(i), g], n) for i in range(n)])
    rows *= (s + 1) / rows[0].sum()  # the documented normalization: rows sum to s + 1
    assert code.B.dtype == np.float64
    scale = np.abs(rows).max()  # (41, 36) natural: the complex product's round-off is ~1e-11 of its largest entry
    assert np.abs(rows.imag).max() < 1e-9 * scale
    np.testing.assert_allclose(code.B, rows.real, atol=1e-9 * scale)


def test_cyclic_mds_n5_s2_explicit():
    # the paper's B: g(x) = (x - w^2)(x - w^3) = x^2 - 2 cos(4 pi / 5) x + 1, scaled to sum to 3.
    code = build("cyclic_mds", 5, 2, node_order="natural")
    g = np.array([1.0, -2 * np.cos(4 * np.pi / 5), 1.0])
    g *= 3 / g.sum()
    expected = np.array([np.roll(np.r_[g, 0.0, 0.0], i) for i in range(5)])
    np.testing.assert_allclose(code.B, expected, atol=1e-14)


@pytest.mark.parametrize("node_order", ["golden", "natural"])
@pytest.mark.parametrize("n, s", [(6, 2), (8, 4), (10, 3), (7, 3), (12, 1)])
def test_cyclic_mds_codewords_vanish_on_J_and_any_n_minus_s_rows_are_independent(n, s, node_order):
    code = build("cyclic_mds", n, s, node_order=node_order)
    assert code.is_complex == ((n - s) % 2 == 0)
    J = code.exponents
    assert len(J) == s and 0 not in J and list(J) == list(range(J[0], J[0] + s))
    beta = np.exp(2j * np.pi * code.stride / n)  # a primitive n-th root: gcd(stride, n) = 1
    for j in J:
        np.testing.assert_allclose(code.B @ beta ** (j * np.arange(n)), 0, atol=1e-10)
    for F in itertools.combinations(range(n), n - s):
        assert np.linalg.matrix_rank(code.B[list(F)]) == n - s
    for i in range(n):
        assert code.support(i) == tuple(sorted((i + np.arange(s + 1)) % n))


@pytest.mark.parametrize("node_order", ["golden", "natural"])
@pytest.mark.parametrize("n, s", [(7, 3), (12, 5), (9, 1)])
def test_reed_solomon_B_and_lagrange_weights(n, s, node_order):
    code = build("reed_solomon", n, s, node_order=node_order)
    alpha = code.nodes
    assert len(set(np.round(alpha, 12))) == n and np.allclose(np.abs(alpha), 1)
    window = [set((i + np.arange(s + 1)) % n) for i in range(n)]
    for i, j in itertools.product(range(n), range(n)):
        if j in window[i]:
            others = [alpha[l] for l in range(n) if j not in window[l]]
            expected = np.prod([(alpha[i] - a) / (-a) for a in others])
        else:
            expected = 0
        assert abs(code.B[i, j] - expected) < 1e-10
    rng = np.random.default_rng(n)
    for _ in range(10):
        F = np.sort(rng.choice(n, n - s, replace=False))
        a = code.decode(F, "exact")[F]
        ref, *_ = np.linalg.lstsq(code.B[F].T, np.ones(n), rcond=None)
        np.testing.assert_allclose(a, ref, atol=1e-9)


def test_reed_solomon_uses_only_first_n_minus_s_responders():
    code = build("reed_solomon", 10, 3)
    F = [0, 1, 2, 4, 5, 6, 7, 8, 9]
    a = code.decode(F, "exact")
    assert np.count_nonzero(a) == 7 and a[9] == 0 and a[8] == 0


def test_reed_solomon_gf_B_and_weights_match_python_ints():
    n, s = 7, 2
    code = build("reed_solomon_gf", n, s)
    p = code.p
    alpha = [i + 1 for i in range(n)]
    for i, j in itertools.product(range(n), range(n)):
        holders = {(j - t) % n for t in range(s + 1)}
        expected = 0
        if i in holders:
            expected = 1
            for l in range(n):
                if l not in holders:
                    expected = expected * (alpha[i] - alpha[l]) * pow(-alpha[l], -1, p) % p
        assert int(code.B[i, j]) == expected
    F = [0, 2, 3, 5, 6]
    a = code.decode(F)
    for i in F:
        expected = 1
        for l in F:
            if l != i:
                expected = expected * alpha[l] * pow(alpha[l] - alpha[i], -1, p) % p
        assert int(a[i]) == expected
    total = [sum(int(a[i]) * int(code.B[i, j]) for i in F) % p for j in range(n)]
    assert total == [1] * n
    assert code.residual(F) == 0.0


def test_cyclic_repetition_structure_and_seed():
    n, s = 9, 3
    code = build("cyclic_repetition", n, s, seed=1)
    np.testing.assert_allclose(code.H.sum(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(code.H @ code.B.T, 0, atol=1e-10)
    assert np.all(np.diag(code.B) == 1)
    for i in range(n):
        assert code.support(i) == tuple(sorted((i + np.arange(s + 1)) % n))
    same = gradcode.make_code("cyclic_repetition", n, s, seed=1)
    other = gradcode.make_code("cyclic_repetition", n, s, seed=2)
    np.testing.assert_array_equal(code.B, same.B)
    assert not np.allclose(code.B, other.B)


def test_uncoded_and_fractional_repetition_matrices():
    np.testing.assert_array_equal(build("uncoded", 5, 0).B, np.eye(5))
    B = build("fractional_repetition", 6, 1).B
    np.testing.assert_array_equal(B, np.kron(np.eye(3), np.ones((2, 2))))


@pytest.mark.parametrize("name", EXACT)
def test_same_seed_same_B(name):
    n, s = (6, 0) if name == "uncoded" else (6, 2)
    first, second = (gradcode.make_code(name, n, s, seed=3) for _ in range(2))
    np.testing.assert_array_equal(first.B, second.B)


# --- auto falls back, caching -------------------------------------------------------------------------------
@pytest.mark.parametrize("name, n, s", [
    ("uncoded", 6, 0), ("fractional_repetition", 6, 2), ("cyclic_repetition", 8, 3), ("cyclic_mds", 8, 3),
    ("cyclic_mds", 9, 3), ("reed_solomon", 8, 3),
])
def test_auto_falls_back_to_least_squares_on_non_decodable_sets(name, n, s):
    code = build(name, n, s)
    F = [3, 4, 5] if name == "fractional_repetition" else list(range(1, n - s))  # n - s - 1 responders
    with pytest.raises(NotDecodableError) as err:
        code.decode(F, "exact")
    assert err.value.needed is not None and err.value.missing
    d = code.decoding(F, "auto")
    assert d.method == "fallback"
    assert d.residual > code.tol
    recomputed = np.linalg.norm(code.B[F].T @ d.weights[F] - 1) / np.sqrt(code.n_parts)
    assert d.residual == pytest.approx(recomputed)
    assert np.all(d.weights[np.setdiff1d(np.arange(n), F)] == 0)
    assert not code.is_decodable(F)


def test_reed_solomon_gf_has_no_approximate_decode():
    code = build("reed_solomon_gf", 8, 3)
    with pytest.raises(NotDecodableError):
        code.decode([0, 1, 2, 3], "auto")
    assert code.decoding([0, 1, 2, 3, 4], "auto").method == "exact"


@pytest.mark.parametrize("name", EXACT)
def test_decodings_are_cached(name):
    n, s = (12, 0) if name == "uncoded" else (12, 2)
    code = gradcode.make_code(name, n, s)
    F = list(range(n - s))
    first = code.decoding(F)
    assert code.decoding(F) is first
    assert code.decoding(list(reversed(F))) is first  # the same set in another order
    assert code.decoding(np.array(F)) is first
    start = time.perf_counter()
    for _ in range(2000):
        code.decoding(F)
    assert time.perf_counter() - start < 0.5


# --- the finite-field code: bit-exact and bounded -----------------------------------------------------------
@pytest.fixture(scope="module")
def gf64():
    return gradcode.make_code("reed_solomon_gf", 64, 8, frac_bits=16)


def test_reed_solomon_gf_integer_partials_round_trip_bit_exactly(gf64):
    rng = np.random.default_rng(5)
    partials = rng.integers(-200, 201, size=(64, 500)).astype(float)
    messages = gf64.encode(partials)
    assert messages.dtype == np.int64 and messages.min() >= 0 and messages.max() < gf64.p
    sets = [rng.permutation(64)[: rng.integers(56, 65)] for _ in range(20)] + list(bursts(64, 8))
    for F in sets:
        np.testing.assert_array_equal(gf64.combine(messages[F], F), partials.sum(axis=0))


def test_reed_solomon_gf_float_partials_within_documented_bound(gf64):
    rng = np.random.default_rng(6)
    partials = rng.standard_normal((64, 2000)) * 10
    messages = gf64.encode(partials)
    bound = gf64.n_parts * 2.0 ** -(gf64.frac_bits + 1)
    for F in [rng.permutation(64)[:56] for _ in range(5)]:
        err = np.abs(gf64.combine(messages[F], F) - partials.sum(axis=0)).max()
        assert err <= bound
        assert err > 0  # floats are quantized: the bound is not vacuous


def test_reed_solomon_gf_encode_row_matches_encode(gf64):
    rng = np.random.default_rng(7)
    partials = rng.standard_normal((64, 10))
    messages = gf64.encode(partials)
    for i in (0, 17, 63):
        np.testing.assert_array_equal(gf64.encode_row(i, partials[list(gf64.support(i))]), messages[i])


def test_reed_solomon_gf_overflow_raises(gf64):
    partials = np.zeros((64, 3))
    partials[5, 1] = 2 * gf64.max_abs
    with pytest.raises(gradcode.ConfigError, match="max_abs"):
        gf64.encode(partials)
    partials[5, 1] = gf64.max_abs  # the bound itself is accepted and exact
    np.testing.assert_array_equal(gf64.combine(gf64.encode(partials)[:56], list(range(56))), partials.sum(0))


@pytest.mark.parametrize("name", [n for n in EXACT if n != "reed_solomon_gf"])
def test_encode_row_matches_encode(name):
    n, s = (7, 0) if name == "uncoded" else (8, 3) if name == "fractional_repetition" else (7, 3)
    code = build(name, n, s)
    partials = np.random.default_rng(1).standard_normal((code.n_parts, 4))
    for i in range(n):
        row = code.encode_row(i, partials[list(code.support(i))])
        np.testing.assert_allclose(row, code.encode(partials)[i])


# --- conditioning is detected, never silent -----------------------------------------------------------------
@pytest.mark.parametrize("name, params", [
    ("cyclic_mds", {}), ("reed_solomon", {}), ("reed_solomon", {"node_order": "natural"}),
    ("cyclic_repetition", {}),
])
def test_bursts_at_n80_decode_or_raise_ill_conditioned(name, params):
    n, s = 80, 19
    code = build(name, n, s, **params)
    rng = np.random.default_rng(8)
    partials = rng.standard_normal((n, 4))
    messages = code.encode(partials)
    truth = partials.sum(axis=0)
    ill = 0
    for F in bursts(n, s):
        try:
            d = code.decoding(F, "exact")
        except IllConditionedError as err:
            ill += 1
            assert err.residual > code.tol
            auto = code.decoding(F, "auto")
            assert auto.method == "fallback"
            recomputed = np.linalg.norm(code.B[F].T @ auto.weights[F] - 1) / np.sqrt(code.n_parts)
            assert auto.residual == pytest.approx(recomputed, rel=1e-6, abs=1e-12)
            continue
        assert d.residual <= code.tol and d.method == "exact"
        estimate = code.combine(messages[F], F, "exact")
        assert np.linalg.norm(estimate - truth) <= 1e-7 * np.linalg.norm(truth)
    if params.get("node_order") == "natural":
        assert ill > 0  # the documented failure of natural node order: the detection path is exercised
