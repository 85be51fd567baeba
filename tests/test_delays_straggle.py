"""Straggling that does not scale with load (``straggle``), heterogeneous workers, and ``expected_order_statistic``
of them (and of any communication distribution) against Monte Carlo.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gradcode.clusters.sim import simulate
from gradcode.delays import make_delay
from gradcode.errors import ConfigError
from gradcode.schemes import make_scheme
from gradcode.study.harness import delay_label
from gradcode.workloads import make_workload

MIXTURE = {"name": "mixture", "components": [{"weight": 1, "model": "constant"}]}


CLASSIC = {"name": "straggle", "base": {"name": "constant", "value": 1.0}, "count": 2, "extra": 5}


N = 6


# scheme, the time every iteration must take: sync waits for the stragglers (1 + 5), fastest-k with k = n - 2
# never does (1), an exact code tolerating s = 2 stragglers does not either but carries load s + 1 = 3
CLASSIC_SCHEMES = [
    ({"name": "sync"}, 6.0),
    ({"name": "fastest_k", "k": N - 2}, 1.0),
    ({"name": "coded", "code": "cyclic_repetition", "s": 2}, 3.0),
    ({"name": "coded", "code": "fractional_repetition", "s": 2}, 3.0),
]


def _durations(result) -> np.ndarray:
    return np.array([r["end"] - r["start"] for r in result.records])


# --- the classic gradient-coding experiment -------------------------------------------------------------------------
@pytest.mark.parametrize("workload", [None, {"name": "least_squares", "n_samples": 120, "dim": 4, "seed": 1}])
@pytest.mark.parametrize(("scheme", "expected"), CLASSIC_SCHEMES)
def test_classic_gradient_coding_experiment(scheme, expected, workload):
    """Tandon et al.'s setting: base constant 1 per unit load, 2 random workers 5 late, late workers abandon."""
    s = make_scheme(scheme, N)
    wl = None if workload is None else make_workload(workload)
    result = simulate(s, CLASSIC, wl, iterations=25, seed=3, late_workers="abandon")
    np.testing.assert_allclose(_durations(result), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("scheme", "expected"), CLASSIC_SCHEMES)
def test_classic_with_fixed_stragglers_when_late_workers_finish(scheme, expected):
    """With a fixed straggler list the late workers are late every iteration, so finishing their work changes
    nothing: the same exact times (what the MPI cluster, which only finishes, can check)."""
    delay = dict(CLASSIC, count=None, workers=[0, 3])
    del delay["count"]
    wl = make_workload({"name": "least_squares", "n_samples": 120, "dim": 4, "seed": 1})
    result = simulate(make_scheme(scheme, N), delay, wl, iterations=12, seed=0, late_workers="finish")
    np.testing.assert_allclose(_durations(result), expected, rtol=0, atol=1e-12)


def test_classic_expected_order_statistics_are_exact():
    d = make_delay(CLASSIC)
    assert d.expected_order_statistic(N, N) == 6.0
    assert d.expected_order_statistic(N - 2, N) == 1.0
    assert d.expected_order_statistic(N - 2, N, load=3) == 3.0
    assert d.expected_order_statistic(N - 1, N, load=3) == 8.0


# --- who straggles: count, p, workers; common random numbers --------------------------------------------------------
def test_count_delays_exactly_count_workers_and_varies():
    d = make_delay(dict(CLASSIC, count=3))
    _, comm = d.sample(7, np.arange(200), 10)
    late = comm == 5.0
    assert np.all(late.sum(axis=1) == 3)
    assert np.all((comm == 0) | late)
    freq = late.mean(axis=0)                        # every worker straggles about 3/10 of the time
    assert np.all(np.abs(freq - 0.3) < 0.12), freq
    assert len({tuple(row) for row in late}) > 50   # a new subset every iteration


def test_p_delays_each_worker_independently():
    d = make_delay({"name": "straggle", "base": "constant", "p": 0.2, "extra": 2.0})
    _, comm = d.sample(1, np.arange(2000), 8)
    frac = (comm == 2.0).mean()
    assert abs(frac - 0.2) < 4 * math.sqrt(0.2 * 0.8 / comm.size)


def test_workers_list_is_fixed_and_checked():
    d = make_delay({"name": "straggle", "base": "constant", "workers": [1, 4], "extra": 2.0})
    _, comm = d.sample(0, np.arange(5), 6)
    assert np.all(comm[:, [1, 4]] == 2.0) and np.all(np.delete(comm, [1, 4], axis=1) == 0.0)
    with pytest.raises(ConfigError, match="n = 3"):
        d.check_workers(3)
    assert simulate(make_scheme("sync", 2), CLASSIC, iterations=1).records[0]["end"] == 6.0   # 2 of 2 ...
    with pytest.raises(ConfigError, match="count = 2"):
        simulate(make_scheme("sync", 1), CLASSIC, iterations=1)                         # ... but not 2 of 1


@pytest.mark.parametrize("params", [{}, {"count": 1, "p": 0.1}, {"p": 0.1, "workers": [0]}])
def test_exactly_one_way_of_choosing(params):
    with pytest.raises(ConfigError, match="exactly one of count"):
        make_delay({"name": "straggle", "base": "constant", **params})


@pytest.mark.parametrize("bad", [{"extra": -1}, {"extra": MIXTURE}, {"extra": {"name": "gamma"}},
                                 {"p": 1.5}, {"count": -1}, {"workers": [-1]}])
def test_bad_straggle_parameters(bad):
    spec = {"name": "straggle", "base": "constant", "count": 1, **bad}
    if "p" in bad or "workers" in bad:
        del spec["count"]
    with pytest.raises(ConfigError):
        make_delay(spec)


def test_same_stragglers_whatever_the_load_and_scheme():
    """Common random numbers: who straggles and by how much depends on (seed, t, i), not on the load."""
    d = make_delay({"name": "straggle", "base": {"name": "exponential", "mu": 2.0}, "count": 2,
                    "extra": {"name": "exponential", "mean": 3.0}, "comm": 0.5, "comm_dist": "lognormal"})
    c1, m1 = d.sample(11, np.arange(30), 6, load=1.0)
    c3, m3 = d.sample(11, np.arange(30), 6, load=np.array([3, 3, 3, 3, 3, 0]))
    np.testing.assert_array_equal(m1, m3)
    np.testing.assert_allclose(c3[:, :5], 3 * c1[:, :5])
    one, _ = d.sample(11, [4], 6)
    np.testing.assert_array_equal(d.sample(11, [4], 6)[1], m1[[4]])   # an iteration alone: the same draws
    assert one.shape == (1, 6)
    # the added time leaves the compute part alone: base and straggle draw the same compute
    np.testing.assert_array_equal(c1, make_delay({"name": "exponential", "mu": 2.0}).sample(11, np.arange(30), 6)[0])


# --- expected order statistics against Monte Carlo (1.5%) -----------------------------------------------------------
def _monte_carlo(d, n, load, iterations=20_000, seed=5):
    """Sorted total times ``(iterations, n)`` (sampled once and shared by every ``k``)."""
    compute, comm = d.sample(seed, np.arange(iterations), n, load)
    return np.sort(compute + comm, axis=1)


# model, n, load, the k to check
MC_MODELS = {
    "count_exp_extra": ({"name": "straggle", "base": {"name": "shifted_exponential", "a": 1.0, "mu": 2.0},
                         "count": 2, "extra": {"name": "exponential", "mean": 3.0}}, 6, 1.0, [4, 5, 6]),
    "p_pareto_extra": ({"name": "straggle", "base": {"name": "bimodal", "p": 0.3, "kappa": 3.0}, "p": 0.25,
                        "extra": {"name": "pareto", "alpha": 3.0, "t_m": 2.0}}, 8, 2.0, [4, 6, 8]),
    "p_constant": ({"name": "straggle", "base": {"name": "bimodal", "p": 0.3}, "p": 0.2, "extra": 4.0}, 5, 1.0,
                   [2, 5]),
    "workers_comm": ({"name": "straggle", "base": {"name": "exponential", "mu": 1.0}, "workers": [0],
                      "extra": 2.0, "comm": 0.5, "comm_dist": "exponential"}, 5, 2.0, [3, 5]),
    "comm_pareto": ({"name": "shifted_exponential", "a": 1.0, "mu": 2.0, "comm": 1.0, "comm_dist": "pareto"},
                    6, 1.0, [3, 5]),
    "comm_lognormal": ({"name": "exponential", "mu": 1.0, "comm": 2.0, "comm_dist": "lognormal"}, 4, 2.0, [2, 4]),
    "comm_bimodal": ({"name": "bimodal", "comm": 1.5, "comm_dist": "bimodal"}, 6, 1.0, [3, 6]),
    "comm_table": ({"name": "constant", "comm": 1.0, "comm_dist": {"name": "pareto", "alpha": 2.5}}, 4, 1.0,
                   [2, 4]),
    "mixture_own_comm": ({"name": "mixture", "components": [
        {"weight": 3, "model": {"name": "exponential", "mu": 1.0, "comm": 0.2}},
        {"weight": 1, "model": {"name": "constant", "value": 2.0, "comm": 1.0, "comm_dist": "exponential"}}]},
        5, 2.0, [2, 5]),
    "heterogeneous_list": ({"name": "heterogeneous", "base": {"name": "exponential", "mu": 1.0},
                            "speeds": [1, 1, 2, 4]}, 4, 1.0, [3, 4]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MC_MODELS))
def test_expected_order_statistic_against_monte_carlo(name):
    spec, n, load, ks = MC_MODELS[name]
    d = make_delay(spec)
    times = _monte_carlo(d, n, load)
    for k in ks:
        exact = d.expected_order_statistic(k, n, load)
        kth = times[:, k - 1]
        mc, se = kth.mean(), kth.std() / math.sqrt(len(kth))
        assert se < 0.005 * mc, (name, k, n, se / mc)   # the check below can resolve 1.5% (3 standard errors)
        assert exact == pytest.approx(mc, rel=0.015), (name, k, n, load, exact, mc)


def test_heterogeneous_drawn_speeds_average_over_seeds():
    """Speeds drawn once per run: for one seed they are fixed, and the i.i.d. view is the average over seeds."""
    d = make_delay({"name": "heterogeneous", "base": {"name": "exponential", "mu": 1.0},
                    "speeds": {"name": "bimodal", "p": 0.5, "kappa": 3.0}})
    v0 = d.factors(0, 6)
    assert set(np.unique(v0)) <= {1.0, 3.0}
    compute = d.sample(0, np.arange(3), 6)[0]
    base = make_delay({"name": "exponential", "mu": 1.0}).sample(0, np.arange(3), 6)[0]
    np.testing.assert_allclose(compute, base / v0[None, :])
    kth = [np.sort(np.sum(d.sample(seed, np.arange(4), 4), axis=0), axis=1)[:, 2].mean() for seed in range(2000)]
    assert d.expected_order_statistic(3, 4) == pytest.approx(np.mean(kth), rel=0.02)


def test_heterogeneous_checks_length_and_values():
    d = make_delay({"name": "heterogeneous", "base": "constant", "speeds": [1, 2, 4]})
    with pytest.raises(ConfigError, match="one speed per worker"):
        d.check_workers(4)
    with pytest.raises(ConfigError, match="speeds"):
        make_delay({"name": "heterogeneous", "base": "constant", "speeds": [1, 0]})
    with pytest.raises(ConfigError, match="speeds"):
        make_delay({"name": "heterogeneous", "base": "constant", "speeds": []})


# --- labels, description, spec round trip ---------------------------------------------------------------------------
def test_labels_tell_nested_tables_apart():
    a = {"name": "straggle", "base": {"name": "pareto", "alpha": 2}, "count": 2, "extra": 5}
    b = {"name": "straggle", "base": {"name": "pareto", "alpha": 3}, "count": 2, "extra": 5}
    c = {"name": "straggle", "base": {"name": "pareto", "alpha": 2}, "count": 2,
         "extra": {"name": "exponential", "mean": 5}}
    labels = {delay_label(x) for x in (a, b, c)}
    assert len(labels) == 3, labels
    assert "alpha=2" in delay_label(a) and "count=2" in delay_label(a)


def test_spec_round_trip():
    for spec in [CLASSIC, MC_MODELS["p_pareto_extra"][0], MC_MODELS["heterogeneous_list"][0],
                 MC_MODELS["comm_table"][0], MC_MODELS["mixture_own_comm"][0]]:
        d = make_delay(spec)
        again = make_delay({k: v for k, v in d.spec().items() if v is not None})
        for seed in (0, 1):
            np.testing.assert_array_equal(np.add(*d.sample(seed, np.arange(10), 4)),
                                          np.add(*again.sample(seed, np.arange(10), 4)))


def test_describe_straggle_shows_parameters(capsys):
    from gradcode.cli import main

    main(["describe", "straggle"])
    out = capsys.readouterr().out
    for key in ("base", "count", "p", "workers", "extra", "comm_dist"):
        assert key in out, key
