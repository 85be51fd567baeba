"""The communication-efficient gradient code (Ye and Abbe): load s + m, messages of d / m, any n - s decode."""

import numpy as np
import pytest

from gradcode import simulate
from gradcode.codes.comm_efficient import CommEfficientCode
from gradcode.errors import ConfigError
from gradcode.schemes import make_scheme


@pytest.mark.parametrize("n, s, m", [(4, 1, 2), (8, 2, 1), (8, 2, 3), (12, 3, 3)])
def test_any_n_minus_s_decode_exactly(n, s, m):
    code, rng = CommEfficientCode(n, s, m), np.random.default_rng(n + s + m)
    g = rng.normal(size=(n, 6 * m))
    messages = np.stack([code.message(i, g[list(code.support[i])]) for i in range(n)])
    assert messages.shape == (n, 6) and all(len(p) == s + m for p in code.support)
    for _ in range(10):
        F = sorted(rng.choice(n, n - s, replace=False).tolist())
        estimate, residual = code.decode(messages[F], F)
        assert residual < 1e-11
        np.testing.assert_allclose(estimate, g.sum(axis=0), rtol=1e-9, atol=1e-9)


def test_pinned_coefficients_and_errors():
    """Worker 0's coefficients at n = 4, s = 1, m = 2 (Chebyshev nodes cos((2i + 1) pi / 8)): a change of the
    construction shows here first."""
    np.testing.assert_allclose(CommEfficientCode(4, 1, 2).C[0], [[0.541196100146, 0.707106781187],
                                                                 [1.306562964876, 0.707106781187],
                                                                 [1.847759065023, 0.0], [0.0, 0.0]], atol=1e-11)
    with pytest.raises(ConfigError, match="s \\+ m = 5 exceeds n = 4"):
        CommEfficientCode(4, 2, 3)
    with pytest.raises(ConfigError, match="m = 3 must divide the model size d = 10"):
        make_scheme("comm_efficient", n=6, s=1, m=3).message_size(10)
    with pytest.raises(ConfigError, match="cannot decode"):
        CommEfficientCode(6, 2, 2).decoder([0, 1, 2])


def test_scheme_trains_and_sends_a_share():
    scheme = make_scheme("comm_efficient", n=6, s=2, m=2)
    assert scheme.message_bytes(100) == 8 * 50 and scheme.plan(0).load[0] == 4
    run = simulate(scheme, {"name": "shifted_exponential", "a": 1.0, "mu": 0.5},
                   {"name": "least_squares", "n_samples": 60, "dim": 4}, iterations=5, seed=0)
    assert all(r["residual"] < 1e-11 and len(r["responders"]) == 4 for r in run.records)
    assert all(r["grad_error"] < 1e-9 for r in run.records if r["grad_error"] is not None)
