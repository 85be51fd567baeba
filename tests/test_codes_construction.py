"""The shared constructions: cyclic windows, the Lagrange helpers (complex and GF(p) alike), the group layout and
the graph code's peeling decoder as a function of an edge list."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gradcode
from gradcode.codes.cyclic import CyclicSupportCode
from gradcode.codes.graph import peeling_weights
from gradcode.codes.lagrange import vanishing_values, weights_at_zero
from gradcode.codes.repetition import ErasureHead, FractionalRepetition

CYCLIC = [("cyclic_repetition", {}), ("cyclic_mds", {}), ("reed_solomon", {}), ("reed_solomon_gf", {})]


@pytest.mark.parametrize(("name", "params"), CYCLIC)
@pytest.mark.parametrize(("n", "s"), [(7, 0), (7, 2), (8, 3), (6, 5)])
def test_cyclic_codes_live_on_the_windows(name, params, n, s):
    code = gradcode.make_code(name, n, s, seed=2, **params)
    assert isinstance(code, CyclicSupportCode)
    # cyclic MDS decodes from some sets of fewer than n - s (workers {0, 2} at n = 4, s = 1); the others
    # never do (a random H; Reed-Solomon's decoder refuses fewer)
    assert code.early_decoding == (name == "cyclic_mds")
    assert code.windows.tolist() == [[(i + t) % n for t in range(s + 1)] for i in range(n)]
    M = code.mask
    assert M.sum(axis=0).tolist() == [s + 1] * n and M.sum(axis=1).tolist() == [s + 1] * n
    assert not np.any(code.B[~M])  # nothing outside the windows
    assert all(set(code.support(i)) <= set(code.windows[i].tolist()) for i in range(n))


def test_cyclic_support_subclass_builds_B_from_window_coefficients():
    class Ramp(CyclicSupportCode):
        name = "ramp"

        def _window_coefficients(self, rng):
            return np.tile(np.arange(1.0, self.s + 2), (self.n, 1))

    code = Ramp(5, 2)
    assert code.B[3].tolist() == [3.0, 0.0, 0.0, 1.0, 2.0]  # worker 3 holds 3, 4, 0 at places 0, 1, 2
    assert code.B[:, 0].tolist() == [1.0, 0.0, 0.0, 3.0, 2.0]


def test_lagrange_weights_interpolate_at_zero_over_the_complex_numbers():
    rng = np.random.default_rng(0)
    x = np.exp(2j * np.pi * np.arange(7) / 7)
    a = weights_at_zero(x)
    for degree in range(7):
        coefs = rng.standard_normal(degree + 1)
        f = np.polynomial.polynomial.polyval(x, coefs)
        assert abs(a @ f - coefs[0]) < 1e-12
    p = vanishing_values(x[:3], x[3:])
    assert np.allclose(vanishing_values(x[3:], x[3:]), 0) and vanishing_values(np.zeros(1, complex), x)[0] == 1
    assert np.allclose(p, [np.prod([1 - xi / z for z in x[3:]]) for xi in x[:3]])


def test_lagrange_helpers_are_exact_in_a_prime_field():
    galois = pytest.importorskip("galois")
    p = 10007
    GF = galois.GF(p)
    nodes = [3, 5, 11, 20]
    a = weights_at_zero(GF(nodes))
    for i, xi in enumerate(nodes):
        expected = 1
        for xl in nodes:
            if xl != xi:
                expected = expected * xl * pow(xl - xi, -1, p) % p
        assert int(a[i]) == expected
    values = GF([(2 + 7 * x + x * x) % p for x in nodes])  # f(x) = 2 + 7x + x^2, degree < 4 nodes
    assert int(np.sum(a * values)) == 2
    assert vanishing_values(GF(nodes[:2]), GF(nodes[2:])).tolist() == [
        (1 - x * pow(11, -1, p)) * (1 - x * pow(20, -1, p)) % p for x in nodes[:2]]
    assert vanishing_values(GF(nodes), GF([])).tolist() == [1] * len(nodes)


def test_erasurehead_is_fractional_repetition_decoded_approximately():
    fr, eh = gradcode.make_code("fractional_repetition", 8, 1), gradcode.make_code("erasurehead", 8, 1)
    assert isinstance(eh, FractionalRepetition) and isinstance(eh, ErasureHead)
    np.testing.assert_array_equal(fr.B, eh.B)
    assert fr.exact and not eh.exact
    F = [1, 2, 3, 6]  # group {4, 5} missing
    with pytest.raises(gradcode.NotDecodableError, match="no responder in group"):
        fr.decode(F, "exact")
    assert eh.decode(F).tolist() == [0, 1, 1, 0, 0, 0, 1, 0]
    F = [0, 3, 5, 7]
    assert fr.decode(F).tolist() == eh.decode(F).tolist() == [1, 0, 0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize("edges", [
    [(0, 1), (1, 2), (2, 0)],
    [(0, 1), (1, 2), (2, 3)],
    [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (5, 6)],
    [(4, 2), (2, 9), (9, 4), (4, 7)],
])
def test_peeling_weights_are_least_squares(edges):
    vertices = sorted(set(itertools.chain.from_iterable(edges)))
    index = {v: c for c, v in enumerate(vertices)}
    B = np.zeros((len(edges), len(vertices)))
    for e, (u, v) in enumerate(edges):
        B[e, index[u]] = B[e, index[v]] = 1.0
    a = peeling_weights(edges)
    ref, *_ = np.linalg.lstsq(B.T, np.ones(len(vertices)), rcond=None)
    np.testing.assert_allclose(B.T @ a, B.T @ ref, atol=1e-12)
    assert peeling_weights([]).shape == (0,)
