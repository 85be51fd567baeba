"""Decoding is never silently wrong, and bad input to the codes' API is a ConfigError, never a numpy error.

- cyclic_mds decodes contiguous straggler bursts exactly (its zeros spread round the circle, golden node order) and
  can be built for every ``0 <= s < n`` (real ``g`` from real quadratic factors);
- ``method="auto"`` falling back to least squares says ``method == "fallback"``, warns once per responder set
  (:class:`gradcode.DecodeFallbackWarning`), and a run counts those decodes (``fallback_decodes``) in its summary
  and its report;
- seeds, responders, messages and partial gradients are checked by one checker each (a ConfigError naming them).

The full sweep (every ``(n, s)`` up to ``n = 100``) is a probe, not a test; here a representative subset.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradcode
from gradcode import ConfigError, DecodeFallbackWarning, make_code, make_delay, make_scheme, make_workload, simulate
from gradcode.clusters.records import summarize


def burst_sets(n: int, s: int, starts) -> list[list[int]]:
    return [sorted(set(range(n)) - {(a + t) % n for t in range(s)}) for a in starts]


def relative_error(code, F, rng) -> float:
    partials = rng.standard_normal((code.n_parts, 3))
    truth = partials.sum(axis=0)
    got = code.combine(code.encode(partials)[F], F)
    return float(np.linalg.norm(got - truth) / np.linalg.norm(truth))


# --- bursts decode exactly --------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, s", [(60, 14), (64, 17), (80, 19), (90, 45), (100, 25)])
def test_cyclic_mds_decodes_bursts_exactly_with_auto(n, s):
    # with the natural node order: errors 5e-6 .. 0.4 here, with no error and no warning
    code = make_code("cyclic_mds", n, s)
    rng = np.random.default_rng(n + s)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DecodeFallbackWarning)
        for F in burst_sets(n, s, (0, n // 3, n - 1)):
            assert code.decoding(F).method == "exact"
            assert relative_error(code, F, rng) < 1e-9


def test_golden_order_is_the_same_kind_of_code():
    # Same support, rows sum to s + 1, real iff n - s odd, any n - s rows independent: docs/references.md
    n, s = 11, 4
    golden, natural = make_code("cyclic_mds", n, s), make_code("cyclic_mds", n, s, node_order="natural")
    assert golden.stride == 4 and natural.stride == 1
    assert (golden.B != 0).tolist() == (natural.B != 0).tolist()
    assert golden.B.dtype == natural.B.dtype == np.float64
    np.testing.assert_allclose(golden.B.sum(axis=1), s + 1)
    rng = np.random.default_rng(0)
    for _ in range(30):
        F = sorted(rng.choice(n, n - s, replace=False).tolist())
        assert np.linalg.matrix_rank(golden.B[F]) == n - s
    with pytest.raises(ConfigError, match="node_order.*golden.*natural"):
        make_code("cyclic_mds", n, s, node_order="spiral")


# --- every (n, s) builds ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("node_order", ["golden", "natural"])
@pytest.mark.parametrize("n, s", [(33, 32), (40, 31), (41, 36), (64, 49), (99, 98), (100, 79)])
def test_cyclic_mds_builds_for_large_s(n, s, node_order):
    # not "g(x) is not real" (np.poly's imaginary round-off grows with s)
    code = make_code("cyclic_mds", n, s, node_order=node_order)
    assert code.B.dtype == np.float64
    assert all(len(code.support(i)) == s + 1 for i in range(n))
    np.testing.assert_allclose(code.B.sum(axis=1), s + 1)


# --- the fallback is audible ---------------------------------------------------------------------------------
def test_auto_fallback_warns_once_per_responder_set():
    assert issubclass(DecodeFallbackWarning, UserWarning)
    code = make_code("cyclic_mds", 8, 3)
    with pytest.warns(DecodeFallbackWarning, match=r"cyclic_mds\(n=8, s=3\).*4 responders.*residual") as caught:
        dec = code.decoding([0, 1, 2, 3])
    assert len(caught) == 1
    assert dec.method == "fallback" and dec.residual > code.tol
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert code.decoding([3, 2, 1, 0]).method == "fallback"           # the same set: no second warning
        code.combine(np.ones((4, 2)), np.array([0, 1, 2, 3]))
        code.decoding([0, 1, 2, 3], "optimal")                             # asked for least squares: no warning
        make_code("expander", 8, 1).decoding([0, 1, 2])                    # an approximate code: no warning
        assert code.decoding(list(range(5))).method == "exact"
    with pytest.warns(DecodeFallbackWarning):
        code.decoding([1, 2, 3, 4])                                        # another set warns again


def test_fallback_decodes_are_counted_in_the_summary_and_the_report(tmp_path):
    # Workers 0-2 never answer: an exact code with s = 2 takes the 3 that do and falls back every iteration.
    scheme = make_scheme("coded", n=6, code="cyclic_mds", s=2)
    delay = make_delay("unresponsive", base="constant", workers=[0, 1, 2])
    workload = make_workload("least_squares", n_samples=60, dim=3, seed=0)
    with pytest.warns(DecodeFallbackWarning):
        res = simulate(scheme, delay, workload, iterations=3, seed=0)
    assert [r["method"] for r in res.records] == ["fallback"] * 3
    assert res.summary["fallback_decodes"] == 3
    ok = simulate(make_scheme("coded", n=6, code="cyclic_mds", s=2), make_delay("constant"), workload,
                  iterations=2, seed=0)
    assert ok.summary["fallback_decodes"] == 0
    assert summarize([dict(r, method="optimal") for r in res.records])["fallback_decodes"] == 0


def test_report_shows_fallback_decodes(tmp_path):
    from gradcode.output.report import COLUMNS, RunData, render, run_row

    rec = {"scheme": "coded", "iteration": 0, "start": 0.0, "end": 1.0, "ideal_end": 1.0, "responders": [3, 4, 5],
           "load": [3.0] * 6, "messages": 3, "computed": 9.0, "wasted": 0.0, "residual": 0.5, "method": "fallback",
           "loss": None, "grad_error": None}
    meta = {"scheme": "coded/cyclic_mds s=2", "delay": "c", "seed": 0, "cluster": "sim", "scheme_name": "coded",
            "run_id": "r0"}
    run = RunData(meta, [rec, dict(rec, iteration=1, method="exact", residual=0.0)], True, tmp_path)
    row = run_row(run)
    assert "fallback_decodes" in COLUMNS and row["fallback_decodes"] == 1
    text = render(tmp_path, {}, [run], [row], [])
    assert "FELL BACK to least squares" in text and "r0 (1)" in text


# --- one seed checker ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [-1, 1.5, "abc", None, True])
def test_bad_seeds_are_config_errors(seed):
    with pytest.raises(ConfigError, match="seed"):
        make_code("cyclic_repetition", 6, 2, seed=seed)
    with pytest.raises(ConfigError, match="seed"):
        make_scheme("coded", n=6, code="cyclic_repetition", s=2, seed=seed)
    with pytest.raises(ConfigError, match="seed"):
        make_workload("least_squares", n_samples=20, dim=2, seed=seed)
    with pytest.raises(ConfigError, match="seed"):
        make_delay("pareto").sample(seed, 0, 3)


# --- responders, messages, partial gradients --------------------------------------------------------------------
@pytest.mark.parametrize("responders, match", [
    (np.array([0, 2**63], dtype=np.uint64), "out of range: \\[9223372036854775808\\]"),
    ([np.uint64(2**63), 1], "out of range: \\[9223372036854775808\\]"),
    ([0, 2**64], "out of range: \\[18446744073709551616\\]"),
    ([0, -1], "out of range: \\[-1\\]"),
    ([0, "1"], "integer worker indices"),
    ([0.0, 1.0], "integer worker indices"),
    ([1, 1], "duplicates"),
])
def test_bad_responders_are_config_errors(responders, match):
    code = make_code("cyclic_mds", 6, 2)
    with pytest.raises(ConfigError, match=match):
        code.decode(responders)
    with pytest.raises(ConfigError, match=match):
        make_scheme("coded", n=6, code=code).combine(np.ones((len(responders), 2)), responders, None)


def test_strings_as_messages_or_partials_are_config_errors():
    code = make_code("cyclic_mds", 6, 2)
    with pytest.raises(ConfigError, match="partials must be numeric"):
        code.encode([["a"]] * 6)
    with pytest.raises(ConfigError, match="partials must be numeric"):
        code.encode_row(0, [["a"]] * 3)
    with pytest.raises(ConfigError, match="messages must be numeric"):
        code.combine([["a"]] * 4, [0, 1, 2, 3])
    with pytest.raises(ConfigError, match="messages must be numeric"):
        make_scheme("sync", n=2).combine([["a"], ["b"]], [0, 1], None)
    coded = make_scheme("coded", n=6, code=code)
    for responders in (5, {0, 1, 2, 3}):   # not a sequence / no order: which message is whose?
        with pytest.raises(ConfigError, match="responders"):
            coded.combine(np.ones((4, 2)), responders, None)
    assert gradcode.DecodeFallbackWarning is DecodeFallbackWarning


# --- a residual below tol is not a gradient within tol --------------------------------------------------------
@pytest.mark.parametrize("n, s, F", [
    (90, 58, [0, 3, 7, 10, 12, 17, 19, 26, 28, 29, 32, 34, 36, 38, 39, 41, 44, 48, 51, 56, 57, 63, 65, 67, 69, 72,
              73, 76, 80, 81, 84, 87]),
    (100, 55, [2, 5, 6, 7, 12, 16, 17, 18, 19, 22, 23, 28, 30, 33, 34, 35, 36, 39, 42, 45, 46, 47, 49, 50, 52, 57,
               58, 59, 60, 67, 70, 72, 73, 76, 77, 78, 79, 80, 83, 85, 86, 93, 94, 95, 96]),
])
def test_auto_never_returns_a_gradient_off_by_more_than_tol_silently(n, s, F):
    # cases where a residual 9e-9 / 5e-9 < tol = 1e-8 would pass as "exact" with the gradient off by 1.2e-8 / 1.5e-8
    code = make_code("cyclic_mds", n, s)
    partials = np.random.default_rng(0).standard_normal((code.n_parts, 3))
    truth = partials.sum(axis=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DecodeFallbackWarning)
        got = code.combine(code.encode(partials)[F], F)
        dec = code.decoding(F)
    error = float(np.linalg.norm(got - truth) / np.linalg.norm(truth))
    assert error <= code.tol or (dec.method == "fallback" and len(caught) == 1), (error, dec)
    if dec.method == "exact":
        assert dec.residual * gradcode.codes._base.ERROR_MARGIN <= code.tol


def test_a_code_too_large_for_memory_is_refused_before_it_is_built():
    """n = 2^70 (found by benchmarks/probes/probe_reliability.py) is a ConfigError at once, not a build for ever."""
    import time

    from gradcode import ConfigError
    from gradcode.codes import make_code

    tick = time.perf_counter()
    with pytest.raises(ConfigError, match=r"n x n encoding matrix at n = 1180591620717411303424 .* use fewer workers"):
        make_code("cyclic_mds", n=2**70, s=1)
    assert time.perf_counter() - tick < 5
