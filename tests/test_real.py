"""Tests of what a person training a real model expects (issue 14, sections 1 and 2): the mlp workload, the
optimizers, held-out evaluation, sparse features and data files."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from gradcode import make_delay, make_scheme
from gradcode.clusters.records import summarize
from gradcode.clusters.sim import SimulatedCluster
from gradcode.errors import ConfigError
from gradcode.optim import Optimizer
from gradcode.spec import RunOptions
from gradcode.workloads import Workload, make_workload
from gradcode.workloads.metrics import roc_auc


# --- the driver, as both clusters run it ---------------------------------------------------------------------
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


def run_driver(workload, iterations, scheme="sync", n=4, **training):
    scheme = make_scheme(scheme, n=n)
    delay = make_delay("constant", value=1.0)
    scheme.bind(delay=delay)
    scheme.reset()
    cluster = SimulatedCluster(scheme, delay, workload, RunOptions(iterations=iterations, **training))
    return cluster.run(), cluster


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


def test_spec_checks_the_training_keys():
    from gradcode.spec import load_spec

    base = {"cluster": {"workers": 2},
            "workload": {"name": "least_squares", "n_samples": 20, "dim": 2, "test_fraction": 0.25},
            "delay": {"name": "constant"}, "scheme": {"name": "sync"}}
    spec = load_spec({**base, "run": {"optimizer": "nesterov", "momentum": 0.5, "eval_every": 3,
                                      "target_accuracy": 0.9}})
    assert (spec.options.optimizer, spec.options.momentum, spec.options.eval_every,
            spec.options.target_accuracy) == ("nesterov", 0.5, 3, 0.9)
    with pytest.raises(ConfigError, match=r"\[run\].*optimizer"):
        load_spec({**base, "run": {"optimizer": "adagrad"}})
    with pytest.raises(ConfigError, match=r"\[run\].*eval_every"):
        load_spec({**base, "run": {"eval_every": 0}})
    with pytest.raises(ConfigError, match="test_fraction"):          # nothing held out: nothing to evaluate
        load_spec({**base, "workload": {"name": "least_squares", "n_samples": 20, "dim": 2},
                   "run": {"target_accuracy": 0.9}})
    with pytest.raises(ConfigError, match=r"\[workload\].*does not exist"):
        load_spec({**base, "workload": {"name": "logistic", "data": "no/such/file.csv"}})


# --- held-out evaluation ----------------------------------------------------------------------------------------
def test_heldout_metrics_match_a_direct_computation():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    lg = make_workload("logistic", n_samples=400, dim=6, test_fraction=0.25, seed=3)
    assert lg.n_samples == 300 and lg.X_test.shape == (100, 6)
    w = np.random.default_rng(0).standard_normal(6)
    z = lg.X_test @ w
    got = lg.heldout(w)
    assert got["test_loss"] == pytest.approx(np.mean(np.log1p(np.exp(z)) - lg.y_test * z), rel=1e-12)
    assert got["test_accuracy"] == pytest.approx(np.mean((z > 0) == (lg.y_test == 1)))
    assert got["test_auc"] == pytest.approx(sklearn_metrics.roc_auc_score(lg.y_test, z), rel=1e-12)
    # the training and the held-out samples are disjoint and together the whole data set
    full = make_workload("logistic", n_samples=400, dim=6, seed=3)
    rows = {tuple(r) for r in np.vstack([lg.X, lg.X_test])}
    assert len(rows) == 400 and rows == {tuple(r) for r in full.X}


def test_roc_auc_with_ties_matches_sklearn():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 200)
    s = rng.integers(0, 6, 200).astype(float)          # many ties
    assert roc_auc(s, y) == pytest.approx(sklearn_metrics.roc_auc_score(y, s), rel=1e-12)
    assert roc_auc(s, np.zeros(200)) is None


def test_records_hold_heldout_metrics_every_eval_every_and_the_summary_the_time_to_accuracy():
    mlp = make_workload("mlp", hidden=[8], seed=1)
    records, cluster = run_driver(mlp, 7, eval_every=3, target_accuracy=0.5)
    evaluated = [r["iteration"] for r in records if r["test_accuracy"] is not None]
    assert evaluated == [0, 3, 6]
    assert all(r["test_auc"] is None for r in records)          # multiclass: no AUC
    assert records[-1]["test_accuracy"] == pytest.approx(mlp.heldout(cluster.w)["test_accuracy"])
    assert records[-1]["test_loss"] == pytest.approx(mlp.heldout(cluster.w)["test_loss"], rel=1e-12)
    summary = cluster.summary()
    assert summary["final_test_accuracy"] == records[-1]["test_accuracy"]
    hit = next((r["end"] for r in records if r["test_accuracy"] is not None and r["test_accuracy"] >= 0.5), None)
    assert summary["time_to_target_accuracy"] == hit
    # an unreachable target is never hit
    assert summarize(records, target_accuracy=1.01)["time_to_target_accuracy"] is None


def test_no_heldout_keys_without_a_test_set():
    records, _ = run_driver(make_workload("least_squares", n_samples=40, dim=3), 2)
    assert "test_loss" not in records[0]


# --- the mlp --------------------------------------------------------------------------------------------------
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


# --- sparse features and data files -----------------------------------------------------------------------------
def _dataset(task, n=60, p=7, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p)) * (rng.random((n, p)) < 0.3)          # mostly zeros
    if task == "binary":
        y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    elif task == "multiclass":
        y = rng.integers(0, 4, n).astype(float)
    else:
        y = rng.standard_normal(n)
    return X, y


@pytest.mark.parametrize("name, task", [("least_squares", "regression"), ("logistic", "binary"),
                                        ("softmax_digits", "multiclass"), ("mlp", "multiclass")])
def test_sparse_and_dense_data_give_the_same_gradients(tmp_path, name, task):
    sk = pytest.importorskip("sklearn.datasets")
    X, y = _dataset(task)
    np.savez(tmp_path / "d.npz", X=X, y=y)
    sk.dump_svmlight_file(X, y, str(tmp_path / "d.svm"))
    extra = {"hidden": [5]} if name == "mlp" else {}
    dense = make_workload(name, data=str(tmp_path / "d.npz"), test_fraction=0.2, **extra)
    sparse = make_workload(name, data=str(tmp_path / "d.svm"), test_fraction=0.2, **extra)
    assert scipy.sparse.issparse(sparse.X) and not scipy.sparse.issparse(dense.X)
    w = (dense.init_params() if name == "mlp" else 0) + 0.3 * np.random.default_rng(1).standard_normal(dense.dim)
    for kwargs in ({}, {"batch": 3}, {"batch": 20}):
        for n_parts, parts in ((5, range(5)), (7, [6, 1, 1, 3])):
            np.testing.assert_allclose(sparse.gradients(w, 4, parts, n_parts, **kwargs),
                                       dense.gradients(w, 4, parts, n_parts, **kwargs), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(sparse.full_gradient(w), dense.full_gradient(w), rtol=1e-11, atol=1e-13)
    assert sparse.loss(w) == pytest.approx(dense.loss(w), rel=1e-12)
    assert sparse.heldout(w) == pytest.approx(dense.heldout(w), rel=1e-12)
    assert sparse.lr == pytest.approx(dense.lr, rel=1e-6)


def test_csv_data_with_a_header(tmp_path):
    X, y = _dataset("binary")
    path = tmp_path / "d.csv"
    np.savetxt(path, np.column_stack([y, X]), delimiter=",", header="label," + ",".join("abcdefg"), comments="")
    lg = make_workload("logistic", data=str(path))
    ref = make_workload("logistic", data=_npz(tmp_path, X, y))
    np.testing.assert_allclose(lg.full_gradient(np.ones(7)), ref.full_gradient(np.ones(7)), rtol=1e-12)
    assert set(np.unique(lg.y)) == {0.0, 1.0}


def _npz(tmp_path, X, y, name="ref.npz"):
    path = tmp_path / name
    np.savez(path, X=X, y=y)
    return str(path)


def test_data_file_errors_are_clear(tmp_path):
    X, y = _dataset("multiclass")
    with pytest.raises(ConfigError, match="does not exist"):
        make_workload("logistic", data=str(tmp_path / "none.npz"))
    with pytest.raises(ConfigError, match="unknown format.*npz"):
        make_workload("logistic", data=str(tmp_path / "d.parquet"))
    with pytest.raises(ConfigError, match="binary model needs labels"):
        make_workload("logistic", data=_npz(tmp_path, X, y))
    with pytest.raises(ConfigError, match="integer labels"):
        make_workload("mlp", data=_npz(tmp_path, X, y + 0.5, "half.npz"))
    with pytest.raises(ConfigError, match="60 rows but y has 59"):
        make_workload("least_squares", data=_npz(tmp_path, X, y[:-1], "short.npz"))
    with pytest.raises(ConfigError, match="X must be 2-D"):
        make_workload("least_squares", data=_npz(tmp_path, X[:, 0], y, "flat.npz"))
    np.savez(tmp_path / "noy.npz", X=X)
    with pytest.raises(ConfigError, match="no array y"):
        make_workload("least_squares", data=str(tmp_path / "noy.npz"))


def test_the_fingerprint_notices_a_changed_data_file(tmp_path):
    from gradcode.plumbing.fingerprint import fingerprint

    X, y = _dataset("regression")
    path = _npz(tmp_path, X, y, "data.npz")
    spec = {"workload": {"name": "least_squares", "data": path}}
    before = fingerprint(spec)
    assert fingerprint(spec) == before
    np.savez(path, X=X, y=y + 1.0)
    assert fingerprint(spec) != before
