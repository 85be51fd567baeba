"""Issue 41: run seeds draw the mini-batches; the slowdown and plain lognormal delay models; describe's meanings."""

import numpy as np
import pytest

from gradcode import make_scheme, make_workload, simulate
from gradcode.delays import make_delay
from gradcode.plumbing.registry import describe


def _final_loss(seed, wseed=0):
    wl = make_workload("least_squares", n_samples=240, dim=6, noise=0.5, seed=wseed)
    res = simulate(make_scheme("sync", n=4, batch=5), "shifted_exponential", wl, iterations=30, seed=seed)
    return res.records[-1]["loss"]


def test_run_seed_draws_the_minibatches_and_the_data_stay():
    assert _final_loss(1) != _final_loss(2)          # SGD noise differs across run seeds
    assert _final_loss(1) == _final_loss(1)          # a pure function of the seed
    wl = make_workload("least_squares", n_samples=240, dim=6, seed=0)
    run = wl.for_run(5)
    assert run.X is wl.X and run.batch_seed == 5 and wl.batch_seed is None   # same data, not mutated
    assert not np.array_equal(run.batch_indices(3, [0, 1], 4, 5), wl.batch_indices(3, [0, 1], 4, 5))
    assert wl.for_run(0) is wl                        # the workload's own seed: its own mini-batches


def test_slowdown_is_factor_times_slower_with_probability_p():
    d = make_delay("slowdown", factor=5.0, p=0.25)
    times = d.sample(0, np.arange(4000), 8)[0]
    assert set(np.unique(times)) == {1.0, 5.0}
    assert abs((times == 5.0).mean() - 0.25) < 0.01
    assert d.mean() == pytest.approx(2.0)
    base = make_delay("shifted_exponential")
    same = make_delay({"name": "slowdown", "base": "shifted_exponential", "p": 0.0})
    assert np.array_equal(same.sample(3, [0, 1], 4)[0], base.sample(3, [0, 1], 4)[0])


def test_plain_lognormal_matches_its_definition():
    d = make_delay("plain_lognormal", mu=0.5, sigma=0.7, shift=1.0)
    x = d.sample(1, np.arange(3000), 8)[0]
    assert d.mean() == pytest.approx(1.0 + np.exp(0.5 + 0.7 ** 2 / 2))
    assert abs(np.median(x) - (1.0 + np.exp(0.5))) < 0.05
    assert make_delay("dropcompute_lognormal").mean() == make_delay("lognormal").mean() == 1.5


def test_describe_says_what_every_delay_parameter_means():
    from gradcode.plumbing.registry import DELAYS

    for name in DELAYS.names():
        params = describe(name, "delay")[0].params
        assert all(p.meaning for p in params), (name, [p.name for p in params if not p.meaning])
    assert "weight" in describe("mixture", "delay")[0].text()


@pytest.mark.mpi
def test_mpi_workers_draw_the_run_seeds_minibatches_and_follow_the_lr_schedule(tmp_path):
    """Sync with mini-batches at run seed 3 (the workload's seed is 1) and a step schedule: the MPI ranks draw the
    batches of the run seed and the master steps by the schedule, as the simulator does, so the final models
    agree; the workload's own seed would give another model."""
    from helpers import mpi_spec, run_mpi, simulate_spec

    spec = mpi_spec({"name": "sync", "batch": 4}, seed=3, iterations=6)
    spec["run"]["lr_schedule"] = {"name": "step", "factor": 0.5, "every": 2}
    proc, out = run_mpi(spec, tmp_path)
    assert proc.returncode == 0, proc.stderr
    sim = simulate_spec(spec)
    np.testing.assert_allclose(np.load(out / "params.npy"), sim.params, rtol=1e-9, atol=1e-12)
    own = simulate_spec({**spec, "run": {**spec["run"], "seed": spec["workload"]["seed"]}})
    constant = simulate_spec({**spec, "run": {**spec["run"], "lr_schedule": "constant"}})
    assert not np.allclose(own.params, sim.params) and not np.allclose(constant.params, sim.params)


def test_lr_schedules_follow_their_formulas_and_bad_ones_are_refused():
    from gradcode import RunOptions
    from gradcode.errors import ConfigError
    from gradcode.optim import LRSchedule

    assert LRSchedule("cosine").multiplier(50, 100) == pytest.approx(0.5)
    assert LRSchedule({"name": "1/t", "t0": 5}).multiplier(10, 100) == pytest.approx(1 / 3)
    assert LRSchedule({"name": "step", "factor": 0.1, "every": 3}).multiplier(7, 100) == pytest.approx(0.01)
    for bad in ("linear", {"name": "step", "evry": 3}, {"name": "1/t", "t0": 0}):
        with pytest.raises(ConfigError, match="lr_schedule"):
            RunOptions(lr_schedule=bad)
    wl = make_workload("least_squares", n_samples=240, dim=6, noise=0.5, seed=0)
    def final(schedule):
        sync = make_scheme("sync", n=4)
        return simulate(sync, "constant", wl, iterations=3, lr=0.1, lr_schedule=schedule).params

    w = wl.init_params()
    for lr in (0.1, 0.05, 0.025):                               # lr halved every iteration
        w = w - lr * wl.full_gradient(w)
    np.testing.assert_allclose(final({"name": "step", "factor": 0.5, "every": 1}), w, rtol=1e-10)
    assert not np.allclose(final("constant"), w)


def test_convex_workloads_know_their_optimal_loss():
    lg = make_workload("logistic", n_samples=300, dim=5, seed=0)
    assert lg.optimal_residual < 1e-6
    w = lg.init_params()
    for _ in range(300):
        w = w - lg.lr * lg.full_gradient(w)
    assert lg.optimal_loss - 1e-9 <= lg.loss(w) < lg.optimal_loss + 1e-3     # within the solver's residual


def test_a_relative_target_is_measured_from_the_optimum():
    from gradcode.errors import ConfigError
    from gradcode.spec import load_spec
    from gradcode.workloads.optimum import resolve_target

    spec = {"cluster": {"workers": 4}, "workload": {"name": "logistic", "n_samples": 300, "dim": 5},
            "delay": {"name": "constant"}, "scheme": {"name": "sync"},
            "run": {"iterations": 400, "target_loss": {"relative": 0.01}}}
    s = load_spec(spec)
    wl = make_workload(spec["workload"])
    start = wl.loss(wl.init_params())
    assert s.options.target_loss == pytest.approx(wl.optimal_loss + 0.01 * (start - wl.optimal_loss))
    res = simulate(make_scheme("sync", n=4), "constant", wl, iterations=400, target_loss={"relative": 0.01})
    assert res.records[-1]["loss"] <= s.options.target_loss < res.records[-2]["loss"]   # stopped there
    for bad in ({"relative": 1.5}, {"gap": 0.1}):
        with pytest.raises(ConfigError, match="target_loss"):
            load_spec({**spec, "run": {"target_loss": bad}})
    with pytest.raises(ConfigError, match="relative target"):    # a workload with no optimum known
        resolve_target({"relative": 0.1}, object())


def test_an_optimum_is_solved_once_and_read_back_from_the_cache_file(tmp_path, monkeypatch):
    import scipy.optimize

    from gradcode.workloads import optimum

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(optimum, "_CACHE", {})
    first = make_workload("logistic", n_samples=200, dim=4, seed=9).optimal_loss
    assert len(list((tmp_path / "gradcode" / "optimum").glob("*.json"))) == 1
    monkeypatch.setattr(optimum, "_CACHE", {})                       # another process: only the file is left
    monkeypatch.setattr(scipy.optimize, "minimize", lambda *a, **k: pytest.fail("solved again"))
    assert make_workload("logistic", n_samples=200, dim=4, seed=9).optimal_loss == first
