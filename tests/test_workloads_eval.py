"""Held-out evaluation: the metrics against a direct computation (ROC AUC against scikit-learn), in the records every
eval_every iterations, the time to a target accuracy in the summary.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_driver

from gradcode.clusters.records import summarize
from gradcode.workloads import make_workload
from gradcode.workloads.metrics import roc_auc


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
