"""Asynchronous SGD (``async_sgd``): one update per gradient, its staleness, bounded staleness and the
staleness-aware step, on the simulator and against it on MPI."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import MPI_SCALE, mpi_spec, read_whole_records, run_mpi, simulate_spec

from gradcode import make_delay, make_scheme, make_workload, simulate
from gradcode.errors import ConfigError

PARETO = {"name": "pareto", "alpha": 2.0, "t_m": 1.0, "comm": 0.5}    # the default experiment's heavy tail


def test_equal_workers_take_turns_with_staleness_n_minus_1():
    """Constant delays: each worker's gradient arrives every ``T`` units, one update every ``T / n`` once all are
    in flight, each ``n - 1`` updates stale (the first ``n`` on ``w_0``: staleness ``0..n-1``). ``iterations``
    counts rounds of ``n`` updates, the gradients of a synchronous iteration."""
    n, T = 4, 2.0
    res = simulate(make_scheme("async_sgd", n=n), make_delay({"name": "constant", "value": T}), iterations=3)
    staleness = [r["staleness"] for r in res.records]
    assert staleness == [0, 1, 2, 3] + [n - 1] * 8
    assert [r["worker"] for r in res.records] == [0, 1, 2, 3] * 3
    assert np.allclose([r["end"] for r in res.records], np.repeat(T * np.arange(1, 4), n))
    assert all(r["messages"] == 1 and r["computed"] == 1.0 and r["wasted"] == 0.0 for r in res.records)


def test_task_j_of_worker_i_takes_the_draw_of_iteration_j():
    """Common random numbers: a worker's ``j``-th gradient takes the delay model's draw of ``(seed, j, i)``."""
    delay = make_delay(PARETO)
    res = simulate(make_scheme("async_sgd", n=5), delay, iterations=8, seed=3)
    for r in res.records:
        i, j = r["worker"], r["task"]
        compute, comm = delay.sample(3, j, 5, np.ones(5))
        assert r["worker_arrived"] - r["worker_begin"] == pytest.approx(compute[0, i] + comm[0, i], rel=1e-12)
        assert r["end"] == pytest.approx(max(r["start"], r["worker_arrived"]))


def test_max_staleness_bounds_every_update_and_makes_workers_wait():
    delay = make_delay(PARETO)
    free = simulate(make_scheme("async_sgd", n=6), delay, iterations=50, seed=0)
    bounded = simulate(make_scheme("async_sgd", n=6, max_staleness=6), delay, iterations=50, seed=0)
    assert max(r["staleness"] for r in free.records) > 6        # heavy tail: unbounded staleness goes far
    assert max(r["staleness"] for r in bounded.records) <= 6
    assert bounded.records[-1]["end"] > free.records[-1]["end"]    # someone waited
    with pytest.raises(ConfigError, match="max_staleness must be at least n - 1 = 5"):
        make_scheme("async_sgd", n=6, max_staleness=4)
    with pytest.raises(ConfigError, match="step must be one of constant, staleness"):
        make_scheme("async_sgd", n=6, step="inverse")


def test_staleness_step_divides_the_gradient_and_keeps_a_run_stable():
    """``lr / staleness`` (Zhang et al. 2016): the step of a gradient ``tau`` updates stale is ``1 / tau`` of the
    constant step's; on a heavy tail the constant step diverges where it converges."""
    scheme = make_scheme("async_sgd", n=4, step="staleness")
    plan = scheme.plan(5)
    scheme.accept(2, 5)              # worker 2 computed on w_0: staleness 5
    assert np.allclose(scheme.combine_sum(np.ones(3), 1, plan).gradient, 4 / 5)
    delay = make_delay(PARETO)
    workload = make_workload("least_squares", n_samples=2000, dim=20, noise=0.1, condition=10.0)
    losses = {}
    for step in ("constant", "staleness"):
        res = simulate(make_scheme("async_sgd", n=8, batch=16, step=step), delay, workload, iterations=40, seed=0)
        losses[step] = res.records[-1]["loss"]
    assert not losses["constant"] < 1.0          # diverged (or nan)
    assert losses["staleness"] < 1.5 * workload.optimal_loss


@pytest.mark.mpi
def test_async_on_mpi_agrees_with_the_simulator(tmp_path):
    """The same draws on both clusters: every update's worker waited out the delay model's draw for its task, the
    mean time per update is within 10% of the simulator's on the default experiment's delays (pareto, alpha 2,
    comm 0.5), and so is the mean staleness; no update ends before its ideal. (Which worker comes first in a near
    tie may differ on the wall clock, so the order is not compared update by update.)"""
    n = 4
    spec = mpi_spec({"name": "async_sgd", "batch": 8}, n=n, iterations=10, seed=0, delay=dict(PARETO))
    proc, out = run_mpi(spec, tmp_path)
    assert proc.returncode == 0, proc.stderr
    mpi, sim = read_whole_records(out), simulate_spec(spec).records
    assert len(mpi) == len(sim) == 40
    delay = make_delay(PARETO)
    for rec in mpi:
        compute, comm = delay.sample(0, rec["task"], n, np.ones(n))
        assert rec["worker_delay"] == pytest.approx(compute[0, rec["worker"]] + comm[0, rec["worker"]], rel=1e-6)
        assert rec["end"] >= rec["ideal_end"] - 1e-3 / MPI_SCALE    # up to the clock conversion (< 1 ms)
    assert mpi[-1]["end"] == pytest.approx(sim[-1]["end"], rel=0.10)
    staleness = [np.mean([r["staleness"] for r in recs]) for recs in (mpi, sim)]
    assert staleness[0] == pytest.approx(staleness[1], rel=0.10)
    assert all(np.isfinite(r["loss"]) for r in mpi if r["loss"] is not None)


def test_report_times_async_by_rounds_of_n_updates():
    """The report's iteration time of an asynchronous scheme is that of ``n`` updates (sync's work per iteration):
    under constant delays ``T``, one round of 4 updates lasts ``T`` once all workers are in flight."""
    from gradcode.output.report import round_times

    res = simulate(make_scheme("async_sgd", n=4), make_delay({"name": "constant", "value": 2.0}), iterations=5)
    times = round_times(res.records, 4)
    assert times["mean_iteration_time"] == pytest.approx(2.0)     # rounds 0..4: T each (the first from 0 to T)
    assert times["p95_iteration_time"] == pytest.approx(2.0)
