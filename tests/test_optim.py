"""The optimizers (sgd, momentum, nesterov) as the shared driver runs them, against their closed form on a quadratic.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_driver

from gradcode.errors import ConfigError
from gradcode.optim import Optimizer
from gradcode.workloads import Workload


class Quadratic(Workload):
    """F(w) = (1/2) sum_i a_i w_i^2, cut into partitions by sample count (g_j = |P_j|/N * a * w)."""

    name = "quadratic"

    def __init__(self, a=(1.0, 0.3, 2.5)):
        self.a = np.asarray(a, dtype=float)
        self.dim, self.n_samples, self.lr, self.seed = len(self.a), 12, 0.1, 0

    def init_params(self):
        return np.array([1.0, -2.0, 0.5])

    def gradients(self, w, t, parts, n_parts, batch=None):
        sizes = self.partition_sizes(n_parts)[list(parts)]
        return (sizes / self.n_samples)[:, None] * (self.a * w)[None, :]

    def loss(self, w):
        return 0.5 * float(self.a @ (w * w))




def closed_form(name, a, lr, mu, w0, T):
    """w_T for F = (a/2) w^2 per coordinate: the linear recurrence of (w, v) raised to the power T."""
    out = []
    for ai, wi in zip(a, w0, strict=True):
        if name == "sgd":
            M = np.array([[1 - lr * ai, 0.0], [0.0, 0.0]])
        elif name == "momentum":      # v' = mu v + a w ; w' = w - lr v'
            M = np.array([[1 - lr * ai, -lr * mu], [ai, mu]])
        else:                         # nesterov: w' = w - lr (a w + mu v') = (1 - lr a (1 + mu)) w - lr mu^2 v
            M = np.array([[1 - lr * ai * (1 + mu), -lr * mu * mu], [ai, mu]])
        out.append((np.linalg.matrix_power(M, T) @ np.array([wi, 0.0]))[0])
    return np.array(out)


@pytest.mark.parametrize("name", ["sgd", "momentum", "nesterov"])
@pytest.mark.parametrize("T", [1, 2, 17])
def test_optimizers_match_their_closed_form_on_a_quadratic(name, T):
    q = Quadratic()
    records, cluster = run_driver(q, T, optimizer=name, momentum=0.7, lr=0.3)
    expected = closed_form(name, q.a, 0.3, 0.7, q.init_params(), T)
    np.testing.assert_allclose(cluster.w, expected, rtol=1e-12, atol=1e-14)
    # the record's loss is the loss after the step the optimizer took
    assert records[-1]["loss"] == pytest.approx(q.loss(expected), rel=1e-12)


def test_the_three_optimizers_differ_and_momentum_is_faster_on_an_ill_conditioned_quadratic():
    q = Quadratic(a=(1.0, 0.01, 0.5))
    final = {name: run_driver(q, 60, optimizer=name, momentum=0.9, lr=0.9)[0][-1]["loss"]
             for name in ("sgd", "momentum", "nesterov")}
    assert len(set(final.values())) == 3
    assert final["momentum"] < final["sgd"] and final["nesterov"] < final["sgd"]


def test_optimizer_rejects_bad_settings():
    with pytest.raises(ConfigError, match="sgd, momentum, nesterov"):
        Optimizer("adam")
    with pytest.raises(ConfigError, match=r"\[0, 1\)"):
        Optimizer("momentum", momentum=1.0)
