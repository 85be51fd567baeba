"""Tests of gradcode.delays: order statistics against Monte Carlo, common random numbers, CDFs, the wrappers,
trace replay and validation."""

from __future__ import annotations

import math
from importlib.resources import files

import numpy as np
import pytest

from gradcode import make_scheme
from gradcode.delays import DelayModel, list_delays, make_delay, shipped_traces
from gradcode.errors import ConfigError

# models whose workers are i.i.d. across (t, i): Monte Carlo over iterations of one seed
IID_SPECS = [
    {"name": "shifted_exponential", "a": 1.0, "mu": 0.5},
    {"name": "exponential", "mu": 2.0},
    {"name": "pareto", "alpha": 3.0, "t_m": 1.0},
    {"name": "lognormal"},
    {"name": "bimodal"},
    {"name": "constant", "value": 2.0},
    {"name": "mixture", "components": [{"weight": 1, "model": "exponential"},
                                       {"weight": 2, "model": {"name": "lognormal", "base": 0.5}}]},
    {"name": "shifted_exponential", "comm": 0.5, "comm_dist": "exponential"},
    {"name": "lognormal", "comm": 0.3, "comm_dist": "exponential"},
    {"name": "bimodal", "comm": 0.2},
    {"name": "plain_lognormal", "mu": -0.5, "sigma": 0.8, "shift": 0.5},
    {"name": "slowdown", "base": "exponential", "factor": 4.0, "p": 0.2},
    {"name": "unresponsive", "base": "exponential", "workers": [0, 3]},
]
# models with a fixed random slow set: Monte Carlo over seeds (the i.i.d. view is exact on average over seeds)
SEED_SPECS = [
    {"name": "persistent", "base": "shifted_exponential", "frac": 0.2},
    {"name": "persistent", "base": "bimodal", "frac": 0.3, "slowdown": 2.0},
    {"name": "persistent", "base": "exponential", "workers": [1, 4, 7], "slowdown": [1.5, 2.5]},
]
CLOSED_FORM = [
    {"name": "shifted_exponential", "a": 1.0, "mu": 0.5},
    {"name": "exponential", "mu": 2.0},
    {"name": "pareto", "alpha": 3.0, "t_m": 0.5},
    {"name": "pareto", "alpha": 1.3},
    {"name": "constant", "value": 2.0, "comm": 0.5},
    {"name": "shifted_exponential", "comm": 0.25},
]
ALL_SPECS = IID_SPECS + SEED_SPECS + [{"name": "trace"}, {"name": "trace", "trace": "bytedance-AR"}]


def _total(model: DelayModel, seed, t, n, load=1.0) -> np.ndarray:
    compute, comm = model.sample(seed, t, n, load)
    return compute + comm


def _check_mc(samples: np.ndarray, k: int, expected: float, rel: float):
    """Mean of the k-th smallest per row vs ``expected``: within ``rel`` or 4 standard errors."""
    kth = np.sort(samples, axis=1)[:, k - 1]
    if math.isinf(expected):
        assert np.isinf(kth).all()
        return
    mc = kth.mean()
    se = kth.std(ddof=1) / math.sqrt(len(kth))
    assert abs(mc - expected) <= max(rel * expected, 4 * se), (k, mc, expected, se)


# --- order statistics ---------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("spec", IID_SPECS, ids=lambda s: str(s))
def test_order_statistic_matches_monte_carlo_iid(spec):
    model = make_delay(spec)
    # one sample for both n: worker i's draws do not depend on n, so the first 20 columns are the n = 20 draws
    samples = _total(model, 7, np.arange(20_000), 60)
    for n in (20, 60):
        for k in sorted({1, n // 2, n - 2, n}):
            _check_mc(samples[:, :n], k, model.expected_order_statistic(k, n), rel=0.015)


@pytest.mark.parametrize("spec", SEED_SPECS, ids=lambda s: str(s))
def test_order_statistic_matches_monte_carlo_over_seeds(spec):
    model = make_delay(spec)
    n = 40
    samples = np.concatenate([_total(model, seed, np.arange(4), n) for seed in range(2500)])
    for k in (1, n // 2, n):
        _check_mc(samples, k, model.expected_order_statistic(k, n), rel=0.015)


def test_order_statistic_with_load():
    model = make_delay("lognormal", comm=0.5)
    n, load = 30, 3.0
    samples = _total(model, 1, np.arange(20_000), n, load)
    for k in (1, 15, 30):
        _check_mc(samples, k, model.expected_order_statistic(k, n, load), rel=0.015)


def test_order_statistic_trace_iid_view():
    # replayed workers share steps and ranks, so the i.i.d. view is an approximation: looser tolerance
    model = make_delay("trace")
    n = 100
    samples = np.concatenate([_total(model, seed, np.arange(200), n) for seed in range(20)])
    for k in (1, 50, 100):
        _check_mc(samples, k, model.expected_order_statistic(k, n), rel=0.03)


@pytest.mark.parametrize("spec", CLOSED_FORM, ids=lambda s: str(s))
def test_closed_form_matches_numeric_integration(spec):
    model = make_delay(spec)
    for n in (1, 20, 100):
        for k in sorted({1, (n + 1) // 2, n}):
            for load in (1.0, 2.5):
                closed = model.expected_order_statistic(k, n, load, method="closed")
                numeric = model.expected_order_statistic(k, n, load, method="numeric")
                assert numeric == pytest.approx(closed, rel=1e-6)


def test_closed_forms_are_the_formulas():
    n, k, load, a, mu = 50, 30, 2.0, 1.5, 0.25
    H = lambda m: sum(1.0 / j for j in range(1, m + 1))  # noqa: E731
    se = make_delay("shifted_exponential", a=a, mu=mu)
    assert se.expected_order_statistic(k, n, load) == pytest.approx(load * a + load / mu * (H(n) - H(n - k)))
    ex = make_delay("exponential", mu=mu, comm=0.5)
    assert ex.expected_order_statistic(k, n) == pytest.approx((H(n) - H(n - k)) / mu + 0.5)
    assert se.mean(load) == pytest.approx(load * (a + 1 / mu))


def test_discrete_exact_sum_matches_numeric():
    persistent = {"name": "persistent", "base": "bimodal", "frac": 0.3, "slowdown": 2.0}
    for spec in ({"name": "bimodal"}, persistent):
        model = make_delay(spec)
        for k in (1, 10, 20):
            assert model.expected_order_statistic(k, 20, method="numeric") == pytest.approx(
                model.expected_order_statistic(k, 20), rel=1e-6)


def test_pareto_heavy_tail_infinite():
    model = make_delay("pareto", alpha=0.8)
    assert model.mean() == math.inf
    assert model.expected_order_statistic(10, 10) == math.inf  # alpha * (n - k + 1) = 0.8 <= 1
    assert math.isfinite(model.expected_order_statistic(9, 10))  # 0.8 * 2 > 1
    assert model.expected_order_statistic(9, 10, method="numeric") == pytest.approx(
        model.expected_order_statistic(9, 10), rel=1e-6)
    assert model.mean(load=0.0) == 0.0


def test_unresponsive_order_statistic():
    model = make_delay("unresponsive", base="exponential", workers=[0, 3, 50])
    base = make_delay("exponential")
    assert model.expected_order_statistic(5, 10) == pytest.approx(base.expected_order_statistic(5, 8))
    assert model.expected_order_statistic(9, 10) == math.inf


# --- common random numbers ----------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: str(s))
def test_common_random_numbers(spec):
    model = make_delay(spec)
    t = np.array([3, 0, 17, 5])
    c_big, m_big = model.sample(11, t, 150)
    c_small, m_small = model.sample(11, t, 40)
    np.testing.assert_array_equal(c_big[:, :40], c_small)
    np.testing.assert_array_equal(m_big[:, :40], m_small)
    for r, tr in enumerate(t):
        c_one, m_one = model.sample(11, int(tr), 150)
        np.testing.assert_array_equal(c_one[0], c_big[r])
        np.testing.assert_array_equal(m_one[0], m_big[r])
    c_other = model.sample(11, np.array([17, 99]), 150)[0]
    np.testing.assert_array_equal(c_other[0], c_big[2])
    mu_big, comm_micro = model.sample_micro(11, t, 150, 6)
    mu_small = model.sample_micro(11, t, 40, 6)[0]
    np.testing.assert_array_equal(mu_big[:, :40], mu_small)
    np.testing.assert_array_equal(comm_micro, m_big)


@pytest.mark.parametrize("spec", [s for s in ALL_SPECS if s["name"] != "constant"], ids=lambda s: str(s))
def test_different_seeds_differ(spec):
    model = make_delay(spec)
    a = model.sample(0, np.arange(5), 300)[0]
    b = model.sample(1, np.arange(5), 300)[0]
    assert not np.array_equal(a, b)


def test_iterations_differ_and_exponential_comm_is_random():
    model = make_delay("shifted_exponential", comm=1.0, comm_dist="exponential")
    c, m = model.sample(0, np.arange(2), 50)
    assert not np.array_equal(c[0], c[1])
    assert not np.array_equal(m[0], m[1])
    assert not np.array_equal(c, m)  # separate streams for computation and communication


def test_load_scaling_is_the_same_draw():
    model = make_delay("shifted_exponential", a=0.5, mu=0.3)
    t = np.arange(10)
    unit = model.sample(4, t, 25)[0]
    load = np.linspace(0.0, 3.0, 25)
    np.testing.assert_array_equal(model.sample(4, t, 25, load)[0], unit * load)
    load2 = np.arange(250, dtype=float).reshape(10, 25) / 100
    np.testing.assert_array_equal(model.sample(4, t, 25, load2)[0], unit * load2)
    assert (model.sample(4, t, 25, 0.0)[0] == 0).all()
    # the comm part does not depend on the load
    with_comm = make_delay("shifted_exponential", comm=2.0, comm_dist="exponential")
    np.testing.assert_array_equal(with_comm.sample(4, t, 25, 1.0)[1], with_comm.sample(4, t, 25, 5.0)[1])


def test_micro_batches_are_units_of_work():
    model = make_delay("shifted_exponential", a=1.0, mu=2.0)
    micro = model.sample_micro(3, np.arange(4000), 5, 8)[0]
    assert micro.shape == (4000, 5, 8)
    assert micro.min() >= 1.0
    assert micro.mean() == pytest.approx(model.mean(), rel=0.01)


# --- CDF ----------------------------------------------------------------------------------------------------
def _ks_distance(model: DelayModel, samples: np.ndarray, load=1.0) -> float:
    x = np.sort(samples.ravel())
    emp_right = np.searchsorted(x, x, side="right") / x.size
    emp_left = np.searchsorted(x, x, side="left") / x.size
    F = model.cdf(x, load)
    return float(max(np.max(np.abs(F - emp_right)), np.max(np.abs(F - emp_left) * (emp_left == emp_right))))


@pytest.mark.parametrize("spec", IID_SPECS + SEED_SPECS[:2] + [{"name": "trace"}], ids=lambda s: str(s))
def test_cdf_is_valid_and_matches_empirical(spec):
    model = make_delay(spec)
    if spec["name"] == "unresponsive":
        samples = _total(model, 2, np.arange(400), 50)[:, 4:]  # responsive workers only
    elif spec["name"] == "persistent":
        samples = np.concatenate([_total(model, s, np.arange(2), 20) for s in range(500)])
    elif spec["name"] == "trace":  # n = P, one pass over the steps covers every (pair, step) once
        samples = _total(model, 0, np.arange(model.S), model.P)
    else:
        samples = _total(model, 2, np.arange(400), 50)
    N = samples.size
    assert _ks_distance(model, samples) < 1.95 / math.sqrt(N)  # KS 0.1% critical value
    grid = np.linspace(0.0, np.quantile(samples, 0.999) * 2, 500)
    F = model.cdf(grid)
    assert F[0] == 0.0 and np.all(np.diff(F) >= -1e-12) and np.all((F >= 0) & (F <= 1))
    assert model.cdf(1e12) == pytest.approx(1.0)


def test_cdf_with_load():
    model = make_delay("pareto", alpha=2.5, comm=0.1)
    samples = _total(model, 0, np.arange(300), 50, load=2.0)
    assert _ks_distance(model, samples, load=2.0) < 1.95 / math.sqrt(samples.size)
    # load 0: only communication
    assert model.cdf(0.05, load=0.0) == 0.0 and model.cdf(0.1, load=0.0) == 1.0


# --- wrappers -----------------------------------------------------------------------------------------------
def test_persistent_same_workers_slow_every_iteration():
    model = make_delay("persistent", base="constant", frac=0.25, slowdown=[1.2, 3.0])
    n = 2000
    compute = model.sample(5, np.arange(30), n)[0]
    assert (compute == compute[0]).all()  # constant base: the slow set and factors never change with t
    slow = compute[0] > 1.0
    assert abs(slow.mean() - 0.25) < 4 * math.sqrt(0.25 * 0.75 / n)
    assert compute[0][slow].min() >= 1.2 and compute[0][slow].max() <= 3.0
    np.testing.assert_array_equal(model.factors(5, n), compute[0])
    other = make_delay("persistent", base="constant", frac=0.25).sample(6, 0, n)[0][0] > 1.0
    assert not np.array_equal(slow, other)
    # a random base keeps the same slow set: the factor multiplies the base draw
    random_base = make_delay("persistent", base="exponential", frac=0.25, slowdown=2.0)
    plain = make_delay("exponential").sample(5, np.arange(3), n)[0]
    np.testing.assert_allclose(random_base.sample(5, np.arange(3), n)[0], plain * np.where(slow, 2.0, 1.0))


def test_persistent_explicit_workers():
    model = make_delay("persistent", base="constant", workers=[2, 5], slowdown=3.0)
    compute = model.sample(0, np.arange(4), 8)[0]
    expected = np.ones(8)
    expected[[2, 5]] = 3.0
    assert (compute == expected).all()
    micro = model.sample_micro(0, 0, 8, 3)[0]
    assert (micro[0] == expected[:, None]).all()


def test_mixture_weights_respected():
    model = make_delay("mixture", components=[{"weight": 1, "model": "constant"},
                                             {"weight": 3, "model": {"name": "constant", "value": 5.0}}])
    compute = model.sample(0, np.arange(200), 100)[0]
    frac = (compute == 5.0).mean()
    assert abs(frac - 0.75) < 4 * math.sqrt(0.75 * 0.25 / compute.size)
    assert model.mean() == pytest.approx(0.25 * 1 + 0.75 * 5)
    micro = model.sample_micro(0, np.arange(5), 10, 4)[0]
    assert (micro == micro[:, :, :1]).all()  # one component per (t, i)


def test_mixture_components_are_independent():
    same = {"name": "exponential"}
    model = make_delay("mixture", components=[{"weight": 1, "model": same}, {"weight": 1, "model": same}])
    plain = make_delay("exponential")
    assert not np.array_equal(model.sample(0, 0, 50)[0], plain.sample(0, 0, 50)[0])


def test_unresponsive_inf_only_for_listed():
    model = make_delay("unresponsive", base="shifted_exponential", workers=[1, 4, 99])
    compute, comm = model.sample(0, np.arange(3), 6, load=np.array([1, 0, 1, 1, 2, 1.0]))
    assert np.isinf(compute[:, [1, 4]]).all()
    assert np.isfinite(compute[:, [0, 2, 3, 5]]).all()
    assert np.isfinite(comm).all()
    micro = model.sample_micro(0, 0, 6, 3)[0]
    assert np.isinf(micro[0, [1, 4]]).all() and np.isfinite(micro[0, [0, 2, 3, 5]]).all()


def test_bimodal_fraction_slow():
    p, kappa, base = 0.13, 2.2, 1.5
    model = make_delay("bimodal", p=p, kappa=kappa, base=base)
    compute = model.sample(0, np.arange(100), 500)[0]
    assert set(np.unique(compute)) <= {base, base * kappa}
    frac = (compute == base * kappa).mean()
    assert abs(frac - p) < 4 * math.sqrt(p * (1 - p) / compute.size)


def test_wrapper_inherits_or_overrides_comm():
    base = {"name": "exponential", "comm": 0.3}
    assert make_delay("persistent", base=base).comm == 0.3
    assert make_delay("persistent", base=base, comm=1.0).comm == 1.0
    # a mixture's components keep their own communication
    mixed = make_delay("mixture", components=[{"weight": 1, "model": base},
                                              {"weight": 1, "model": "exponential"}])
    assert sorted(set(np.unique(mixed.sample(0, np.arange(20), 8)[1]))) == [0.0, 0.3]
    assert mixed.mean() == pytest.approx(0.5 * (1 + 0.3) + 0.5 * 1)


# --- trace replay -------------------------------------------------------------------------------------------
def _read_csv(name: str) -> np.ndarray:
    return np.loadtxt(str(files("gradcode") / "data" / "traces" / f"{name}.csv"), delimiter=",", skiprows=1)


@pytest.mark.parametrize("name", ["bytedance-SE", "bytedance-AR", "bytedance-ST"])
def test_trace_replay_matches_csv(name):
    raw = _read_csv(name)
    model = make_delay("trace", trace=name, normalize=False)
    P, S, Mt = model.P, model.S, model.M_tr
    assert P * S * Mt == len(raw)
    table = {(int(r[0]), int(r[1]), int(r[2]), int(r[3])): r[4] for r in raw}
    seed, t, n, M = 3, np.array([0, 5, 40]), 2 * P + 3, 2 * Mt + 1
    compute = model.sample(seed, t, n, load=2.0)[0]
    micro = model.sample_micro(seed, t, n, M)[0]
    pair, step = model.mapping(seed, t, n)
    for r, tr in enumerate(t):
        for i in (0, 1, P - 1, P, n - 1):
            rank, stage = model.pairs[pair[r, i]]
            s = step[r, i]
            assert pair[r, i] == i % P
            assert s == (tr + model.offset(seed) + i // P) % S
            times = [table[(s, rank, stage, j)] for j in range(Mt)]
            assert compute[r, i] == pytest.approx(2.0 * np.mean(times))
            expected_micro = [table[((s + j // Mt) % S, rank, stage, j % Mt)] for j in range(M)]
            np.testing.assert_allclose(micro[r, i], expected_micro)


def test_trace_normalize():
    model = make_delay("trace")
    assert model.times.mean() == pytest.approx(1.0)
    assert model.mean() == pytest.approx(1.0)
    raw = _read_csv("bytedance-SE")
    assert model.scale == pytest.approx(raw[:, 4].mean())
    samples = model.sample_micro(0, np.arange(model.S), model.P, model.M_tr)[0]
    assert samples.mean() == pytest.approx(1.0)  # every micro-batch read exactly once


def test_trace_from_path_and_bad_file(tmp_path):
    good = tmp_path / "t.csv"
    good.write_text("step,dp_rank,stage,microbatch,compute_s\n0,0,0,0,1.0\n0,0,0,1,3.0\n1,0,0,0,2.0\n1,0,0,1,2.0\n")
    model = make_delay("trace", trace=str(good), normalize=False)
    assert model.sample(0, np.arange(2), 1)[0].ravel().tolist() in ([2.0, 2.0],)
    bad = tmp_path / "bad.csv"
    bad.write_text("step,dp_rank,stage,microbatch,compute_s\n0,0,0,0,1.0\n0,0,0,1,3.0\n1,0,0,0,2.0\n")
    with pytest.raises(ConfigError, match="complete grid"):
        make_delay("trace", trace=str(bad))


# --- construction and validation ----------------------------------------------------------------------------
def test_registry_and_specs_round_trip():
    names = list_delays()
    assert set(names) == {"shifted_exponential", "exponential", "pareto", "lognormal", "bimodal", "constant",
                          "persistent", "mixture", "unresponsive", "trace", "straggle", "heterogeneous", "none",
                          "dropcompute_lognormal", "plain_lognormal", "slowdown"}
    assert all(isinstance(v, str) and v for v in names.values())
    assert set(shipped_traces()) == {"bytedance-SE", "bytedance-AR", "bytedance-ST"}
    for spec in ALL_SPECS:
        model = make_delay(spec)
        rebuilt = make_delay(model.spec())
        np.testing.assert_array_equal(rebuilt.sample(1, np.arange(3), 70)[0],
                                      model.sample(1, np.arange(3), 70)[0])
        assert make_delay(model) is model


BAD = [
    ({"name": "exponential", "mu": 0}, "mu"),
    ({"name": "exponential", "mu": -1}, "mu"),
    ({"name": "shifted_exponential", "a": -1}, "a"),
    ({"name": "pareto", "alpha": 0}, "alpha"),
    ({"name": "pareto", "t_m": 0}, "t_m"),
    ({"name": "lognormal", "sigma": 0}, "sigma"),
    ({"name": "lognormal", "base": "x"}, "base"),
    ({"name": "bimodal", "p": 1.5}, "p"),
    ({"name": "bimodal", "p": -0.1}, "p"),
    ({"name": "bimodal", "kappa": 0}, "kappa"),
    ({"name": "constant", "value": -1}, "value"),
    ({"name": "exponential", "comm": -1}, "comm"),
    ({"name": "exponential", "comm_dist": "gamma"}, "comm_dist"),
    ({"name": "exponential", "mu": 1, "foo": 2}, "foo"),
    ({"name": "nonexistent"}, "nonexistent"),
    ({"mu": 1}, "name"),
    ({"name": "persistent", "frac": 2}, "frac"),
    ({"name": "persistent", "slowdown": 0.5}, "slowdown"),
    ({"name": "persistent", "slowdown": [3, 2]}, "slowdown"),
    ({"name": "persistent", "slowdown": [1, 2, 3]}, "slowdown"),
    ({"name": "persistent", "frac": 0.1, "workers": [1]}, "workers"),
    ({"name": "persistent", "workers": [-1]}, "workers"),
    ({"name": "persistent", "base": 3}, "base"),
    ({"name": "persistent", "base": {"name": "exponential", "mu": 0}}, "mu"),
    ({"name": "unresponsive", "workers": "0"}, "workers"),
    ({"name": "mixture", "components": []}, "components"),
    ({"name": "mixture", "components": [{"weight": 0, "model": "exponential"}]}, "weight"),
    ({"name": "mixture", "components": [{"weight": -1, "model": "exponential"}]}, "weight"),
    ({"name": "mixture", "components": [{"model": "exponential"}]}, "weight"),
    ({"name": "mixture", "components": [{"weight": 1, "model": "nope"}]}, "nope"),
    ({"name": "trace", "trace": "bytedance-XX"}, "bytedance-SE"),
    ({"name": "trace", "normalize": "yes"}, "normalize"),
]


@pytest.mark.parametrize("spec, word", BAD, ids=[f"{s}" for s, _ in BAD])
def test_validation_errors_name_the_parameter(spec, word):
    with pytest.raises(ConfigError) as err:
        make_delay(spec)
    assert word in str(err.value)


def test_unknown_parameter_lists_accepted():
    with pytest.raises(ConfigError) as err:
        make_delay("exponential", mu=1, foo=2)
    msg = str(err.value)
    assert "foo" in msg and "exponential" in msg and "mu" in msg and "comm_dist" in msg
    with pytest.raises(ConfigError) as err:
        make_delay("nonexistent")
    assert all(name in str(err.value) for name in list_delays())


def test_call_validation():
    model = make_delay("exponential")
    cases = [
        (lambda: model.expected_order_statistic(5, 4), "k"),
        (lambda: model.expected_order_statistic(0, 4), "k"),
        (lambda: model.expected_order_statistic(1, 0), "n"),
        (lambda: model.expected_order_statistic(1, 4, method="magic"), "method"),
        (lambda: model.sample(-1, 0, 4), "seed"),
        (lambda: model.sample(0, -1, 4), "t"),
        (lambda: model.sample(0, [[0]], 4), "t"),
        (lambda: model.sample(0, [0.5], 4), "t"),
        (lambda: model.sample(0, 0, 0), "n"),
        (lambda: model.sample(0, 0, 4, load=-1), "load"),
        (lambda: model.sample(0, 0, 4, load=np.ones(3)), "load"),
        (lambda: model.sample(0, 0, 4, load=np.nan), "load"),
        (lambda: model.sample_micro(0, 0, 4, 0), "M"),
        (lambda: model.cdf(1.0, load=-2), "load"),
        (lambda: model.mean(load=math.inf), "load"),
        (lambda: make_delay("lognormal").expected_order_statistic(1, 4, method="closed"), "closed"),
        (lambda: make_delay(model, mu=2), "parameters"),
    ]
    for call, word in cases:
        with pytest.raises(ConfigError) as err:
            call()
        assert word in str(err.value), (word, str(err.value))


# --- regression pins --------------------------------------------------------------------------------------------
# Computed with the single-module gradcode/delays.py at commit fb33360 (before the split into a package) by
#   total = sum(model.sample(11, [0, 5], 3, load=[1.0, 2.5, 0.0])), micro = sum(model.sample_micro(11, 3, 2, 2))
#   (communication broadcast over micro-batches), eos = [E[T_(2:5)] at load 1.5, E[T_(5:5)] at load 1].
# The draws must stay bit-for-bit (common random numbers across versions); E[T_(k:n)] to rounding.
PINS = [
    ({'name': 'constant', 'value': 2.0, 'comm': 0.5},
     [2.5, 5.5, 0.5, 2.5, 5.5, 0.5],
     [2.5, 2.5, 2.5, 2.5],
     [3.5, 2.5]),
    ({'name': 'shifted_exponential', 'a': 1.0, 'mu': 0.5},
     [1.9904381609348576, 3.1658904837594406, 0.0, 1.7581224317505888, 7.018186539312545, 0.0],
     [2.3631015153302224, 3.6372804519531368, 1.390606646402167, 2.7543369610625916],
     [2.85, 5.566666666666666]),
    ({'name': 'exponential', 'mu': 2.0, 'comm': 0.5, 'comm_dist': 'exponential'},
     [0.496920275080474, 0.6906870671793379, 0.6897440388347139, 0.31939637322681547, 2.5162954617335442,
      0.14150993296589756],
     [0.7755998915217786, 1.0941446256775071, 0.22148152250992903, 0.5624141011750352],
     [0.751685820273647, 1.9037135189170653]),
    ({'name': 'pareto', 'alpha': 1.3, 't_m': 0.5},
     [0.7318282480565054, 1.3848450292260743, 0.0, 0.6692740711435281, 2.5049008996765587, 0.0],
     [0.8446124744210226, 1.3787695276793381, 0.581052679978798, 0.981766091002728],
     [1.0974025974025974, 6.9281422600388085]),
    ({'name': 'lognormal'},
     [1.28053731807425, 2.838777989312113, 0.0, 1.2370173495717505, 3.5795419841234253, 0.0],
     [1.349276309385384, 1.5926164841369348, 1.1636456769633476, 1.421887095708335],
     [1.890585350082466, 2.0976533399042854]),
    ({'name': 'lognormal', 'sigma': 0.5, 'comm': 0.3, 'comm_dist': 'exponential'},
     [1.5336014453195936, 3.434685560458936, 0.4138464233008283, 1.424960474686111, 4.575929778522321,
      0.08490595977953853],
     [1.6989295950359926, 1.8626228386336412, 1.352118974767994, 1.5649470122907],
     [2.2793146984676165, 2.3088819762602597]),
    ({'name': 'bimodal'},
     [1.0, 5.5, 0.0, 1.0, 2.5, 0.0],
     [1.0, 1.0, 1.0, 1.0],
     [1.50230315904, 1.60189489516]),
    ({'name': 'persistent', 'base': 'shifted_exponential', 'frac': 0.5},
     [1.4952190804674288, 2.8329452418797203, 0.0, 1.3790612158752944, 4.759093269656272, 0.0],
     [1.6815507576651112, 2.3186402259765684, 1.1953033232010835, 1.8771684805312958],
     [2.9468019677012185, 5.802974660334485]),
    ({'name': 'persistent', 'base': 'bimodal', 'workers': [1], 'slowdown': 2.0},
     [1.0, 11.0, 0.0, 1.0, 5.0, 0.0],
     [1.0, 1.0, 2.0, 2.0],
     [1.51228061484, 2.38631581586]),
    ({'name': 'mixture', 'components': [{'weight': 1, 'model': 'exponential'},
                                        {'weight': 2, 'model': {'name': 'lognormal', 'base': 0.5}}]},
     [3.2154931109008134, 0.72775679805849, 0.0, 1.7259195831722016, 5.658626569402791, 0.0],
     [0.3097970875360797, 1.1968173260374315, 0.3541574071587415, 1.4975637310932153],
     [0.8827722184577158, 1.552143763551413]),
    ({'name': 'unresponsive', 'base': 'pareto', 'workers': [1]},
     [1.4636564961130107, math.inf, 0.0, 1.3385481422870562, math.inf, 0.0],
     [1.6892249488420452, 2.7575390553586763, math.inf, math.inf],
     [2.4975369458128074, math.inf]),
    ({'name': 'trace', 'trace': 'bytedance-AR'},
     [2.1430884721646697, 2.2702078514957225, 0.0, 2.154244889720826, 2.282876510611728, 0.0],
     [2.1319077865567864, 2.1186892494820557, 0.8989608226966784, 0.8926144659682262],
     [1.3701362426684607, 1.2809180366663366]),
]


@pytest.mark.parametrize("spec, total, micro, eos", PINS, ids=[p[0]["name"] for p in PINS])
def test_pinned_values_of_the_original_module(spec, total, micro, eos):
    model = make_delay(spec)
    compute, comm = model.sample(11, [0, 5], 3, load=[1.0, 2.5, 0.0])
    # Equal to a few ulps, not bitwise: numpy's power/log kernels change in the last bit between releases
    # (numpy 2.4.6 moved one pareto draw by 1 ulp); a changed draw, stream or formula moves far more than that.
    np.testing.assert_allclose((compute + comm).ravel(), total, rtol=1e-14, atol=0)
    mc, mm = model.sample_micro(11, 3, 2, 2)
    np.testing.assert_allclose((mc + mm[:, :, None]).ravel(), micro, rtol=1e-14, atol=0)
    # numeric order statistics: two quadrature rules agree to 1e-9 relative, or to 1e-6 where the integrand is
    # itself a 2048-atom convolution (a random communication term): that one is ~1e-4 from the true value (lognormal
    # + exponential, k = n = 5: 2.308882 here, 2.309197 by direct double quadrature), so pin the method to 1e-7
    assert [model.expected_order_statistic(2, 5, 1.5), model.expected_order_statistic(5, 5)] == pytest.approx(
        eos, rel=1e-7)


@pytest.mark.parametrize("spec", [{"name": "shifted_exponential", "a": 0.5, "mu": 3.0}, {"name": "pareto"},
                                  {"name": "lognormal", "base": 2.0, "scale": 0.3, "sigma": 0.7}])
def test_fast_paths_are_the_scipy_distribution(spec):
    """``_ppf`` (in place, what ``sample`` draws) and the numpy ``_unit_cdf``/``_unit_sf`` are the frozen
    ``scipy.stats`` distribution's ``ppf``/``cdf``/``sf``; its mean and support are the model's."""
    model = make_delay(spec)
    u = np.linspace(0.0, 1.0, 1001)[:-1]
    np.testing.assert_allclose(model._ppf(u.copy()), model._dist.ppf(u), rtol=1e-12)
    x = np.concatenate([[0.0, model._lower()], model._dist.ppf(u[1:]), [1e3 * model._dist.ppf(0.999)]])
    np.testing.assert_allclose(model._unit_cdf(x), model._dist.cdf(x), rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(model._unit_sf(x), model._dist.sf(x), rtol=1e-9, atol=1e-300)
    assert model.mean() == pytest.approx(model._dist.mean(), rel=1e-14)
    assert model._lower() == model._dist.support()[0] > 0.0


def test_a_new_wrapper_is_a_constructor_and_one_method():
    """The Wrapper base derives sampling and the i.i.d. view from the components; ``_adjust`` changes draws."""
    from gradcode.delays import Wrapper

    class Doubled(Wrapper):
        name = "doubled"

        def __init__(self, base="exponential"):
            self.base = make_delay(base)
            super().__init__([(1.0, self.base)], comm=None, comm_dist=None)

        def _adjust(self, times, seed, n, path):
            times *= 2.0
            return times

    base = make_delay({"name": "exponential", "mu": 2.0, "comm": 0.25})
    model = Doubled(base)
    assert (model.comm, model.comm_dist) == (0.25, "constant")   # inherited from the base
    np.testing.assert_array_equal(model.sample(3, [0, 1], 4, load=2.0)[0], 2.0 * base.sample(3, [0, 1], 4, load=2.0)[0])
    np.testing.assert_array_equal(model.sample_micro(3, 1, 2, 3)[0], 2.0 * base.sample_micro(3, 1, 2, 3)[0])
    # the i.i.d. view is the base's (one component); only sampling was changed
    x = np.array([0.3, 1.0, 2.5])
    np.testing.assert_array_equal(model.cdf(x), base.cdf(x))
    assert model.expected_order_statistic(3, 5) == pytest.approx(base.expected_order_statistic(3, 5, method="numeric"),
                                                                 rel=1e-7)


@pytest.mark.parametrize("module", ["", "_comm", "added", "parametric", "trace", "wrappers"])
def test_docstring_examples_run(module):
    """Every example in the delay models' docstrings runs as written (its imports included)."""
    import doctest
    import importlib

    mod = importlib.import_module("gradcode.delays" + (f".{module}" if module else ""))
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


def test_expectation_over_atoms_is_the_direct_sum(monkeypatch):
    """One form (``_comm.expect_over``) for every expectation over atoms: a model with a random communication
    (``E_U[F_C(x - load U)]``), a sum of two terms (``E_B[F_A(x - B)]``), a communication of few atoms
    (``E_C[F_U((x - C) / load)]``) and a persistent slowdown (``E_V[P(s V <= x)]``) give, bit for bit,
    ``sum_j w_j kernel(x - v_j)`` written as one numpy expression; cut into blocks (a small ``_CHUNK``) the same to
    rounding (the blocks' matrix products may round differently), in ``x``'s shape."""
    from gradcode.delays import _comm

    x = np.linspace(-0.5, 12.0, 37)

    def direct(kernel, v, w):
        return np.clip(kernel(x[:, None] - v[None, :]) @ w, 0.0, 1.0)

    cases = []
    for spec in ({"name": "lognormal", "comm": 1.0, "comm_dist": "exponential"},
                 {"name": "trace", "trace": "bytedance-ST", "comm": 0.5, "comm_dist": "pareto"}):
        d = make_delay(spec)
        v, w = d._unit_atoms()
        for load in (1.0, 2.5):
            cases.append((lambda y, d=d, load=load: d.cdf(y, load=load), direct(d._cd.cdf, load * v, w)))
            cases.append((lambda y, d=d, load=load: d._total_sf(y, load), direct(d._cd.sf, load * v, w)))
    s = _comm.Sum(_comm.make_comm(1.0, "pareto"), _comm.make_comm(2.0, "lognormal"))
    v, w = s.b.atoms()
    cases += [(s.cdf, direct(s.a.cdf, v, w)), (s.sf, direct(s.a.sf, v, w))]
    # the same expectation over the communication's few atoms (a straggler's gated constant extra) ...
    d = make_delay({"name": "straggle", "base": {"name": "pareto", "alpha": 2.5}, "p": 0.3, "extra": 4.0})
    assert d._few_comm_atoms()
    cv, cw = d._cd.atoms()
    for load in (1.0, 2.5):
        cases.append((lambda y, d=d, load=load: d.cdf(y, load=load),
                      direct(lambda y, load=load: d._unit_cdf(y / load), cv, cw)))
    # ... and over a persistent slowdown's base atoms, a scale (E_V[P(s V <= x)], s ~ U[2, 4]) in the same form
    slow = make_delay({"name": "persistent", "base": {"name": "exponential"}, "frac": 0.5,
                       "slowdown": [2.0, 4.0]})._slow
    v, w = slow.base._unit_atoms()
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.clip(np.clip((x[:, None] / v[None, :] - 2.0) / 2.0, 0.0, 1.0) @ w, 0.0, 1.0)
    cases.append((slow._unit_cdf, scaled))
    for got, want in cases:
        assert np.array_equal(got(x), want)
    monkeypatch.setattr(_comm, "_CHUNK", 3 * 2048)    # blocks of 3 points
    for got, want in cases:
        np.testing.assert_allclose(got(x.reshape(37, 1)), want.reshape(37, 1), rtol=0, atol=1e-13)


# --- a trace file that is not a trace; order statistics computed once -----------------------------------------------
@pytest.mark.parametrize("content", ["user,password\nalice,SECRET123\n", "a,b,c,d,e\n1,2,3,4,SECRET456\n",
                                     "step,dp_rank,stage,microbatch,compute_s\n0,0,0,0,SECRET789\n",
                                     "step;dp_rank\nSECRETabc;1\n"])
def test_trace_error_quotes_nothing_of_the_file(tmp_path, content):
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(ConfigError, match="not a trace|must have") as err:
        make_delay("trace", trace=str(path))
    assert "SECRET" not in str(err.value) and "alice" not in str(err.value)


def test_order_statistics_are_computed_once_per_process_for_a_spec(monkeypatch):
    # A sweep builds every cell twice (checked, then run): adaptive_k_load's plan integrated the same order
    # statistics twice (regimes.toml, 15 cells: 141 s -> 2.8 s for the second build on a loaded machine).
    from gradcode.delays import _base

    calls = []
    real = _base.DelayModel._eos
    monkeypatch.setattr(_base.DelayModel, "_eos", lambda self, *a: calls.append(a) or real(self, *a))
    spec = {"name": "pareto", "alpha": 2.0}          # a closed form: cheap, and cached all the same
    first = make_scheme("adaptive_k_load", n=5, max_batch=2, delay=make_delay(spec))
    counted = len(calls)
    second = make_scheme("adaptive_k_load", n=5, max_batch=2, delay=make_delay(spec))
    assert counted > 0 and len(calls) == counted
    assert second._choices == first._choices
    make_scheme("adaptive_k_load", n=5, max_batch=2, delay=make_delay(dict(spec, alpha=3.0)))
    assert len(calls) > counted              # another spec: computed
