"""The ``anytime`` scheme (Anytime Minibatch, Ferdinand et al., ICLR 2019): the fixed-time rule, the count-weighted
combine against a direct computation, the counts in the records, ``T = "auto"``, bad parameters, and the MPI
cluster against the simulator."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import mpi_spec, read_whole_records, run_mpi, simulate_spec

from gradcode import make_delay, make_scheme, make_workload, simulate
from gradcode.clusters.records import as_written
from gradcode.errors import ConfigError
from gradcode.schemes.anytime import fixed_time

# workers 0, 1 take 10 per sample, workers 2, 3 take 5: with T = 21 they finish 2 and 4 samples
SLOW_FAST = {"name": "persistent", "base": {"name": "constant", "value": 5.0}, "workers": [0, 1], "slowdown": 2.0}


def _by_hand(micro_row: np.ndarray, T: float) -> int:
    """Samples one worker finishes by ``T``, counted one by one."""
    clock, count = 0.0, 0
    for x in micro_row:
        if clock + x > T:
            break
        clock, count = clock + x, count + 1
    return count


def test_fixed_time_counts_what_ends_by_T():
    rng = np.random.default_rng(3)
    micro = rng.exponential(1.0, size=(50, 9))
    for T in (0.1, 2.0, 4.5, 100.0):
        kept, stop = fixed_time(micro, T, 4)
        assert kept.tolist() == [_by_hand(row, T) for row in micro]
        np.testing.assert_allclose(stop, np.minimum(micro.sum(axis=1), T))
    kept, stop = fixed_time(micro, math.inf, 4)           # before T is known: the nominal mini-batch
    assert kept.tolist() == [4] * 50 and np.allclose(stop, micro[:, :4].sum(axis=1))


def test_schedule_started_and_chunk_ends():
    scheme = make_scheme("anytime", n=3, T=2.0, M=2, max_samples=4, sample_load=1.0)
    micro = np.array([[0.5] * 4, [0.75] * 4, [3.0] * 4])
    sched = scheme.schedule(micro, np.array([0.1, 0.2, 0.3]), 2.0)
    assert sched.kept.tolist() == [4, 2] + [0]
    assert sched.started.tolist() == [4, 3, 1]          # the sample in progress at T was started, then dropped
    assert sched.duration == pytest.approx(2.3)
    assert np.all(sched.chunk_end <= sched.stop[:, None])


def test_combine_is_the_count_weighted_average_computed_directly():
    """One step through the simulated cluster with known times: ``w0 - w1 = lr * g``, and ``g`` must be
    ``n_parts * (sum of every kept sample's gradient) / (total count)``, computed here from the workload alone."""
    n, M, cap, T, lr = 4, 3, 6, 21.0, 0.01
    workload = make_workload("least_squares", n_samples=240, dim=8, seed=1)
    scheme = make_scheme("anytime", n=n, T=T, M=M, max_samples=cap, sample_load=1.0)
    for t_steps in (1, 3):           # step 0, and step 2 whose samples start at offset 2 M mod cap = 0, 3, ...
        res = simulate(scheme, SLOW_FAST, workload, iterations=t_steps, seed=0, lr=lr)
        w_before = np.array(workload.init_params(), dtype=float)
        if t_steps > 1:
            w_before = simulate(scheme, SLOW_FAST, workload, iterations=t_steps - 1, seed=0, lr=lr).params
        t = t_steps - 1
        counts = [2, 2, 4, 4]                                      # by hand: 10, 20 | 5, 10, 15, 20 within 21
        offset = (t * M) % cap
        samples = [i * cap + (offset + m) % cap for i in range(n) for m in range(counts[i])]
        grads = workload.gradients(w_before, t, samples, n * cap, None)
        sums = [grads[sum(counts[:i]):sum(counts[:i + 1])].sum(axis=0) for i in range(n)]   # what each sends
        expected = (n * cap) * np.sum(sums, axis=0) / sum(counts)
        np.testing.assert_allclose((w_before - res.params) / lr, expected, rtol=1e-10, atol=1e-12)
        rec = res.records[-1]
        assert rec["counts"] == counts and rec["method"] == "count-weighted"
        assert rec["load"].tolist() == [2.0, 2.0, 4.0, 4.0]                 # units kept: counts x sample_load


def test_auto_T_gives_the_nominal_mini_batch_on_average():
    n, M = 16, 12
    scheme = make_scheme("anytime", n=n, M=M, warmup=2, record_steps=5)
    delay = make_delay("lognormal")
    res = simulate(scheme, delay, iterations=200, seed=4)
    recs = res.records
    assert all(r["T"] == math.inf and r["counts"] == [M] * n for r in recs[:7])   # warm-up and recording
    T = recs[7]["T"]
    assert math.isfinite(T) and all(r["T"] == T and r["tau"] == T for r in recs[7:])
    # T is the mean time of the nominal M samples over the recording window (steps 2-6), each 1/M units
    nominal = [delay.sample_micro(4, t, n, 3 * M)[0][0, :, :M].sum(axis=1) / M for t in range(2, 7)]
    assert T == pytest.approx(np.mean(nominal))
    mean_count = np.mean([r["counts"] for r in recs[7:]])
    assert mean_count == pytest.approx(M, rel=0.1)                 # the expected mini-batch is n M, as sync's
    # each step lasts T exactly (no communication in this model): no worker is waited for
    assert all(r["end"] - r["start"] == pytest.approx(T) for r in recs[7:])


def test_samples_rotate_through_each_workers_partitions():
    scheme = make_scheme("anytime", n=3, M=2, max_samples=5)
    assert scheme.plan(0).parts[1] == (5, 6, 7, 8, 9)
    assert scheme.plan(1).parts[1] == (7, 8, 9, 5, 6)
    assert scheme.plan(1).parts[-1] == scheme.plan(1).parts[2] == (12, 13, 14, 10, 11)
    assert scheme.plan(0).n_parts == 15 and len(scheme.plan(0).parts) == 3


@pytest.mark.parametrize("params, words", [
    ({"T": 0}, ["T", "> 0"]),
    ({"T": -1.0}, ["T"]),
    ({"T": "soon"}, ["T", "auto"]),
    ({"T": float("inf")}, ["T", "finite"]),
    ({"M": 0}, ["M"]),
    ({"M": 4, "max_samples": 3}, ["max_samples", ">= M"]),
    ({"sample_load": 0.0}, ["sample_load"]),
    ({"warmup": -1}, ["warmup"]),
    ({"record_steps": 0}, ["record_steps"]),
    ({"tau": 2.0}, ["tau", "T"]),
])
def test_bad_parameters_are_config_errors(params, words):
    with pytest.raises(ConfigError) as err:
        make_scheme("anytime", n=4, **params)
    for word in words:
        assert word in str(err.value)


def test_describe_and_registry():
    from gradcode.plumbing.registry import SCHEMES

    assert "anytime" in SCHEMES.list()
    scheme = make_scheme({"name": "anytime", "T": 2.0}, n=3)
    assert scheme.decentralized and scheme.name == "anytime" and scheme.work_note is None
    assert "unequal work" in make_scheme("anytime", n=3, sample_load=1.0).work_note


# --- the MPI cluster ------------------------------------------------------------------------------------------
@pytest.mark.mpi
def test_mpi_agrees_with_simulator(tmp_path):
    """Random sample times (shifted exponential), T fixed: the same counts on both clusters (every rank derives
    them from the same draws; the wall clock only executes them), the same model, mean iteration time within
    10%."""
    spec = mpi_spec({"name": "anytime", "T": 20.0, "M": 3, "max_samples": 8, "sample_load": 1.0}, iterations=6)
    proc, out = run_mpi(spec, tmp_path)
    assert proc.returncode == 0, proc.stderr
    mpi, sim = read_whole_records(out), simulate_spec(spec)
    assert [r["counts"] for r in mpi] == [r["counts"] for r in sim.records]
    assert [r["load"] for r in mpi] == as_written([r["load"] for r in sim.records])
    np.testing.assert_allclose(np.load(out / "params.npy"), sim.params, rtol=1e-9, atol=1e-12)
    mean = json.loads((out / "summary.json").read_text())["mean_iteration_time"]
    assert mean == pytest.approx(sim.summary["mean_iteration_time"], rel=0.10)


@pytest.mark.mpi
def test_mpi_auto_T_same_on_every_rank(tmp_path):
    spec = mpi_spec({"name": "anytime", "M": 3, "warmup": 1, "record_steps": 2}, iterations=5)
    proc, out = run_mpi(spec, tmp_path)
    assert proc.returncode == 0, proc.stderr
    mpi, sim = read_whole_records(out), simulate_spec(spec)
    assert math.isfinite(mpi[-1]["T"]) and mpi[-1]["T"] == pytest.approx(sim.records[-1]["T"])
    np.testing.assert_allclose(np.load(out / "params.npy"), sim.params, rtol=1e-9, atol=1e-12)
