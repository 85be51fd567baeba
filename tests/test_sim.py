"""The simulated cluster: timing against order-statistic theory, DropCompute against the reference table
(docs/references.md#dropcompute), training, common random numbers, and the seams of the shared driver."""

import json
import math
import re

import numpy as np
import pytest

import gradcode
from gradcode import make_delay, make_scheme, make_workload, simulate
from gradcode.clusters.driver import StopPolicy
from gradcode.clusters.records import as_written, build_record, record_responders, record_spans
from gradcode.clusters.sim import SimulationError
from gradcode.schemes._base import Combined, DecentralizedScheme, Plan, Schedule
from gradcode.spec import RunOptions


def harmonic(m: int) -> float:
    return float(sum(1.0 / i for i in range(1, m + 1)))


def mean_time(scheme, delay, iterations, seed=0, **kw):
    return simulate(scheme, delay, iterations=iterations, seed=seed, late_workers="abandon", **kw).summary[
        "mean_iteration_time"]


# --- timing matches theory ----------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [10, 50, 90])
def test_fastest_k_exponential(k):
    n, mu = 100, 2.0
    expected = (harmonic(n) - harmonic(n - k)) / mu
    got = mean_time(make_scheme("fastest_k", n=n, k=k), make_delay("exponential", mu=mu), 20000)
    assert got == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("k", [20, 80, 100])
def test_fastest_k_shifted_exponential(k):
    n, a, mu = 100, 1.0, 0.5
    expected = a + (harmonic(n) - harmonic(n - k)) / mu
    got = mean_time(make_scheme("fastest_k", n=n, k=k), make_delay("shifted_exponential", a=a, mu=mu), 20000)
    assert got == pytest.approx(expected, rel=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("code, s", [("cyclic_repetition", 4), ("cyclic_mds", 9), ("expander", 3)])
def test_coded_at_n_minus_s_with_load_s_plus_1(code, s):
    n, a, mu = 100, 1.0, 1.0
    load = s + 1
    expected = load * a + (load / mu) * (harmonic(n) - harmonic(s))
    scheme = make_scheme("coded", n=n, code=code, s=s) if code != "expander" else \
        make_scheme("coded", n=n, code=code, s=s, wait=n - s)
    # 4,000 iterations: the standard error of the mean is ~0.15% of it (sd ~3 of ~34 units), the tolerance 1%;
    # exact codes check each iteration's responders for a decode, 20,000 took 14 s
    got = mean_time(scheme, make_delay("shifted_exponential", a=a, mu=mu), 4000)
    assert got == pytest.approx(expected, rel=0.01)


def test_backup_workers():
    k, b, mu = 95, 5, 1.0
    expected = 1.0 + (harmonic(k + b) - harmonic(b)) / mu
    got = mean_time(make_scheme("backup", n=k + b, b=b), make_delay("shifted_exponential", a=1.0, mu=mu), 20000)
    assert got == pytest.approx(expected, rel=0.01)


def test_theory_through_the_delay_model():
    # The same check through the model's own order statistic (numeric integration for Pareto).
    delay = make_delay("pareto", alpha=3.0, t_m=1.0)
    expected = delay.expected_order_statistic(30, 40)
    got = mean_time(make_scheme("fastest_k", n=40, k=30), delay, 20000)
    assert got == pytest.approx(expected, rel=0.01)


# --- DropCompute: the reference table -------------------------------------------------------------------------------
# the reference table's setting: every micro-batch is one unit of the delay model (micro_load = 1, not the default 1/M)
PAPER = {"M": 12, "micro_load": 1.0}


def _dropcompute_speedup(n, taus, check, iterations=400, seed=1):
    M = PAPER["M"]
    delay = make_delay("lognormal", comm=0.1 * M * 1.5)   # communication = 10% of the mean compute (M * 1.5)
    base = simulate(make_scheme("dropcompute", n=n, **PAPER, tau=None), delay, iterations=iterations,
                    seed=seed).summary
    out = []
    for tau in taus:
        scheme = make_scheme("dropcompute", n=n, **PAPER, tau=tau, warmup=0, check=check)
        res = simulate(scheme, delay, iterations=iterations, seed=seed)
        drop = np.mean([r["drop_rate"] for r in res.records])
        out.append((1 - drop) * base["mean_iteration_time"] / res.summary["mean_iteration_time"])
    return np.array(out)


@pytest.mark.slow
@pytest.mark.parametrize("n, expected", [(32, 1.15), (200, 1.20)])
def test_dropcompute_official_speedup_matches_reference(n, expected):
    taus = np.linspace(0.75, 1.05, 31) * 18.0
    speedups = _dropcompute_speedup(n, taus, "official")
    assert speedups.max() == pytest.approx(expected, abs=0.03)


@pytest.mark.slow
@pytest.mark.parametrize("n, expected", [(32, 1.20), (200, 1.31)])
def test_dropcompute_idealized_speedup_matches_reference(n, expected):
    # measured: 1.17 at n = 32 (reference 1.20), 1.31 at n = 200 (reference 1.31); the issue gives no tolerance for
    # this row, 0.04 covers the Monte Carlo spread of a 400-step run
    taus = np.linspace(0.75, 1.05, 31) * 18.0
    speedups = _dropcompute_speedup(n, taus, "idealized")
    assert speedups.max() == pytest.approx(expected, abs=0.04)


@pytest.mark.slow
def test_dropcompute_predictive_lands_between_official_and_idealized():
    """The predictive check (ours) through the simulated cluster, its running means carried from step to step by
    ``observe``, on the reference setting at n = 200 (seed 1): best speedup over the same taus above the official
    check's and below the idealized one's (measured: 1.21 < 1.30 < 1.31, examples/dropcompute_scaling.py)."""
    taus = np.linspace(0.85, 1.05, 9) * 18.0
    best = {check: _dropcompute_speedup(200, taus, check, iterations=200).max()
            for check in ("official", "predictive", "idealized")}
    assert best["official"] + 0.03 < best["predictive"] < best["idealized"], best


@pytest.mark.slow
@pytest.mark.parametrize("n", [32, 200])
def test_dropcompute_auto_tau_is_near_the_best(n):
    M, iterations, seed = PAPER["M"], 400, 1
    delay = make_delay("lognormal", comm=0.1 * M * 1.5)
    best = _dropcompute_speedup(n, np.linspace(0.75, 1.05, 31) * 18.0, "official", iterations, seed).max()
    warmup, record = 5, 40
    base = simulate(make_scheme("dropcompute", n=n, **PAPER, tau=None), delay, iterations=iterations,
                    seed=seed).records[warmup + record:]
    auto = simulate(make_scheme("dropcompute", n=n, **PAPER, tau="auto", warmup=warmup, record_steps=record), delay,
                    iterations=iterations, seed=seed).records[warmup + record:]
    drop = np.mean([r["drop_rate"] for r in auto])
    t_base = np.mean([r["end"] - r["start"] for r in base])
    t_auto = np.mean([r["end"] - r["start"] for r in auto])
    assert math.isfinite(auto[-1]["tau"])
    assert (1 - drop) * t_base / t_auto == pytest.approx(best, abs=0.02)


def test_dropcompute_huge_tau_is_sync():
    delay = make_delay("lognormal", comm=1.0)
    wl = make_workload("least_squares", n_samples=480, dim=5, seed=0)
    sync = simulate(make_scheme("dropcompute", n=8, M=6, tau=None), delay, wl, iterations=30, seed=3)
    huge = simulate(make_scheme("dropcompute", n=8, M=6, tau=1e12, warmup=0), delay, wl, iterations=30, seed=3)
    assert [r["end"] for r in sync.records] == [r["end"] for r in huge.records]
    np.testing.assert_array_equal(sync.params, huge.params)
    plain = simulate(make_scheme("sync", n=8), delay, iterations=30, seed=3)
    assert all(r["drop_rate"] == 0 for r in huge.records)
    assert len(plain.records) == 30


# --- training -------------------------------------------------------------------------------------------------
N_WORKERS = 12


@pytest.fixture(scope="module")
def workload():
    return make_workload("least_squares", n_samples=1200, dim=10, noise=0.5, seed=0)


def _target(wl, frac=0.05):
    start = wl.loss(wl.init_params())
    return wl.optimal_loss + frac * (start - wl.optimal_loss)


ALL_SCHEMES = [
    ("sync", {}),
    ("fastest_k", {"k": 8}),
    ("backup", {"b": 2}),
    ("adaptive_k", {"k0": 2}),
    ("adaptive_k_load", {"max_batch": 8}),
    ("coded", {"code": "cyclic_repetition", "s": 2}),
    ("coded", {"code": "fractional_repetition", "s": 2}),
    ("coded", {"code": "expander", "s": 3}),
    ("dropcompute", {"M": 4, "tau": "auto", "record_steps": 10}),
    ("dropcompute", {"M": 4, "tau": "auto", "record_steps": 10, "check": "predictive"}),
    ("anytime", {"M": 4}),
]


@pytest.mark.parametrize("name, params", ALL_SCHEMES)
def test_every_scheme_reaches_the_target_loss(workload, name, params):
    scheme = make_scheme(name, n=N_WORKERS, **params)
    target = _target(workload)
    res = simulate(scheme, make_delay("shifted_exponential", mu=0.5), workload, iterations=400, seed=0,
                   target_loss=target)
    assert res.summary["time_to_target"] is not None, f"{name} ended at loss {res.summary['final_loss']}"
    assert all(np.isfinite(r["end"]) and r["end"] >= r["start"] for r in res.records)


@pytest.mark.parametrize("code, s", [("cyclic_repetition", 2), ("fractional_repetition", 3), ("cyclic_mds", 3),
                                     ("reed_solomon", 2)])
def test_exact_codes_follow_sync_and_finish_sooner(workload, code, s):
    # two workers are 8x slower in every iteration: sync waits for them, a code with s >= 2 does not
    delay = make_delay("persistent", base={"name": "shifted_exponential", "mu": 5.0}, workers=[1, 6], slowdown=8.0)
    sync = simulate(make_scheme("sync", n=N_WORKERS), delay, workload, iterations=40, seed=0)
    coded = simulate(make_scheme("coded", n=N_WORKERS, code=code, s=s), delay, workload, iterations=40, seed=0)
    np.testing.assert_allclose(coded.params, sync.params, rtol=1e-8, atol=1e-10)
    assert coded.summary["total_time"] < sync.summary["total_time"]
    assert all(r["method"] == "exact" and r["residual"] < 1e-8 for r in coded.records)


def test_adaptive_k_switches_and_beats_k_equals_1(workload):
    delay = make_delay("shifted_exponential", mu=0.5)
    budget = 150.0
    adaptive = simulate(make_scheme("adaptive_k", n=N_WORKERS, k0=1, burn_in=5), delay, workload,
                        iterations=5000, seed=0, time_budget=budget)
    fixed = simulate(make_scheme("fastest_k", n=N_WORKERS, k=1), delay, workload, iterations=5000, seed=0,
                     time_budget=budget)
    ks = [r["k"] for r in adaptive.records]
    assert max(ks) > 1
    gap = lambda res: res.summary["final_loss"] - workload.optimal_loss  # noqa: E731
    assert gap(adaptive) < gap(fixed)


def test_adaptive_k_load_computes_less_than_adaptive_k(workload):
    delay = make_delay("shifted_exponential", mu=0.5)
    target = _target(workload, 0.02)
    runs = {}
    for name, params in (("adaptive_k", {"k0": 1, "batch": 8}), ("adaptive_k_load", {"max_batch": 8})):
        res = simulate(make_scheme(name, n=N_WORKERS, **params), delay, workload, iterations=3000, seed=0,
                       target_loss=target)
        assert res.summary["time_to_target"] is not None, name
        runs[name] = res.summary["computed"]
    assert runs["adaptive_k_load"] < runs["adaptive_k"]


# --- common random numbers and determinism --------------------------------------------------------------------
def test_same_world_for_every_scheme():
    delay = make_delay("shifted_exponential", mu=1.0)
    n, iters = 20, 50
    sync = simulate(make_scheme("sync", n=n), delay, iterations=iters, seed=7, late_workers="abandon")
    fast = simulate(make_scheme("fastest_k", n=n, k=5), delay, iterations=iters, seed=7, late_workers="abandon")
    compute, comm = delay.sample(7, np.arange(iters), n, 1.0)
    T = np.sort(compute + comm, axis=1)
    np.testing.assert_allclose([r["end"] - r["start"] for r in sync.records], T[:, -1])
    np.testing.assert_allclose([r["end"] - r["start"] for r in fast.records], T[:, 4])


def test_runs_are_pure_functions_of_their_inputs(workload):
    delay = make_delay("bimodal")
    scheme = make_scheme("adaptive_k", n=N_WORKERS, k0=1, burn_in=3)
    a = simulate(scheme, delay, workload, iterations=60, seed=4)
    b = simulate(scheme, delay, workload, iterations=60, seed=4)   # same object, reset between runs
    assert as_written(a.records) == as_written(b.records)
    c = simulate(scheme, delay, workload, iterations=60, seed=5)
    assert as_written(a.records) != as_written(c.records)


def test_late_workers_finish_their_work():
    # worker 0 takes 10 every iteration, the rest 1; fastest-k with k = n - 1 never waits for it, and in "finish"
    # mode worker 0 is busy for 10 units, so it never responds within a 1-unit iteration.
    delay = make_delay("persistent", base={"name": "constant"}, workers=[0], slowdown=10.0)
    res = simulate(make_scheme("fastest_k", n=4, k=3), delay, iterations=12, seed=0)
    assert all(0 not in r["responders"] for r in res.records)
    assert all(r["end"] - r["start"] == pytest.approx(1.0) for r in res.records)


def test_unmeetable_stop_rule_is_an_error():
    delay = make_delay("unresponsive", base="exponential", workers=[2])
    with pytest.raises(SimulationError, match=r"\[2\]"):
        simulate(make_scheme("sync", n=4), delay, iterations=3, seed=0)
    res = simulate(make_scheme("fastest_k", n=4, k=3), delay, iterations=3, seed=0)
    assert all(2 not in r["responders"] for r in res.records)


def test_records_have_the_documented_fields(workload):
    res = simulate(make_scheme("coded", n=N_WORKERS, code="cyclic_repetition", s=2), "exponential", workload,
                   iterations=3, seed=0)
    for key in ("scheme", "iteration", "start", "end", "ideal_end", "responders", "k", "load", "residual", "loss",
                "grad_error", "messages", "computed"):
        assert key in res.records[0]
    for key in ("mean_iteration_time", "total_time", "iterations", "final_loss"):
        assert key in res.summary


def test_bad_run_parameters():
    scheme = make_scheme("sync", n=3)
    with pytest.raises(gradcode.ConfigError, match="iterations"):
        simulate(scheme, "exponential", iterations=0)
    with pytest.raises(gradcode.ConfigError, match="late_workers"):
        simulate(scheme, "exponential", late_workers="sometimes")
    with pytest.raises(gradcode.ConfigError, match="target_loss"):
        simulate(scheme, "exponential", target_loss=1.0)


# --- the seams of the shared driver ---------------------------------------------------------------------------
class FirstChunks(DecentralizedScheme):
    """A toy decentralized scheme, declared only through the interface: every worker keeps its first ``keep`` of
    ``M`` chunks, then stops; the kept gradients are averaged to the full sum."""

    name = "first_chunks"

    def __init__(self, n: int, *, M: int = 3, keep: int = 2):
        super().__init__(n)
        self.M, self.keep = M, keep
        self._parts = tuple(tuple(range(i * M, (i + 1) * M)) for i in range(n))
        self.seen: list[int] = []
        self.reset()

    def plan(self, t: int) -> Plan:
        return Plan(t=t, parts=self._parts, n_parts=self.n * self.M, load=np.full(self.n, float(self.M)),
                    micro_batches=self.M)

    def micro_times(self, delay, seed, t):
        micro, comm = delay.sample_micro(seed, t, self.n, self.M)
        return micro[0], comm[0]

    def schedule(self, micro, comm_time, tau) -> Schedule:
        end = np.cumsum(micro, axis=-1)
        kept = np.full(self.n, self.keep)
        stop = end[:, self.keep - 1]
        return Schedule(chunk_end=np.minimum(end, stop[:, None]), started=kept, kept=kept, stop=stop,
                        comm_time=comm_time)

    def combine_sum(self, total, parts, plan) -> Combined:
        return Combined(total * (plan.n_parts / parts), method="toy")

    def observe(self, t, micro, comm_time) -> None:
        self.seen.append(t)


def test_a_new_decentralized_scheme_runs_through_the_declared_interface(workload):
    n, M, keep, seed, lr = 4, 3, 2, 5, 0.01
    delay = make_delay("exponential", comm=0.5)
    scheme = FirstChunks(n, M=M, keep=keep)
    res = simulate(scheme, delay, workload, iterations=4, seed=seed, lr=lr)
    assert scheme.seen == [0, 1, 2, 3]
    w = np.array(workload.init_params(), dtype=float)
    kept = [i * M + m for i in range(n) for m in range(keep)]
    for t, rec in enumerate(res.records):
        micro, comm = delay.sample_micro(seed, t, n, M)
        assert rec["end"] - rec["start"] == pytest.approx(np.max(micro[0, :, :keep].sum(axis=1) + comm[0]))
        assert rec["load"] == float(keep) and rec["drop_rate"] == pytest.approx(1 - keep / M)
        assert rec["method"] == "toy" and rec["responders"].tolist() == list(range(n))
        P = workload.gradients(w, t, range(n * M), n * M, None)
        g = P[kept].sum(axis=0) * (n * M / len(kept))
        assert rec["grad_error"] == pytest.approx(np.linalg.norm(g - P.sum(axis=0)) / np.linalg.norm(P.sum(axis=0)))
        w = w - lr * g
    np.testing.assert_allclose(res.params, w, rtol=1e-12)


def test_every_record_comes_from_one_builder(workload):
    base = build_record(make_scheme("sync", n=2), 0, 0.0, 1.0, ideal_end=1.0, responders=[0, 1], load=[1.0, 1.0],
                        messages=2, computed=2.0, wasted=0.0, combined=None, loss=None, grad_error=None,
                        measured={})
    runs = {
        "master": simulate(make_scheme("fastest_k", n=6, k=3), "exponential", workload, iterations=3),
        "vectorised": simulate(make_scheme("fastest_k", n=6, k=3), "exponential", iterations=3,
                               late_workers="abandon"),
        "timing": simulate(make_scheme("fastest_k", n=6, k=3), "exponential", iterations=3),
        "decentralized": simulate(make_scheme("dropcompute", n=6, M=2), "exponential", workload, iterations=3),
    }
    for name, res in runs.items():
        assert set(base) - {"k"} <= set(res.records[0]), name
    assert set(runs["vectorised"].records[0]) == set(runs["timing"].records[0])
    assert set(runs["master"].records[0]) - set(runs["timing"].records[0]) == {"busy", "worker_computed",
                                                                                "worker_used"}
    assert set(runs["decentralized"].records[0]) - set(runs["master"].records[0]) == {"drop_rate", "tau", "M"}


def test_stop_policy_virtual_and_wall_clock_forms_agree():
    # the simulator counts the first arrivals that end an iteration; the MPI master checks arrivals one by one
    for scheme in (make_scheme("coded", n=6, code="fractional_repetition", s=2), make_scheme("backup", n=6, b=2)):
        policy, plan = StopPolicy(scheme), scheme.plan(0)
        for seed in range(20):
            arrive = np.random.default_rng(seed).exponential(size=6)
            order = np.argsort(arrive)
            m = policy.count(order, arrive[order], 0.0, plan)
            responders: list[int] = []
            for i in order:
                responders.append(int(i))
                if policy.holds(responders, plan, None):
                    break
            assert len(responders) == m
    # an exact code whose answering workers cannot decode: all that answer, and the wall clock waits for the same
    scheme = make_scheme("coded", n=6, code="cyclic_mds", s=2)
    policy = StopPolicy(scheme)
    arrive = np.array([1.0, np.inf, 2.0, np.inf, np.inf, np.inf])
    order = np.array([0, 2])
    plan = scheme.plan(0)
    assert policy.count(order, arrive[order], 0.0, plan) == 2
    fallback = policy.fallback([0, 2], plan)
    assert fallback == {(0, 1), (2, 1)}      # messages (worker, chunks): one each
    assert not policy.holds([0], plan, fallback) and policy.holds([0, 2], plan, fallback)
    assert policy.fallback([0, 1, 2, 3], plan) is None       # decodable: no fallback
    with pytest.raises(SimulationError, match=r"\[1, 3, 4, 5\]"):
        StopPolicy(make_scheme("sync", n=6)).count(order, arrive[order], 0.0, scheme.plan(0))
    # a deadline cuts at the last arrival in time, once one has arrived
    approx = make_scheme("coded", n=6, code="expander", s=2, deadline=1.5)
    arrive = np.array([1.0, 2.0, 0.5, 3.0, 1.4, 9.0])
    assert StopPolicy(approx).count(np.argsort(arrive), np.sort(arrive), 0.0, approx.plan(0)) == 3
    assert StopPolicy.out_of_time([2], 1.5, approx.plan(0)) and not StopPolicy.out_of_time([], 9.0, approx.plan(0))


@pytest.mark.parametrize("scheme,params", [("fastest_k", {"k": 4}), ("coded", {"code": "cyclic_repetition", "s": 1}),
                                           ("partial_coded", {"s": 1})])
def test_a_record_completed_later_is_the_record(workload, scheme, params):
    """The MPI master returns only a record's head (what the loop needs to decide whether to stop) and completes it
    once its next plans are out (``Driver.record_later``, ``complete_record``): the same records, in the same key
    order, as built at once, with fields the cluster added to the head in between kept last."""
    from gradcode.clusters.records import complete_record
    from gradcode.clusters.sim import SimulatedCluster
    from gradcode.delays import make_delay as delay_of

    class Deferring(SimulatedCluster):
        pending = None

        def record_later(self, head, fill):
            assert self.pending is None        # completed before the next one, as the master does
            self.pending = (head, fill)
            return head

        def emit(self, rec):
            rec["master_us"] = 1.0              # added to the head, as the master does
            complete_record(*self.pending)
            self.pending = None

    def records(cls):
        cluster = cls(make_scheme(scheme, n=6, **params), delay_of("exponential"), workload,
                      RunOptions(seed=4, iterations=4, loss_every=2))
        return cluster.run()

    now, later = records(SimulatedCluster), records(Deferring)
    assert [list(r) for r in later] == [[*r, "master_us"] for r in now]
    assert as_written([{k: v for k, v in r.items() if k != "master_us"} for r in later]) == as_written(now)


# --- exact codes stop where the MPI master stops: at the first decodable prefix ----------------------------
EXACT_CODES = ["uncoded", "fractional_repetition", "cyclic_repetition", "cyclic_mds", "reed_solomon",
               "reed_solomon_gf"]


def _exact_code_params():
    from hypothesis import strategies as st

    def valid_s(name, n):
        if name == "uncoded":
            return [0]
        if name == "fractional_repetition":
            return [s for s in range(n) if n % (s + 1) == 0]
        return list(range(n))
    return st.sampled_from(EXACT_CODES).flatmap(lambda name: st.integers(2, 16).flatmap(
        lambda n: st.tuples(st.just(name), st.just(n), st.sampled_from(valid_s(name, n)))))


def first_decodable_prefix(code, order):
    """What the MPI master finds asking after every arrival, with the code's own decoder on a fresh code object."""
    return next((m for m in range(1, len(order) + 1) if code.is_decodable(list(order[:m]))), None)


def test_every_registered_exact_code_is_in_the_property_test():
    exact = [name for name in gradcode.list_codes() if gradcode.make_code(name, 6, 0 if name == "uncoded" else 1).exact]
    assert sorted(exact) == sorted(EXACT_CODES)


def _property_test(fn):
    from hypothesis import given, settings
    from hypothesis import strategies as st
    return settings(max_examples=150, deadline=None)(
        given(params=_exact_code_params(), data=st.data(), seed=st.integers(0, 3))(fn))


@pytest.mark.filterwarnings("ignore::gradcode.errors.DecodeFallbackWarning")
@_property_test
def test_the_stop_of_an_exact_code_is_its_first_decodable_prefix(params, data, seed):
    from hypothesis import strategies as st

    from gradcode.clusters.sim import stop_counts
    name, n, s = params
    scheme = make_scheme("coded", n=n, code=name, s=s, seed=seed)
    fresh = gradcode.make_code(name, n, s, seed=seed)          # the decoder alone, no scheme cache in between
    orders = [data.draw(st.permutations(range(n))) for _ in range(12)]
    expected = [first_decodable_prefix(fresh, order) for order in orders]
    assert all(m is not None for m in expected)                # all n always decode
    # the per-iteration path (and the MPI master's ideal) ...
    assert [scheme.stop_index(np.array(order), scheme.plan(0)) for order in orders] == expected
    # ... the MPI master's own rule, arrival by arrival ...
    policy = StopPolicy(scheme)
    for order, m in zip(orders, expected, strict=True):
        got = next(k for k in range(1, n + 1) if policy.holds(list(order[:k]), scheme.plan(0), None))
        assert got == m
    # ... and the timing-only pass, row by row
    times = np.empty((len(orders), n))
    for j, order in enumerate(orders):
        times[j, order] = np.arange(1.0, n + 1)
    assert stop_counts(scheme, scheme.plan(0), np.argsort(times, axis=1), times).tolist() == expected


@pytest.mark.parametrize("code, n, s", [("cyclic_repetition", 20, 3), ("cyclic_mds", 12, 2), ("cyclic_mds", 7, 3),
                                        ("fractional_repetition", 12, 2)])
def test_the_combine_reuses_the_stops_exact_decode(code, n, s, monkeypatch):
    """The stop rule's normal-equations verdict hands its weights to the decoder: the combine after a
    stop solves nothing more, and its weights and residual are the decoder's own, to rounding."""
    scheme = make_scheme("coded", n=n, code=code, s=s, seed=1)
    fresh = gradcode.make_code(code, n, s, seed=1)
    rng = np.random.default_rng(0)
    partials = rng.standard_normal((scheme.code.n_parts, 30))
    orders = [rng.permutation(n) for _ in range(25)]
    stops = [scheme.stop_index(order, scheme.plan(0)) for order in orders]
    wants = [fresh.decoding(order[:m].tolist(), "auto") for order, m in zip(orders, stops, strict=True)]
    solves = []
    monkeypatch.setattr(type(scheme.code), "_optimal_weights",
                        lambda self, F: solves.append(F) or pytest.fail("a second solve after the stop"))
    for order, m, want in zip(orders, stops, wants, strict=True):
        responders = order[:m].tolist()
        got = scheme.combine(scheme.messages(partials, responders, scheme.plan(0)), responders, scheme.plan(0))
        assert got.method == want.method == "exact"
        assert got.residual <= fresh.tol and want.residual <= fresh.tol
        np.testing.assert_allclose(scheme.code.decode(responders), want.weights, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(got.gradient, partials.sum(axis=0), rtol=1e-9, atol=1e-9)
    assert solves == [] or code == "fractional_repetition"   # its own decoder (coverage), no least squares


def test_a_decode_kept_from_elsewhere_must_be_exact():
    from gradcode.codes import Decoding

    code = gradcode.make_code("cyclic_repetition", 6, 1)
    F = np.array([0, 1, 2, 3, 4], dtype=np.int64)
    with pytest.raises(ValueError, match="not an exact decode within tol"):
        code.remember_exact(F, Decoding(np.zeros(6), 0.5, "exact"))
    with pytest.raises(ValueError, match="not an exact decode within tol"):
        code.remember_exact(F, Decoding(np.zeros(6), 0.0, "optimal"))


@pytest.mark.parametrize("code, n, s", [("cyclic_mds", 4, 1), ("cyclic_mds", 8, 2), ("fractional_repetition", 6, 2),
                                        ("cyclic_repetition", 8, 2), ("reed_solomon", 8, 2)])
def test_timing_only_runs_stop_at_the_first_decodable_prefix(code, n, s):
    scheme = make_scheme("coded", n=n, code=code, s=s)
    fresh = gradcode.make_code(code, n, s)
    res = simulate(scheme, make_delay("pareto", alpha=2.0), iterations=300, seed=0, late_workers="abandon")
    early = 0
    for rec in res.records:
        order = np.argsort(np.array(rec["worker_delay"], dtype=float), kind="stable")
        m = first_decodable_prefix(fresh, order)
        assert np.asarray(rec["responders"]).tolist() == order[:m].tolist()
        assert rec["end"] - rec["start"] == pytest.approx(rec["worker_delay"][order[m - 1]])
        early += m < n - s
    # the codes that decode early do so in these runs (cyclic MDS at n = 4, s = 1: {0, 2}; n = 8, s = 2: {0, 2, 4, 6})
    assert (early > 0) == fresh.early_decoding


# --- divergence is never silent; adaptive_k_load's default step follows its batch --------------------------
def test_divergence_is_flagged_in_the_summary():
    from gradcode.clusters.records import DIVERGENCE_FACTOR, summarize

    def run(losses):
        return summarize([{"scheme": "sync", "iteration": t, "start": t, "end": t + 1.0, "ideal_end": t + 1.0,
                           "computed": 1.0, "wasted": 0.0, "messages": 1, "loss": loss}
                          for t, loss in enumerate(losses)])

    calm = run([10.0, 5.0, 9.0 * DIVERGENCE_FACTOR, 1.0])
    assert calm["diverged"] is False and "divergence_note" not in calm
    grew = run([10.0, 50.0, 11.0 * DIVERGENCE_FACTOR, 3.0])      # came back down: still flagged, with the end
    assert grew["diverged"] is True
    assert "from 10 (iteration 0) to 110 (iteration 2), 3 at the end" in grew["divergence_note"]
    assert "step is too large for the batch" in grew["divergence_note"]
    nan = run([10.0, float("nan")])
    assert nan["diverged"] is True and "nan at iteration 1" in nan["divergence_note"]
    assert "diverged" not in run([None, None])                  # timing only: nothing to say


@pytest.mark.parametrize("workload", ["least_squares", "logistic", "softmax_digits", "mlp"])
def test_adaptive_k_load_default_step_does_not_diverge_on_the_shipped_workloads(workload):
    delay = make_delay("pareto", alpha=2.0, comm=0.5)
    for seed in range(3):
        wl = make_workload(workload, seed=seed)
        res = simulate(make_scheme("adaptive_k_load", n=8, max_batch=16), delay, wl, iterations=40, seed=seed)
        assert res.summary["diverged"] is False, (seed, res.summary.get("divergence_note"))
        losses = [r["loss"] for r in res.records]
        assert losses[-1] < losses[0]
    if workload == "least_squares":     # the workload's full-batch step diverges: flagged
        res = simulate(make_scheme("adaptive_k_load", n=8, max_batch=16), delay, make_workload(workload, seed=0),
                       iterations=40, seed=0, lr=make_workload(workload, seed=0).lr)
        assert res.summary["diverged"] is True


def test_batch_lr_is_the_full_step_for_a_full_batch_and_smaller_below():
    wl = make_workload("least_squares", seed=0)
    assert wl.batch_lr(wl.n_samples) == pytest.approx(wl.lr)
    steps = [wl.batch_lr(b) for b in (1, 8, 64, 512)]
    assert steps == sorted(steps) and steps[0] < wl.lr / 10
    assert make_workload("mlp", seed=0).batch_lr(1) == make_workload("mlp", seed=0).lr    # no bound: its lr


def test_a_diverged_run_is_flagged_on_the_terminal_and_in_the_report(tmp_path, capsys):
    import tomli_w

    from gradcode.cli import main

    spec = {"cluster": {"workers": 4, "kind": "sim"}, "workload": {"name": "least_squares", "seed": 0},
            "delays": [{"label": "exp", "name": "exponential"}],
            "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 2}],
            "run": {"iterations": 8, "seeds": [0], "lr": 2.5}}     # three times the workload's 1/L: diverges
    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    assert main(["compare", str(path), "--out", str(tmp_path / "cmp")]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: run ") == 2 and "step is too large" in err
    report = (tmp_path / "cmp" / "report.md").read_text()
    assert "2 run(s) DIVERGED" in report and "DIVERGED" in (tmp_path / "cmp" / "report.html").read_text()
    single = {**spec, "delay": spec["delays"][0], "scheme": spec["schemes"][0], "run": {"iterations": 8, "lr": 2.5}}
    del single["delays"], single["schemes"]
    path.write_text(tomli_w.dumps(single))
    assert main(["simulate", str(path), "--out", str(tmp_path / "one")]) == 0
    assert "warning: diverged: the loss grew" in capsys.readouterr().err
    assert json.loads((tmp_path / "one" / "summary.json").read_text())["diverged"] is True


# --- the timing-only fast paths ------------------------------------------------------------------------------
def _same(x, y) -> bool:
    """Bit for bit: numpy arrays of the same dtype and values (NaN equal to NaN), dicts in the same key order."""
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        x, y = np.asarray(x), np.asarray(y)
        return x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
    if isinstance(x, dict):
        return isinstance(y, dict) and list(x) == list(y) and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, list):
        return isinstance(y, list) and len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y, strict=True))
    return type(x) is type(y) and (x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)))


def test_arrival_order_is_the_stable_argsort():
    from gradcode.clusters.iteration import KEYED_SORT_MIN, arrival_order

    rng = np.random.default_rng(0)
    cases = []
    for n in (1, 2, 7, 300, KEYED_SORT_MIN, 9000):     # the keyed sort from KEYED_SORT_MIN workers on
        cases += [rng.exponential(size=(4, n)), rng.exponential(size=n),
                  np.round(rng.exponential(size=(3, n)), 1),                      # ties: by worker number
                  1.0 + rng.integers(0, 1 << 14, size=(3, n)) * 2.0 ** -52,    # apart in the last bits only
                  1e4 + rng.exponential(size=(3, n)) * 1e-7,      # late in a long run: many short runs to mend
                  np.where(rng.random((2, n)) < 0.3, np.inf, rng.exponential(size=(2, n))),
                  np.full((2, n), 3.0), np.zeros(n), -rng.exponential(size=n)]
        if n > 1:
            cases.append(np.array([0.5, np.nan] + [-0.0] * (n - 2)))
    for T in cases:
        np.testing.assert_array_equal(arrival_order(T), np.argsort(T, axis=-1, kind="stable"))


FINISH_CASES = [("fastest_k", {"k": 5}), ("sync", {}), ("backup", {"b": 3}), ("adaptive_k_load", {}),
                ("coded", {"code": "cyclic_mds", "s": 3}), ("coded", {"code": "fractional_repetition", "s": 1}),
                ("coded", {"code": "expander", "s": 2, "wait": 8})]
FINISH_DELAYS = [("pareto", {}), ("straggle", {"base": {"name": "constant"}, "count": 3, "extra": 2.5}),
                 ("unresponsive", {"base": {"name": "exponential"}, "workers": [4]})]


@pytest.mark.parametrize("delay_name, delay_params", FINISH_DELAYS)
@pytest.mark.parametrize("name, params", FINISH_CASES)
def test_timing_only_finish_gives_the_cluster_loops_records(name, params, delay_name, delay_params):
    """A timing-only run with late workers finishing draws its delays ahead and skips the cluster object
    (``sim._timing_finish``): the records of the cluster's own loop, bit for bit, key order included (ties of
    constant delays, a worker that never answers, an MDS decode checked beyond n - s)."""
    from gradcode.clusters.sim import SimulatedCluster

    delay = make_delay(delay_name, **delay_params)
    scheme = make_scheme(name, n=12, **params)
    try:
        fast = simulate(scheme, delay, iterations=70, seed=5, late_workers="finish", on_record=(seen := []).append)
    except SimulationError as e:
        scheme.reset()
        with pytest.raises(SimulationError, match=re.escape(str(e))):   # the loop raises the same, records or not
            SimulatedCluster(scheme, delay, None, RunOptions(seed=5, iterations=70)).run()
        assert name == "sync" and delay_name == "unresponsive"
        return
    scheme.reset()
    loop = SimulatedCluster(scheme, delay, None, RunOptions(seed=5, iterations=70)).run()
    assert len(fast.records) == len(loop) == 70 and seen == fast.records
    assert all(_same(a, b) for a, b in zip(fast.records, loop, strict=True))


@pytest.mark.parametrize("late", ["abandon", "finish"])
@pytest.mark.parametrize("name, params", [("fastest_k", {"k": 7}), ("coded", {"code": "cyclic_repetition", "s": 2})])
def test_timing_only_counts_whole_unit_loads_exactly(late, name, params):
    """The timing-only passes count whole-unit loads (1 partition a worker; s + 1 for a cyclic code) instead of
    summing arrays: the same floats as the sums over each worker's load."""
    scheme = make_scheme(name, n=12, **params)
    unit = float(np.asarray(scheme.plan(0).load).flat[0])
    res = simulate(scheme, make_delay("pareto", alpha=1.5), iterations=40, seed=3, late_workers=late)
    for rec in res.records:
        responders = record_responders(rec, 12)
        assert rec["used"] == float(np.sum(np.full(12, unit)[responders]))
        assert rec["wasted"] == rec["computed"] - rec["used"]
        assert type(rec["used"]) is float and type(rec["computed"]) is float
        if late == "finish":      # every worker that took the plan up carries its whole load
            assert rec["computed"] == unit * rec["messages"]


def test_whole_unit_only_where_counting_is_exact():
    from gradcode.clusters.driver import whole_unit

    assert whole_unit(np.ones(5)) == 1.0 and whole_unit(np.full((2, 3), 3.0)) == 3.0
    assert whole_unit([1.0, 2.0]) is None and whole_unit(np.full(4, 0.5)) is None
    assert whole_unit(np.full(4, 2.0 ** 52)) is None          # sums past 2^53 are not exact
    assert whole_unit(np.full(4, np.nan)) is None and whole_unit(np.zeros(3)) == 0.0


@pytest.mark.parametrize(("name", "params"), [("sync", {}), ("adaptive_k_load", {}), ("partial_coded", {"s": 2})])
def test_training_draws_made_ahead_are_the_draws_of_each_iteration(monkeypatch, name, params):
    """A training run draws its delays a block of iterations ahead while the load stays the same
    (``SimulatedCluster._draws``); its records and parameters are those of one draw per iteration, also for a
    scheme whose load changes (adaptive_k_load: a block drawn at the old load must not be used)."""
    import gradcode.clusters.sim as sim

    wl = make_workload("least_squares", n_samples=600, dim=6, seed=1)

    def run():
        res = simulate(make_scheme(name, n=6, **params), "pareto", wl, iterations=40, seed=2)
        return json.dumps([res.records, res.params], default=lambda v: v.tolist())

    ahead = run()
    monkeypatch.setattr(sim, "block_rows", lambda n, most=256: 1)
    assert run() == ahead


@pytest.mark.parametrize("name, params", [("sync", {}), ("fastest_k", {"k": 4}), ("backup", {"b": 2}),
                                          ("adaptive_k", {"k0": 2}), ("adaptive_k_load", {})])
def test_one_pass_combine_is_the_messages_combine(monkeypatch, name, params):
    """An averaging scheme's estimate and the full gradient come from one product of weights and partials
    (``SimulatedCluster._combine`` with ``message_weights``); they are what its messages and ``combine`` give, to
    rounding: the same responders, loads and stops, and parameters, losses and gradient errors to 1e-12."""
    from gradcode.schemes._base import Scheme

    wl = make_workload("least_squares", n_samples=600, dim=6, seed=1)
    scheme = make_scheme(name, n=6, **params)
    scheme.bind(delay=make_delay("pareto"))
    assert scheme.sums_messages and scheme.message_weights([0, 2], scheme.plan(0)).tolist() == [1, 0, 1, 0, 0, 0]

    def run():
        # a small step: the full gradient stays far from 0, so the gradient error's rounding stays small
        return simulate(make_scheme(name, n=6, **params), "pareto", wl, iterations=40, seed=2, loss_every=1, lr=0.01)

    one_pass = run()
    monkeypatch.setattr(type(scheme), "message_weights", Scheme.message_weights)     # the messages one by one
    messages = run()
    for a, b in zip(one_pass.records, messages.records, strict=True):
        assert np.array_equal(a["responders"], b["responders"]) and a["end"] == b["end"] and a.get("k") == b.get("k")
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-12, abs=1e-15)
        assert a["grad_error"] == pytest.approx(b["grad_error"], rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(one_pass.params, messages.params, rtol=1e-12, atol=1e-15)


def test_records_keep_arrays_in_memory_and_lists_on_disk(workload, tmp_path):
    """A training record's per-worker fields are numpy arrays, not the cluster's own (a later iteration does not
    change an earlier record), and they are written as the lists with null of the records' file format."""
    seen = []
    res = simulate(make_scheme("fastest_k", n=6, k=3), "pareto", workload, iterations=12, seed=1,
                   on_record=lambda rec: seen.append(as_written(rec)))
    assert as_written(res.records) == seen           # each record as it was when it was emitted
    rec = res.records[-1]
    for key in ("responders", "busy", "worker_compute", "worker_arrived", "worker_used"):
        assert isinstance(rec[key], np.ndarray), key
    assert rec["busy"].shape == (6, 2) and isinstance(rec["worker_computed"], float | np.ndarray)
    late = [r for r in res.records if np.isnan(r["busy"][:, 0]).any()]     # a worker still busy with older work
    assert late, "no iteration with a worker that did not take the plan up: pick another seed"
    res.write(tmp_path)
    lines = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    for mem, disk in zip(late, (lines[r["iteration"]] for r in late), strict=True):
        missing = np.isnan(mem["busy"][:, 0])
        assert [span is None for span in disk["busy"]] == missing.tolist()
        assert [x is None for x in disk["worker_compute"]] == np.isnan(mem["worker_compute"]).tolist()
        assert disk["responders"] == mem["responders"].tolist()
        np.testing.assert_array_equal(record_spans(disk), mem["busy"])


def test_records_docstring_examples_run():
    import doctest

    import gradcode.clusters.records as records

    result = doctest.testmod(records, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted >= 8


@pytest.mark.parametrize("name, params", [("fastest_k", {"k": 5}), ("sync", {}), ("backup", {"b": 3}),
                                          ("coded", {"code": "cyclic_repetition", "s": 2}),
                                          ("coded", {"code": "expander", "s": 2, "wait": 8})])
def test_vectorised_timing_is_the_cluster_loop_under_abandon(name, params):
    """The vectorised timing-only pass (late workers abandon, every iteration ``T_(m:n)`` of fresh draws) is the
    cluster's loop on the same draws: the same stops, responders, loads, messages and work used bit for bit, and the
    same times and work computed to the rounding of the clock (the pass adds each iteration's ``T_(m:n)`` to the
    clock, the loop each worker's ``compute`` then its ``comm`` to the iteration's start, so a dropped worker's
    share ``(end - begin) / compute`` differs in its last bits)."""
    from gradcode.clusters.sim import SimulatedCluster

    delay = make_delay("pareto", alpha=1.5, comm=0.3)
    scheme = make_scheme(name, n=12, **params)
    fast = simulate(scheme, delay, iterations=60, seed=2, late_workers="abandon").records
    scheme.reset()
    loop = SimulatedCluster(scheme, delay, None, RunOptions(seed=2, late_workers="abandon", iterations=60)).run()
    assert len(fast) == len(loop) == 60
    for a, b in zip(fast, loop, strict=True):
        assert list(a) == list(b)
        for key in a:
            x, y = a[key], b[key]
            if key in ("start", "end", "ideal_end", "computed", "wasted") or key.startswith("worker_"):
                np.testing.assert_allclose(np.asarray(x, dtype=float), np.asarray(y, dtype=float), rtol=1e-12,
                                           atol=1e-12, err_msg=key)
            else:
                assert _same(x, y), key
