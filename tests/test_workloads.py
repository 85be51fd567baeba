"""Tests of gradcode.workloads: gradients, partitions, mini-batch determinism, convergence, validation."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers import run_driver
from hypothesis import given, settings
from hypothesis import strategies as st

import gradcode.workloads as wl
from gradcode.errors import ConfigError
from gradcode.workloads import Workload, list_workloads, make_workload
from gradcode.workloads._sampling import _stream_keys

SMALL = {
    "least_squares": dict(n_samples=103, dim=6, noise=0.3, condition=10.0, seed=3),
    "logistic": dict(n_samples=97, dim=5, reg=1e-2, seed=4),
    "softmax_digits": dict(reg=1e-2, seed=5),
    "mlp": dict(hidden=[8, 5], activation="tanh", reg=1e-2, seed=6),
}


@pytest.fixture(scope="module", params=list(SMALL))
def workload(request) -> Workload:
    return make_workload(request.param, **SMALL[request.param])


@pytest.fixture(scope="module")
def digits() -> Workload:
    return make_workload("softmax_digits")


def random_w(wk: Workload, seed: int = 0, scale: float = 0.5) -> np.ndarray:
    return scale * np.random.default_rng(seed).standard_normal(wk.dim)


# --- gradient correctness -----------------------------------------------------------------------------------
def test_full_gradient_matches_finite_differences(workload):
    w = random_w(workload, 1)
    g = workload.full_gradient(w)
    assert g.shape == (workload.dim,) and g.dtype == np.float64
    rng = np.random.default_rng(2)
    h = 1e-6
    if workload.dim <= 10:
        directions = np.eye(workload.dim)
    else:
        directions = rng.standard_normal((6, workload.dim))
    for v in directions:
        fd = (workload.loss(w + h * v) - workload.loss(w - h * v)) / (2 * h)
        assert fd == pytest.approx(float(g @ v), rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("n_parts", [1, 2, 7, 10, 13, 50])
def test_full_batch_partials_sum_to_full_gradient(workload, n_parts):
    w = random_w(workload, n_parts)
    G = workload.gradients(w, t=3, parts=range(n_parts), n_parts=n_parts)
    assert G.shape == (n_parts, workload.dim)
    np.testing.assert_allclose(G.sum(axis=0), workload.full_gradient(w), rtol=1e-10, atol=1e-12)


def test_full_batch_with_k_equal_n_samples():
    ls = make_workload("least_squares", n_samples=40, dim=3)
    w = random_w(ls)
    G = ls.gradients(w, 0, range(40), n_parts=40)
    np.testing.assert_allclose(G.sum(axis=0), ls.full_gradient(w), rtol=1e-12, atol=1e-14)
    # each partition is one sample: g_j = (1/N) x_j (x_j^T w - y_j)
    np.testing.assert_allclose(G, ls.X * (ls.X @ w - ls.y)[:, None] / 40, rtol=1e-12, atol=1e-15)


def test_full_batch_matches_direct_formula_any_order_and_chunking(monkeypatch):
    ls = make_workload("least_squares", n_samples=101, dim=4, seed=1)
    w = random_w(ls)
    n_parts = 9
    bounds = ls.partition_bounds(n_parts)
    direct = np.stack([
        ls.X[bounds[j]:bounds[j + 1]].T @ (ls.X[bounds[j]:bounds[j + 1]] @ w - ls.y[bounds[j]:bounds[j + 1]])
        / ls.n_samples for j in range(n_parts)
    ])
    parts = [5, 2, 8, 2, 0]
    np.testing.assert_allclose(ls.gradients(w, 0, parts, n_parts), direct[parts], rtol=1e-12, atol=1e-15)
    # force the chunked path (one partition per chunk) and non-adjacent gathers
    monkeypatch.setattr(wl._base, "_CHUNK_ELEMENTS", 8)
    np.testing.assert_allclose(ls.gradients(w, 0, parts, n_parts), direct[parts], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ls.gradients(w, 0, range(n_parts), n_parts), direct, rtol=1e-12, atol=1e-15)


def _manual_minibatch(wk: Workload, w, idx_row, size):
    """(|P_j|/N) (mean over the batch of grad l + reg w), written out per workload."""
    Xb, yb = wk.X[idx_row], wk.y[idx_row]
    b = len(idx_row)
    if wk.name == "least_squares":
        g = Xb.T @ (Xb @ w - yb) / b
    elif wk.name == "logistic":
        g = Xb.T @ (1 / (1 + np.exp(-(Xb @ w))) - yb) / b
    elif wk.name == "mlp":      # central differences of the batch's mean loss (independent of backpropagation)
        def batch_loss(v):
            Z = wk.scores(v, Xb)
            zmax = Z.max(axis=1)
            return np.mean(zmax + np.log(np.exp(Z - zmax[:, None]).sum(axis=1)) - Z[np.arange(b), yb])
        h, eye = 1e-6, np.eye(len(w))
        g = np.array([(batch_loss(w + h * e) - batch_loss(w - h * e)) / (2 * h) for e in eye])
    else:
        W = w.reshape(10, -1)
        Z = Xb @ W.T
        P = np.exp(Z - Z.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        P[np.arange(b), yb] -= 1
        g = (P.T @ Xb).ravel() / b
    return size / wk.n_samples * (g + wk.reg * w)


@pytest.mark.parametrize("batch", [1, 3, 40])
def test_minibatch_matches_direct_formula(workload, batch):
    w = random_w(workload, 7)
    n_parts = 6
    parts = [4, 0, 5]
    idx = workload.batch_indices(11, parts, n_parts, batch)
    sizes = workload.partition_sizes(n_parts)
    G = workload.gradients(w, 11, parts, n_parts, batch=batch)
    tol = dict(rtol=1e-5, atol=1e-9) if workload.name == "mlp" else dict(rtol=1e-10, atol=1e-13)  # mlp: by differences
    for row, j in enumerate(parts):
        np.testing.assert_allclose(G[row], _manual_minibatch(workload, w, idx[row], sizes[j]), **tol)


@pytest.mark.parametrize("name", ["least_squares", "logistic", "softmax_digits"])   # the linear models
def test_batch_of_one_is_bitwise_the_stacked_product(name):
    """``batch = 1`` takes an outer product instead of numpy's stacked matmul (5x faster at d = 1e5): the same
    bits, so that runs before and after the change agree exactly."""
    workload = make_workload(name, **SMALL[name])
    w, parts = random_w(workload, 3), [2, 0, 2, 5]
    idx = workload.batch_indices(4, parts, 6, 1)
    Xb, W = workload.X[idx], w.reshape(workload.n_classes, -1)
    R = workload._residual(np.matmul(Xb, W.T), workload.y[idx])
    sizes = workload.partition_sizes(6)[parts].astype(float)
    stacked = np.matmul(R.transpose(0, 2, 1), Xb).reshape(len(parts), -1) * (sizes / workload.n_samples)[:, None]
    stacked += (sizes * (workload.reg / workload.n_samples))[:, None] * w[None, :]
    assert np.array_equal(workload.gradients(w, 4, parts, 6, batch=1), stacked)


def test_batch_at_least_partition_size_without_replacement_is_full_batch():
    ls = make_workload("least_squares", n_samples=60, dim=3)
    w = random_w(ls)
    # |P_j| = 10: a batch of 10 without replacement is the whole partition
    np.testing.assert_allclose(ls.gradients(w, 4, range(6), 6, batch=10), ls.gradients(w, 4, range(6), 6),
                               rtol=1e-12, atol=1e-15)


# --- partitions ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, n_parts", [(10, 3), (103, 7), (50, 50), (7, 1)])
def test_partitions_are_array_split_slices(n, n_parts):
    ls = make_workload("least_squares", n_samples=n, dim=2)
    sizes = ls.partition_sizes(n_parts)
    expected = [len(a) for a in np.array_split(np.arange(n), n_parts)]
    assert sizes.tolist() == expected
    bounds = ls.partition_bounds(n_parts)
    assert bounds[0] == 0 and bounds[-1] == n


def test_data_layout_and_seeding():
    a = make_workload("least_squares", n_samples=50, dim=4, seed=2)
    b = make_workload("least_squares", n_samples=50, dim=4, seed=2)
    c = make_workload("least_squares", n_samples=50, dim=4, seed=3)
    assert a.X.flags.c_contiguous and a.X.dtype == np.float64
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)
    assert not np.array_equal(a.X, c.X)
    assert sorted(a.perm.tolist()) == list(range(50))
    np.testing.assert_array_equal(a.init_params(), np.zeros(4))


# --- mini-batch determinism ---------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [2, 5, 30])
def test_minibatch_determinism_independent_of_other_parts(workload, batch):
    w = random_w(workload, 3)
    n_parts = 8
    alone = np.stack([workload.gradients(w, 9, [j], n_parts, batch=batch)[0] for j in range(n_parts)])
    together = workload.gradients(w, 9, range(n_parts), n_parts, batch=batch)
    np.testing.assert_array_equal(alone, together)
    order = [6, 1, 7, 1, 3]
    np.testing.assert_array_equal(workload.gradients(w, 9, order, n_parts, batch=batch), alone[order])
    # a freshly built copy (another MPI rank) computes the same partials
    twin = make_workload(workload.name, **SMALL[workload.name])
    np.testing.assert_array_equal(twin.gradients(w, 9, order[::-1], n_parts, batch=batch), alone[order[::-1]])


def test_minibatch_changes_with_t_and_seed():
    ls = make_workload("least_squares", n_samples=400, dim=5)
    w = random_w(ls)
    g0 = ls.gradients(w, 0, range(4), 4, batch=5)
    g1 = ls.gradients(w, 1, range(4), 4, batch=5)
    assert not np.any(np.all(g0 == g1, axis=1))
    i0 = ls.batch_indices(0, range(4), 4, 5)
    other = make_workload("least_squares", n_samples=400, dim=5, seed=1)
    assert not np.array_equal(i0, other.batch_indices(0, range(4), 4, 5))
    assert not np.array_equal(i0, ls.batch_indices(0, range(4), 5, 5))


def test_stream_key_depends_on_every_argument():
    parts = np.arange(6)
    base = _stream_keys(1, 2, parts, 6)
    assert len(set(base.tolist())) == 6
    for seed, t, n_parts in [(0, 2, 6), (1, 3, 6), (1, 2, 7)]:
        assert not np.any(_stream_keys(seed, t, parts, n_parts) == base)


def test_batch_indices_golden_values():
    """The stream is pinned: a change would silently desynchronise workers running different versions."""
    ls = make_workload("least_squares", n_samples=100, dim=2, seed=7)
    # Floyd (b*b <= |P_j|), random keys (b <= |P_j| < b*b), with replacement (b > |P_j|)
    assert ls.batch_indices(3, [0, 5, 9], 10, 3).tolist() == [[5, 0, 6], [55, 58, 52], [91, 98, 95]]
    assert ls.batch_indices(3, [0, 5, 9], 10, 5).tolist() == [
        [7, 1, 6, 3, 4], [58, 52, 56, 54, 55], [97, 99, 96, 90, 92]]
    assert ls.batch_indices(3, [0, 9], 10, 12).tolist() == [
        [7, 0, 6, 6, 6, 7, 4, 0, 8, 8, 3, 9], [92, 99, 95, 98, 97, 96, 90, 90, 98, 90, 97, 94]]


@pytest.mark.parametrize("size, batch", [(100, 3), (100, 10), (100, 11), (12, 5), (12, 12), (5, 9)])
def test_batch_indices_in_partition_and_distinct(size, batch):
    n_parts = 3
    ls = make_workload("least_squares", n_samples=size * n_parts + 1, dim=2)
    bounds = ls.partition_bounds(n_parts)
    for t in range(20):
        idx = ls.batch_indices(t, range(n_parts), n_parts, batch)
        assert idx.shape == (n_parts, batch)
        for j in range(n_parts):
            assert np.all((idx[j] >= bounds[j]) & (idx[j] < bounds[j + 1]))
            if batch <= bounds[j + 1] - bounds[j]:
                assert len(set(idx[j].tolist())) == batch


@pytest.mark.parametrize("size, batch", [(40, 3), (40, 8), (10, 6), (6, 9)])
def test_batch_indices_uniform(size, batch):
    """Every sample of a partition is drawn with frequency batch/size (Floyd, random keys and replacement)."""
    ls = make_workload("least_squares", n_samples=size, dim=2)
    T = 3000
    idx = np.concatenate([ls.batch_indices(t, [0], 1, batch)[0] for t in range(T)])
    counts = np.bincount(idx, minlength=size)
    expected = T * batch / size
    # binomial std is below sqrt(expected); 5 sigma
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected)), counts
    # pairs are uniform too (not only marginals): co-occurrence of samples 0 and 1 without replacement
    if batch <= size:
        both = sum(1 for t in range(T) if {0, 1} <= set(ls.batch_indices(t, [0], 1, batch)[0].tolist()))
        p = batch * (batch - 1) / (size * (size - 1))
        assert abs(both - T * p) < 5 * np.sqrt(T * p * (1 - p)) + 1


def test_minibatch_partial_is_unbiased(workload):
    w = random_w(workload, 5)
    n_parts = 4
    full = workload.gradients(w, 0, range(n_parts), n_parts)
    T = 400
    mean = sum(workload.gradients(w, t, range(n_parts), n_parts, batch=8) for t in range(T)) / T
    scale = np.abs(full).max()
    np.testing.assert_allclose(mean, full, atol=0.1 * scale)
    # the estimate is actually random: one draw is further off than the average
    one = workload.gradients(w, 0, range(n_parts), n_parts, batch=8)
    assert np.abs(one - full).max() > np.abs(mean - full).max()


def test_minibatch_with_replacement_is_unbiased():
    ls = make_workload("least_squares", n_samples=20, dim=3, seed=2)
    w = random_w(ls, 1)
    full = ls.gradients(w, 0, range(4), 4)        # |P_j| = 5 < batch = 7: with replacement
    T = 3000
    mean = sum(ls.gradients(w, t, range(4), 4, batch=7) for t in range(T)) / T
    np.testing.assert_allclose(mean, full, atol=0.05 * np.abs(full).max())


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 60), data=st.data())
def test_sum_over_partitions_property(n, data):
    n_parts = data.draw(st.integers(1, n))
    ls = make_workload("least_squares", n_samples=n, dim=3, seed=n)
    w = random_w(ls, n)
    perm = data.draw(st.permutations(list(range(n_parts))))
    G = ls.gradients(w, 0, perm, n_parts)
    np.testing.assert_allclose(G.sum(axis=0), ls.full_gradient(w), rtol=1e-9, atol=1e-12)


# --- convergence --------------------------------------------------------------------------------------------
def test_least_squares_gd_reaches_optimum():
    ls = make_workload("least_squares", n_samples=300, dim=8, condition=5.0, seed=1)
    np.testing.assert_allclose(ls.full_gradient(ls.w_opt), 0.0, atol=1e-12)
    assert ls.optimal_loss == pytest.approx(ls.loss(ls.w_opt))
    assert ls.optimal_loss <= ls.loss(ls.w_opt + 1e-3)
    # noise 0.1 -> residual variance about 0.01, loss about 0.005
    assert 0.002 < ls.optimal_loss < 0.01
    w = ls.init_params()
    losses = []
    for _ in range(300):
        w = w - ls.lr * ls.full_gradient(w)
        losses.append(ls.loss(w))
    assert np.all(np.diff(losses) <= 1e-15)
    assert losses[-1] - ls.optimal_loss < 1e-8 * (ls.loss(ls.init_params()) - ls.optimal_loss)
    assert ls.accuracy(w) is None


def test_lr_is_inverse_lipschitz_constant():
    ls = make_workload("least_squares", n_samples=200, dim=5, condition=20.0)
    eig = np.linalg.eigvalsh(ls.X.T @ ls.X / 200)
    assert ls.lr == pytest.approx(1 / eig[-1])
    # a step of 2.2 * lr diverges, so lr is not overly conservative
    w = ls.init_params()
    for _ in range(200):
        w = w - 2.2 * ls.lr * ls.full_gradient(w)
    assert ls.loss(w) > ls.loss(ls.init_params())


def test_sgd_with_coded_style_partials_converges():
    """Mini-batch SGD summing all n_parts partials gets close to the optimum (the simulator's path)."""
    ls = make_workload("least_squares", n_samples=400, dim=5, seed=2)
    w = ls.init_params()
    for t in range(300):
        w = w - ls.lr * ls.gradients(w, t, range(10), 10, batch=8).sum(axis=0)
    assert ls.loss(w) - ls.optimal_loss < 0.01 * (ls.loss(ls.init_params()) - ls.optimal_loss)


def test_logistic_gd_decreases_loss():
    lg = make_workload("logistic", n_samples=500, dim=10, seed=0)
    w = lg.init_params()
    assert lg.loss(w) == pytest.approx(np.log(2))
    losses = [lg.loss(w)]
    for _ in range(50):
        w = w - lg.lr * lg.full_gradient(w)
        losses.append(lg.loss(w))
    assert np.all(np.diff(losses) < 0)
    assert losses[-1] < 0.7 * losses[0]
    assert set(np.unique(lg.y).tolist()) <= {0.0, 1.0}
    assert lg.accuracy(w) > 0.8
    assert lg.optimal_loss <= losses[-1] and lg.optimal_residual < 1e-6    # solved by L-BFGS (issue 41)


def test_softmax_digits_gd_decreases_loss_and_learns(digits):
    assert digits.dim == 650 and digits.n_samples == 1797 and digits.X.shape == (1797, 65)
    assert digits.X.min() >= 0 and digits.X.max() <= 1
    w = digits.init_params()
    assert digits.loss(w) == pytest.approx(np.log(10))
    assert digits.accuracy(w) < 0.2
    losses = [digits.loss(w)]
    for _ in range(15):
        w = w - digits.lr * digits.full_gradient(w)
        losses.append(digits.loss(w))
    assert np.all(np.diff(losses) < 0)
    assert digits.accuracy(w) > 0.8


def test_losses_are_numerically_stable(workload):
    w = 1e4 * random_w(workload, 9, scale=1.0)
    assert np.isfinite(workload.loss(w))
    assert np.all(np.isfinite(workload.full_gradient(w)))
    assert np.all(np.isfinite(workload.gradients(w, 0, range(3), 3, batch=4)))
    if workload.name != "least_squares":
        # logistic / softmax losses grow linearly, not exponentially, in |w|
        assert workload.loss(w) < 1e4 * 1e3 * np.abs(workload.X).max() * workload.dim + workload.reg * w @ w


# --- registry and validation --------------------------------------------------------------------------------
def test_registry_and_make_workload_forms():
    names = list_workloads()
    assert set(names) == {"least_squares", "logistic", "softmax_digits", "mlp", "torch", "torch_mlp", "torch_cnn"}
    assert all(isinstance(v, str) and v for v in names.values())
    a = make_workload({"name": "least_squares", "dim": 3, "n_samples": 30})
    assert a.dim == 3 and a.n_samples == 30
    b = make_workload({"name": "least_squares", "dim": 3}, dim=4)
    assert b.dim == 4
    assert make_workload(a) is a
    assert "least_squares" in repr(a) and "dim=3" in repr(a)
    assert make_workload("logistic").dim == 20


def _raises(match, fn, *args, **kwargs):
    with pytest.raises(ConfigError, match=match):
        fn(*args, **kwargs)


def test_construction_errors():
    _raises(r"unknown workload 'nope'.*least_squares.*logistic.*softmax_digits", make_workload, "nope")
    _raises(r"least_squares.*unknown parameter 'foo'.*accepted: n_samples, dim, noise", make_workload,
            "least_squares", foo=1)
    _raises(r"unknown parameters 'foo', 'bar'", make_workload, "logistic", foo=1, bar=2)
    _raises(r"needs a 'name'", make_workload, {"dim": 3})
    _raises(r"already built", make_workload, make_workload("least_squares", dim=2), dim=3)
    _raises(r"dim must be >= 1", make_workload, "least_squares", dim=0)
    _raises(r"n_samples must be >= 1", make_workload, "logistic", n_samples=0)
    _raises(r"n_samples must be an integer", make_workload, "least_squares", n_samples=2.5)
    _raises(r"noise must be >= 0", make_workload, "least_squares", noise=-1)
    _raises(r"condition must be >= 1", make_workload, "least_squares", condition=0.5)
    _raises(r"reg must be >= 0", make_workload, "softmax_digits", reg=-1e-3)
    _raises(r"seed must be >= 0", make_workload, "logistic", seed=-1)
    assert issubclass(ConfigError, ValueError)


def test_softmax_without_sklearn(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    _raises(r"pip install gradcode\[data\]", make_workload, "softmax_digits")


def test_call_errors():
    ls = make_workload("least_squares", n_samples=20, dim=3)
    w = ls.init_params()
    _raises(r"n_samples = 20.*n_parts = 21", ls.gradients, w, 0, [0], 21)
    _raises(r"n_parts must be >= 1", ls.gradients, w, 0, [0], 0)
    _raises(r"parts out of range: \[4\].*0 <= j < n_parts = 4", ls.gradients, w, 0, [0, 4], 4)
    _raises(r"parts out of range: \[-1\]", ls.gradients, w, 0, [-1], 4)
    _raises(r"parts must be a 1-D sequence of integer", ls.gradients, w, 0, [0.5], 4)
    _raises(r"parts must be a 1-D sequence of integer", ls.gradients, w, 0, [[0, 1]], 4)
    _raises(r"batch must be >= 1", ls.gradients, w, 0, [0], 4, batch=0)
    _raises(r"batch must be an integer", ls.gradients, w, 0, [0], 4, batch=2.5)
    _raises(r"t must be >= 0", ls.gradients, w, -1, [0], 4)
    _raises(r"w must be a vector of shape \(3,\).*got shape \(4,\)", ls.gradients, np.zeros(4), 0, [0], 4)
    _raises(r"w must be a vector of shape \(3,\)", ls.loss, np.zeros((3, 1)))
    _raises(r"w must be a vector of shape \(3,\)", ls.full_gradient, np.zeros(2))
    _raises(r"n_samples = 20.*n_parts = 30", ls.partition_sizes, 30)
    _raises(r"batch must be >= 1", ls.batch_indices, 0, [0], 2, 0)
    assert ls.gradients(w, 0, [], 4).shape == (0, 3)
    assert ls.gradients(w, 0, np.array([3, 0], dtype=np.int32), 4, batch=2).shape == (2, 3)


# --- the mlp --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_mlp_gradient_matches_finite_differences(activation):
    mlp = make_workload("mlp", hidden=[6, 4], activation=activation, reg=1e-3, seed=2)
    w = mlp.init_params() + 0.05 * np.random.default_rng(1).standard_normal(mlp.dim)
    g = mlp.full_gradient(w)
    rng = np.random.default_rng(3)
    # relu: some pre-activations are within 1e-5 of its kink, where a wider step would cross it
    h, tol = (1e-8, 1e-6) if activation == "relu" else (1e-6, 1e-8)
    for _ in range(8):
        v = rng.standard_normal(mlp.dim)
        fd = (mlp.loss(w + h * v) - mlp.loss(w - h * v)) / (2 * h)
        assert fd == pytest.approx(float(g @ v), rel=1e-5, abs=tol)


def test_mlp_shapes_init_and_training():
    mlp = make_workload("mlp", hidden=[16])
    assert mlp.dim == 16 * 65 + 10 * 17 and mlp.n_samples + mlp.X_test.shape[0] == 1797
    w0 = mlp.init_params()
    np.testing.assert_array_equal(w0, make_workload("mlp", hidden=[16]).init_params())     # seeded
    assert not np.array_equal(w0, make_workload("mlp", hidden=[16], seed=1).init_params())
    records, cluster = run_driver(mlp, 60, optimizer="momentum", momentum=0.9, lr=0.1, eval_every=59)
    assert records[-1]["loss"] < 0.5 * records[0]["loss"] and records[-1]["test_accuracy"] > 0.8


def test_mlp_rejects_bad_parameters():
    with pytest.raises(ConfigError, match="hidden"):
        make_workload("mlp", hidden=[0])
    with pytest.raises(ConfigError, match="relu, tanh"):
        make_workload("mlp", activation="sigmoid")


def test_describe_mlp_shows_its_parameters(capsys):
    from gradcode.cli import main

    assert main(["describe", "mlp"]) == 0
    out = capsys.readouterr().out
    for key in ("hidden", "activation", "reg", "test_fraction", "data"):
        assert key in out
