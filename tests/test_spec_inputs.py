"""Input validation by the spec's tables: every number, name and listed worker checked when a spec is
loaded, with an error that says what was wrong and what is accepted, before any work (a file that is not UTF-8,
the inputs a probe of every registered part's parameters found, a spec an MPI launch cannot split).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from gradcode import make_delay, make_scheme, make_workload, simulate
from gradcode.errors import ConfigError, check_float, check_int
from gradcode.spec import load_spec


def spec(**tables):
    """A one-run spec (6 workers, constant delays, sync, 2 iterations) with ``tables`` replaced."""
    out = {"cluster": {"workers": 6}, "delay": {"name": "constant"}, "scheme": {"name": "sync"},
           "run": {"iterations": 2, "seed": 0}}
    out.update(tables)
    return out


# --- [cluster] and the workers a delay lists; [run] seed and seeds --------------------------------------------------
BEYOND = [
    {"name": "unresponsive", "base": "constant", "workers": [99]},
    {"name": "unresponsive", "base": "constant", "workers": [0, 6]},
    {"name": "persistent", "base": "constant", "workers": [7], "slowdown": 2.0},
    {"name": "mixture", "components": [{"weight": 1, "model": {"name": "unresponsive", "workers": [99]}}]},
    {"name": "persistent", "base": {"name": "unresponsive", "workers": [99]}, "workers": [0]},
    {"name": "unresponsive", "base": {"name": "persistent", "workers": [99]}, "workers": [0]},
]


@pytest.mark.parametrize("delay", BEYOND, ids=str)
def test_listed_workers_beyond_n_are_an_error(delay):
    for raw in (spec(delay=delay), {**spec(delays=[{"name": "constant"}, delay])}):
        raw.pop("delay") if "delays" in raw else None
        with pytest.raises(ConfigError, match=r"n = 6 workers \(0\.\.5\)"):
            load_spec(raw)
    with pytest.raises(ConfigError, match="n = 6"):
        simulate(make_scheme("sync", n=6), make_delay(delay), iterations=2)


def test_listed_workers_within_n_still_work():
    res = simulate(make_scheme("fastest_k", n=6, k=5), make_delay("unresponsive", base="constant", workers=[5]),
                   iterations=2)
    assert all(5 not in rec["responders"] for rec in res.records)
    # the sampling API stays prefix-stable in n: a model may be sampled for fewer workers than it lists
    assert np.isfinite(make_delay("unresponsive", workers=[99]).sample(0, 0, 6)[0]).all()


@pytest.mark.parametrize("run", [{"seed": 1, "seeds": [0, 1]}, {"seed": 0, "seeds": [0]}])
def test_seed_with_seeds_is_an_error(run):
    with pytest.raises(ConfigError, match="either seed .* or seeds"):
        load_spec(spec(run={"iterations": 2, **run}))


# --- numbers: one rule for ints and floats --------------------------------------------------------------------------
@pytest.mark.parametrize("key, value", [
    ("target_loss", "0.05"), ("lr", "0.1"), ("time_budget", "5"), ("time_scale", "0.1"), ("grace", "1"),
    ("loss_every", "2"), ("batch", "2"), ("iterations", "3"), ("lr", True), ("target_loss", True),
    ("time_scale", True), ("grace", False), ("time_scale", -1.0), ("grace", 0), ("batch", 0), ("loss_every", 1.5),
])
def test_every_run_number_is_checked_at_load(key, value):
    with pytest.raises(ConfigError, match=rf"\[run\] {key} must be"):
        load_spec(spec(run={"iterations": 2, "seed": 0, key: value},
                       workload={"name": "least_squares", "n_samples": 60, "dim": 3}))


@pytest.mark.parametrize("table, params", [
    ("delay", {"name": "pareto", "alpha": "1.5"}), ("delay", {"name": "constant", "comm": "0.1"}),
    ("delay", {"name": "pareto", "alpha": True}), ("delay", {"name": "persistent", "slowdown": ["1.5", "2"]}),
    ("scheme", {"name": "coded", "code": "cyclic_mds", "s": 1, "tol": "1e-6"}),
])
def test_float_parameters_reject_strings_and_bools(table, params):
    with pytest.raises(ConfigError, match="must be a number"):
        load_spec(spec(**{table: params}))


def test_one_rule_for_ints_and_floats():
    for bad in ("1.5", "2", True, False, np.bool_(True), None, [1]):
        with pytest.raises(ConfigError):
            check_float("x", bad)
        with pytest.raises(ConfigError):
            check_int("x", bad)
    assert check_float("x", np.float32(0.5)) == 0.5 and check_float("x", 2) == 2.0
    assert check_int("x", np.int64(3)) == 3


# --- names and spec files -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("table", [{"name": {"x": 1}}, {"name": ["sync"]}])
def test_scheme_name_must_be_a_string(table):
    with pytest.raises(ConfigError, match="name must be a string"):
        load_spec(spec(scheme=table))


@pytest.mark.parametrize("data", [os.urandom(200) + b"\xff", "[cluster]\nworkers = 4\n".encode("utf-16"),
                                  "[experiment]\nname = 'caf\xe9'\n".encode("latin-1")])
def test_binary_spec_file_is_a_clear_error(tmp_path, data):
    path = tmp_path / "spec.toml"
    path.write_bytes(data)
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        load_spec(path)


# --- [run] training keys --------------------------------------------------------------------------------------------
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


# --- every parameter of every registered part (benchmarks/probes/probe_reliability.py --kinds inputs) ---------------
def _probe_spec(where: tuple, value) -> dict:
    out = {"cluster": {"workers": 4}, "workload": {"name": "least_squares", "n_samples": 400, "dim": 3},
           "delay": {"name": "constant"}, "schemes": [{"name": "sync"}], "run": {"iterations": 2, "seed": 0}}
    table, key = where[0], where[-1]
    if len(where) == 3:
        out["schemes"] = [dict(where[1], **{key: value})]
    else:
        out[table] = {**out.get(table, {}), key: value}
    return out


PROBE_FOUND = [   # (where, value, words of the error): each was a traceback, a hang or silently accepted
    (("run", "batch"), 2**70, ["memory", "smaller batch"]),
    (("schemes", {"name": "sync"}, "batch"), 2**70, ["memory", "smaller batch"]),
    (("run", "optimizer"), [], ["optimizer = []: accepted: 'sgd'"]),
    (("run", "optimizer"), {"x": 1}, ["optimizer = {'x': 1}: accepted: 'sgd'"]),
    (("schemes", {"name": "adaptive_k_load"}, "max_batch"), 2**70, ["memory"]),
    (("schemes", {"name": "coded", "code": "reed_solomon_gf", "s": 1}, "max_abs"), 1e308, ["max_abs <="]),
    (("delay", "sigma"), 1e308, ["sigma must be <= 30"]),
    (("delay", "sd"), 1e308, ["sd = 1e+308 is too large"]),
    (("workload", "n_samples"), 2**70, ["n_samples x dim", "available"]),
    (("workload", "dim"), 2**70, ["n_samples x dim", "available"]),
    (("workload", "test_fraction"), 1e308, ["test_fraction must be <= 1"]),
    (("schemes", {"name": "dropcompute"}, "M"), 2**70, ["chunks per worker", "smaller M"]),
    (("schemes", {"name": "anytime"}, "M"), 2**70, ["chunks per worker", "smaller M"]),
    (("schemes", {"name": "anytime"}, "max_samples"), 2**70, ["chunks per worker", "smaller max_samples"]),
    (("schemes", {"name": "anytime", "max_samples": 200}, "M"), 12, ["cannot split n_samples = 400"]),
    (("experiment", "name"), ["a"], ["[experiment] name must be a string"]),
    (("delay", "workers"), {}, ["workers must be a list"]),
]


@pytest.mark.parametrize(("where", "value", "words"), PROBE_FOUND, ids=lambda v: str(v)[:40])
def test_inputs_the_probe_found_are_clear_errors_before_work(where, value, words):
    from gradcode.spec import build
    from gradcode.study.harness import load_experiment

    spec = _probe_spec(where, value)
    if where[0] == "delay":
        spec["delay"] = {"name": "lognormal" if where[1] in ("sigma", "sd") else "persistent", where[1]: value}
    with pytest.raises(ConfigError) as err:
        exp = load_experiment(spec, mpi=(False, "test"))
        schemes, delay, workload = build(exp.spec)
        for scheme in schemes:
            simulate(scheme, delay, workload, iterations=2, seed=0)
    for word in words:
        assert word in str(err.value)


def test_mlp_hidden_true_is_not_one_layer_of_one_unit():
    with pytest.raises(ConfigError, match="hidden must be a list"):
        make_workload("mlp", hidden=True)


# --- a spec an MPI launch cannot run --------------------------------------------------------------------------------
def test_mpi_run_with_more_partitions_than_samples_is_refused_before_the_launch(tmp_path, monkeypatch):
    """anytime plans n x max_samples partitions: with too few samples every rank would fail after the launch."""
    import tomli_w

    import mpi_runtime.launch as launch

    monkeypatch.setattr(launch, "prepare", lambda *a, **k: pytest.fail("launched"))
    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps({"cluster": {"workers": 3, "kind": "mpi"}, "delay": {"name": "constant"},
                                   "workload": {"name": "least_squares", "n_samples": 40, "dim": 3},
                                   "scheme": {"name": "anytime"}, "run": {"iterations": 2, "time_scale": 0.01}}))
    with pytest.raises(ConfigError, match="scheme anytime plans 108 data partitions.*cannot split n_samples = 40"):
        launch.launch(path, tmp_path / "out", echo=lambda *a: None)
    assert not (tmp_path / "out").exists()
