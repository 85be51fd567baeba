"""Schemes on their own: validation on construction, stop rules, combine rules, DropCompute's timer checks."""

import numpy as np
import pytest

import gradcode
from gradcode.errors import ConfigError
from gradcode.schemes import make_scheme
from gradcode.schemes.adaptive import PflugState, PflugTest
from gradcode.schemes.dropcompute import choose_tau, local_stop


@pytest.mark.parametrize(
    "name, params, words",
    [
        ("fastest_k", {"k": 11}, ["k", "1 <= k <= n"]),
        ("fastest_k", {"k": 0}, ["k"]),
        ("fastest_k", {}, ["k"]),
        ("backup", {}, ["b"]),
        ("backup", {"b": 10}, ["b", "<="]),
        ("backup", {"b": 2, "k": 5}, ["k + b"]),
        ("backup", {"k": 11}, ["k", "1 <= k <= n"]),
        ("backup", {"N": 8}, ["unknown parameter 'N'", "'N': the paper's N", "is k here"]),
        ("adaptive_k", {"k0": 0}, ["k0"]),
        ("adaptive_k", {"k0": 5, "k_max": 3}, ["k_max", "k0"]),
        ("dropcompute", {"tau": 0}, ["tau", "> 0"]),
        ("dropcompute", {"tau": -1.0}, ["tau"]),
        ("dropcompute", {"M": 0}, ["M"]),
        ("dropcompute", {"check": "sometimes"}, ["check", "official"]),
        ("dropcompute", {"normalize": "mean"}, ["normalize", "computed"]),
        ("coded", {"code": "cyclic_mds"}, ["s"]),
        ("coded", {"code": "nope", "s": 1}, ["unknown code", "cyclic_mds"]),
        ("coded", {"code": "cyclic_mds", "s": 1, "method": "magic"}, ["method", "optimal"]),
        ("coded", {"code": "cyclic_mds", "s": 1, "flavour": 3}, ["flavour", "accepted"]),
        ("fastest_k", {"k": 2, "speed": 3}, ["speed", "accepted"]),
        ("adaptive_k_load", {"stages": [40, 20]}, ["stages", "increasing"]),
        ("adaptive_k_load", {"batch": 8}, ["unknown parameter 'batch'", "largest per-worker batch is max_batch"]),
        ("adaptive_k_load", {"max_batch": 0}, ["max_batch", ">= 1"]),
        ("adaptive_k_load", {"stages": 3}, ["stages", "non-empty list"]),        # found by the input probe
        ("adaptive_k_load", {"stages": []}, ["stages", "non-empty list"]),
        ("nope", {}, ["unknown scheme", "fastest_k"]),
    ],
)
def test_bad_parameters_are_named(name, params, words):
    with pytest.raises(ConfigError) as err:
        make_scheme(name, n=10, **params)
    for word in words:
        assert word in str(err.value)


def test_adaptive_k_load_choice_is_the_brute_force_one_and_cheap_for_a_huge_max_batch():
    """(k, b) of each stage from the n candidates b = ceil(B / k) equals the search over every b = 1..max_batch;
    max_batch = 2^70 (the input probe: it searched for ever) is chosen at once."""
    import math

    delays = [{"name": "shifted_exponential", "a": 1.0, "mu": 1.0}, {"name": "pareto", "alpha": 2.5},
              {"name": "constant"}]
    for n, max_batch, delay in ((6, 16, delays[0]), (7, 9, delays[1]), (5, 12, delays[2])):
        sch = make_scheme("adaptive_k_load", n=n, max_batch=max_batch, delay=delay,
                          stages=list(range(1, n * max_batch + 1, 5)))
        for B in sch.stages:
            costs = [(sch.delay.expected_order_statistic(math.ceil(B / b), n, load=b / max_batch), b)
                     for b in range(1, max_batch + 1) if math.ceil(B / b) <= n]
            best = min(c for c, _ in costs)
            b = next(b for c, b in costs if c < best + 1e-12)
            assert sch._choose(B) == (math.ceil(B / b), b)
    huge = make_scheme("adaptive_k_load", n=4, max_batch=2**70, delay=delays[0])
    assert huge.stop_count() >= 1 and huge.plan(0).batch <= 2**70


def test_code_with_other_n_is_rejected():
    code = gradcode.make_code("cyclic_repetition", n=8, s=1)
    with pytest.raises(ConfigError, match="n = 8.*n = 10"):
        make_scheme("coded", n=10, code=code)


def test_stop_counts():
    assert make_scheme("sync", n=7).stop_count() == 7
    assert make_scheme("fastest_k", n=7, k=3).stop_count() == 3
    backup = make_scheme("backup", n=7, b=2)
    assert (backup.k, backup.stop_count()) == (5, 5)
    assert make_scheme("backup", n=7, k=5).b == 2
    approx = make_scheme("coded", n=12, code="expander", s=2, wait=9)
    assert approx.stop_count() == 9


def test_fractional_repetition_stops_at_first_cover():
    # groups {0,1,2}, {3,4,5}: worker 0 then worker 4 cover both groups
    scheme = make_scheme("coded", n=6, code="fractional_repetition", s=2)
    assert scheme.stop_index([0, 1, 4, 2, 3, 5], scheme.plan(0)) == 3
    assert scheme.stop_index([0, 4, 1, 2, 3, 5], scheme.plan(0)) == 2
    assert scheme.stop_index([0, 1, 2], scheme.plan(0)) is None


def test_mds_stops_at_n_minus_s():
    scheme = make_scheme("coded", n=10, code="cyclic_mds", s=3)
    order = list(np.random.default_rng(1).permutation(10))
    assert scheme.stop_index(order, scheme.plan(0)) == 7


SUMMING = {"sync": {}, "fastest_k": {"k": 3}, "backup": {"b": 2}, "adaptive_k": {"k0": 2},
           "adaptive_k_load": {"max_batch": 4, "delay": {"name": "shifted_exponential", "a": 1.0, "mu": 1.0}}}


@pytest.mark.parametrize("name", list(SUMMING))
def test_summing_schemes_combine_the_plain_sum(name):
    """What the MPI master relies on when it adds messages up as they arrive: combine == combine_sum(sum, count)."""
    scheme = make_scheme(name, n=6, **SUMMING[name])
    assert scheme.sums_messages
    plan = scheme.plan(0)
    msgs = np.random.default_rng(3).standard_normal((4, 5))
    responders = [4, 1, 0, 5]
    total = msgs[0].copy()
    for m in msgs[1:]:           # in arrival order, as the master adds them
        total += m
    got = scheme.combine_sum(total, len(responders), plan).gradient
    np.testing.assert_array_equal(got, scheme.combine(msgs, responders, plan).gradient)
    np.testing.assert_allclose(got, (6 / 4) * msgs.sum(axis=0), rtol=1e-15)


def test_coded_and_dropcompute_do_not_claim_a_plain_sum():
    assert not make_scheme("coded", n=6, code="cyclic_mds", s=2).sums_messages
    assert not make_scheme("dropcompute", n=6, M=2).sums_messages


def test_averaging_scales_to_the_full_sum():
    scheme = make_scheme("fastest_k", n=4, k=2)
    plan = scheme.plan(0)
    msgs = np.array([[1.0, 2.0], [3.0, 4.0]])
    out = scheme.combine(msgs, [2, 0], plan).gradient
    np.testing.assert_allclose(out, (4 / 2) * msgs.sum(axis=0))


def test_coded_combine_recovers_sum_and_reports_residual():
    scheme = make_scheme("coded", n=8, code="cyclic_repetition", s=2, seed=3)
    plan = scheme.plan(0)
    P = np.random.default_rng(0).standard_normal((8, 5))
    responders = [7, 0, 3, 5, 1, 2]
    msgs = np.stack([scheme.message(i, 1, P[list(plan.parts[i])], plan) for i in responders])
    out = scheme.combine(msgs, responders, plan)
    np.testing.assert_allclose(out.gradient, P.sum(axis=0), atol=1e-9)
    assert out.method == "exact" and out.residual < 1e-8


def _local_stop_loop(times, tau, check, fwd):
    """Straightforward per-worker loop, written independently of the vectorised version."""
    clock, count = 0.0, 0
    for m in times:
        if clock >= tau:
            return count, clock
        if check == "idealized":
            if clock + m > tau:
                return count, tau
            clock += m
            count += 1
            continue
        if check == "official":
            if clock + fwd * m >= tau:
                return count, clock + fwd * m
        clock += m
        count += 1
    return count, clock


@pytest.mark.parametrize("check", ["official", "before_microbatch", "idealized"])
def test_local_stop_matches_a_plain_loop(check):
    rng = np.random.default_rng(5)
    micro = 1 + 0.5 * rng.lognormal(-0.5, 1.0, size=(50, 12))
    for tau in (0.5, 5.0, 11.3, 17.0, 1e9):
        counts, times = local_stop(micro, tau, check, 1 / 3)
        for i in range(len(micro)):
            c, tt = _local_stop_loop(micro[i], tau, check, 1 / 3)
            assert counts[i] == c
            assert times[i] == pytest.approx(tt)


def test_infinite_tau_computes_everything():
    micro = np.ones((3, 4))
    counts, times = local_stop(micro, float("inf"))
    assert counts.tolist() == [4, 4, 4] and times.tolist() == [4.0, 4.0, 4.0]


def test_choose_tau_finds_the_gain_of_a_straggler():
    # 15 workers take 1 per micro-batch, one takes 3; All-Reduce costs 2. By hand, with checks before each
    # micro-batch: tau in (5, 6] keeps 6 + 2 micro-batches in 8 time units, throughput gain (92/128) * 26/8 = 2.34,
    # the best of all thresholds (tau in (7, 8]: 123/128 * 26/11 = 2.27; tau in (2, 3]: 46/128 * 26/5 = 1.87).
    micro = np.ones((20, 16, 8))
    micro[:, 0, :] = 3.0
    comm = np.full((20, 16), 2.0)
    tau = choose_tau(micro, comm, check="before_microbatch", forward_share=1 / 3, candidates=400, rule="replay")
    assert 5.0 < tau <= 6.0


def test_pflug_test_fires_on_oscillation_not_on_progress():
    test, state = PflugTest(burn_in=2), PflugState()
    fired = [test.update(state, np.array([1.0, 1.0])) for _ in range(10)]
    assert not any(fired)
    state = PflugState()
    fired = [test.update(state, np.array([(-1.0) ** t, 0.0])) for t in range(10)]
    assert any(fired)


def test_dropcompute_warmup_then_fixed_tau():
    scheme = make_scheme("dropcompute", n=4, M=3, tau=2.5, warmup=2)
    assert scheme.plan(1).tau == float("inf")
    assert scheme.plan(2).tau == 2.5
    parts = scheme.plan(0).parts
    assert parts[1] == (3, 4, 5) and scheme.plan(0).n_parts == 12


def test_dropcompute_normalizations():
    plan_total = make_scheme("dropcompute", n=2, M=2, tau=1.0)
    plan_comp = make_scheme("dropcompute", n=2, M=2, tau=1.0, normalize="computed")
    total = np.array([3.0])
    assert plan_total.combine_sum(total, 3, plan_total.plan(0)).gradient[0] == 3.0
    assert plan_comp.combine_sum(total, 3, plan_comp.plan(0)).gradient[0] == pytest.approx(4.0)


def test_reset_restores_state():
    scheme = make_scheme("adaptive_k", n=5, k0=1, burn_in=0)
    scheme.state.k = 4
    scheme.reset()
    assert scheme.state.k == 1


def _started_loop(times, tau, check, fwd):
    """Micro-batches a worker starts (computes) under the timer: the kept ones plus one the timer interrupts."""
    clock = 0.0
    for m, length in enumerate(times):
        if clock >= tau and check != "idealized":
            return m                      # checked before the micro-batch: not started
        if check == "idealized" and clock + length > tau:
            return m + 1                  # stopped at tau inside it
        if check == "official" and clock + fwd * length >= tau:
            return m + 1                  # interrupted after its forward pass
        clock += length
    return len(times)


@pytest.mark.parametrize("check", ["official", "before_microbatch", "idealized"])
def test_dropcompute_schedule_is_the_timer_rule(check):
    """The schedule the clusters execute: kept and stop from local_stop, started from a plain loop, chunk ends
    clipped at the stop, ready = stop + communication."""
    rng = np.random.default_rng(7)
    scheme = make_scheme("dropcompute", n=40, M=12, check=check)
    micro = 1 + 0.5 * rng.lognormal(-0.5, 1.0, size=(40, 12))
    comm = rng.uniform(0.5, 1.5, size=40)
    for tau in (0.5, 5.0, 11.3, 17.0, float("inf")):
        schedule = scheme.schedule(micro, comm, tau)
        counts, times = local_stop(micro, tau, check, 1 / 3)
        np.testing.assert_array_equal(schedule.kept, counts)
        np.testing.assert_array_equal(schedule.stop, times)
        assert schedule.started.tolist() == [_started_loop(row, tau, check, 1 / 3) for row in micro]
        np.testing.assert_array_equal(schedule.ready, times + comm)
        assert schedule.duration == float(np.max(times + comm))
        assert schedule.drop_rate == pytest.approx(1 - counts.sum() / counts.size / 12)
        assert np.all(schedule.chunk_end <= schedule.stop[:, None])
        kept_ends = schedule.chunk_end[np.arange(12)[None, :] < counts[:, None]]
        # a kept chunk ends at its cumulative time (up to round-off: the stop may be computed as end - micro)
        np.testing.assert_allclose(kept_ends, np.cumsum(micro, axis=1)[np.arange(12)[None, :] < counts[:, None]],
                                   rtol=1e-15)
    steps = scheme.schedule(micro[None].repeat(3, axis=0), comm[None].repeat(3, axis=0), 11.3)   # many steps at once
    np.testing.assert_array_equal(steps.kept[2], scheme.schedule(micro, comm, 11.3).kept)


def test_decentralized_interface_is_declared():
    scheme = make_scheme("dropcompute", n=4, M=3, tau=2.2, warmup=0)
    assert isinstance(scheme, gradcode.schemes._base.DecentralizedScheme) and scheme.decentralized
    assert not make_scheme("sync", n=4).decentralized and not make_scheme("sync", n=4).exact
    assert make_scheme("coded", n=6, code="cyclic_mds", s=2).exact
    plan = scheme.plan(0)
    schedule = scheme.schedule(np.ones((4, 3)), np.zeros(4), plan.tau)
    kept = schedule.kept_parts(plan)
    assert kept.tolist() == [0, 1, 3, 4, 6, 7, 9, 10]       # 2 + 1/3 > tau = 2.2: two kept per worker
    msgs = np.arange(16.0).reshape(8, 2)
    # one combine signature: the kept chunks' messages, or their sum and count
    np.testing.assert_array_equal(scheme.combine(msgs, kept, plan).gradient,
                                  scheme.combine_sum(msgs.sum(axis=0), len(kept), plan).gradient)


# --- DropCompute's predictive check ---------------------------------------------------------------------------------
def test_predictive_never_starts_a_micro_batch_predicted_to_end_after_tau():
    """Over consecutive steps of a run (the history carried by ``observe``), with the worker's running mean tracked
    here independently from what each schedule says it completed: every started micro-batch was predicted to end by
    ``tau``, every kept one did, and a worker that stops before a micro-batch stops because its prediction was
    late (the rule is not more timid than it says). A micro-batch abandoned after its forward enters the history
    too (its time is known from the forward)."""
    rng = np.random.default_rng(11)
    n, M, tau = 30, 12, 17.0
    scheme = make_scheme("dropcompute", n=n, M=M, check="predictive", tau=tau, warmup=2, micro_load=1.0)
    total, count = np.zeros(n), np.zeros(n)
    declined = interrupted = 0
    for t in range(12):
        micro = 1 + 0.5 * rng.lognormal(-0.5, 1.0, size=(n, M))
        comm = np.full(n, 1.0)
        limit = scheme.plan(t).tau
        schedule = scheme.schedule(micro, comm, limit)
        for i in range(n):
            clock, s, c = 0.0, total[i], count[i]
            for m in range(M):
                predicted = clock + (s / c if c else 0.0)
                if m == schedule.started[i]:                  # the first micro-batch not started
                    assert m == M or predicted > limit
                    declined += m < M
                    break
                assert predicted <= limit                      # started: predicted in time
                if m == schedule.kept[i]:                      # started, not kept: dropped after its forward
                    assert clock + micro[i, m] > limit
                    assert schedule.stop[i] == pytest.approx(clock + micro[i, m] / 3)
                    interrupted += 1
                    break
                assert clock + micro[i, m] <= limit            # kept: it ended in time
                clock, s, c = clock + micro[i, m], s + micro[i, m], c + 1
        done = np.arange(M)[None, :] < schedule.started[:, None]
        total += np.where(done, micro, 0.0).sum(axis=1)
        count += done.sum(axis=1)
        scheme.observe(t, micro, comm)
        np.testing.assert_allclose(scheme.state.history[0], total)
        np.testing.assert_array_equal(scheme.state.history[1], count)
    assert declined > 0 and interrupted > 0                    # both checks fired on this seed


def test_predictive_replay_is_the_run_step_by_step():
    rng = np.random.default_rng(2)
    micro = 1 + 0.5 * rng.lognormal(-0.5, 1.0, size=(6, 5, 12))
    comm = np.ones((6, 5))
    scheme = make_scheme("dropcompute", n=5, M=12, check="predictive", tau=16.0, warmup=0, micro_load=1.0)
    stacked = scheme.replay(micro, comm, 16.0)
    assert scheme.state.history is None                         # restored
    for t in range(6):
        one = scheme.schedule(micro[t], comm[t], 16.0)
        np.testing.assert_array_equal(stacked.kept[t], one.kept)
        np.testing.assert_array_equal(stacked.stop[t], one.stop)
        scheme.observe(t, micro[t], comm[t])
    assert make_scheme("dropcompute", n=5, M=12, tau=16.0).replay(micro, comm, 16.0).kept.shape == (6, 5)


def test_predictive_needs_a_forward_pass():
    with pytest.raises(ConfigError, match="forward_share > 0"):
        make_scheme("dropcompute", n=4, check="predictive", forward_share=0.0)
