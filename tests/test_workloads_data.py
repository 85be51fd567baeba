"""Workloads on user data: sparse and dense features give the same gradients, csv with a header, clear errors for a
bad data file, and the fingerprint notices a changed one.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from gradcode.errors import ConfigError
from gradcode.workloads import make_workload


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
