"""The run options: one object (:class:`gradcode.spec.RunOptions`), checked when a spec is loaded or the object is
made, read by both clusters; ``simulate``'s keywords build the same object."""

import dataclasses
import json

import pytest

from gradcode import RunOptions, make_scheme, simulate
from gradcode.cli import main
from gradcode.clusters.records import as_written
from gradcode.clusters.sim import SimulatedCluster
from gradcode.deaths import FAULT_KEYS
from gradcode.delays import make_delay
from gradcode.errors import ConfigError
from gradcode.spec import CLUSTER_KEYS, RUN_KEYS, build, load_spec
from mpi_runtime.config import load_run

LSQ = {"name": "least_squares", "n_samples": 60, "dim": 3}


def spec(run=None, cluster=None, workload=LSQ, seeds=None):
    """A small spec; ``run`` and ``cluster`` add to its tables; ``seeds`` (a comparison's) replaces its ``seed``."""
    seed = {"seed": 0} if seeds is None else {"seeds": seeds}
    raw = {"cluster": {"workers": 4, **(cluster or {})}, "delay": {"name": "exponential", "mu": 1.0},
           "scheme": {"name": "fastest_k", "k": 3}, "run": {"iterations": 4, **seed, **(run or {})}}
    if workload is not None:
        raw["workload"] = workload
    return raw


# --- checked when the spec is loaded --------------------------------------------------------------------------
@pytest.mark.parametrize("run, cluster, match", [
    ({}, {"late_workers": "sometimes"}, r"\[cluster\] late_workers = 'sometimes': accepted: 'finish', 'abandon'"),
    ({}, {"late_workers": 1}, r"\[cluster\] late_workers = 1: accepted"),
    ({"lr": -0.1}, {}, r"\[run\] lr must be >= 0"),
    ({"lr": "0.1"}, {}, r"\[run\] lr must be a number"),
    ({"momentum": 1.0}, {}, r"\[run\] momentum must be in \[0, 1\)"),
    ({"optimizer": "adam"}, {}, r"\[run\] optimizer = 'adam': accepted: 'sgd', 'momentum', 'nesterov'"),
    ({"inject": "sleep"}, {}, r"\[run\] inject = 'sleep': accepted: 'wait', 'add'"),
    ({"startup_timeout": 0}, {}, r"\[run\] startup_timeout must be > 0"),
    ({"eval_every": 0}, {}, r"\[run\] eval_every must be >= 1"),
])
def test_a_bad_option_fails_when_the_spec_is_loaded(run, cluster, match):
    with pytest.raises(ConfigError, match=match):
        load_spec(spec(run, cluster))


def test_target_loss_without_a_workload_fails_when_the_spec_is_loaded():
    with pytest.raises(ConfigError, match=r"\[run\] target_loss needs a \[workload\]"):
        load_spec(spec({"target_loss": 0.1}, workload=None))


def test_every_option_is_a_spec_key_and_reaches_the_object():
    names = {f.name for f in dataclasses.fields(RunOptions)}
    assert names == (set(RUN_KEYS) - {"seeds"}) | {"late_workers", "network"} | set(FAULT_KEYS)   # network: its table
    assert "late_workers" in CLUSTER_KEYS and "late_workers" not in RUN_KEYS
    given = {"iterations": 7, "seed": 3, "lr": 0.05, "target_loss": 0.01, "time_budget": 50.0, "loss_every": 2,
             "optimizer": "momentum", "momentum": 0.5, "batch": 4, "time_scale": 0.02, "grace": 3.0,
             "startup_timeout": 30.0, "inject": "add"}
    options = load_spec(spec(given, {"late_workers": "abandon"})).options
    assert dataclasses.asdict(options) == {**dataclasses.asdict(RunOptions()), **given, "late_workers": "abandon"}
    # all but the held-out two, [network] and [faults] (tests/test_deaths.py)
    assert given.keys() | {"late_workers", "eval_every", "target_accuracy", "network", *FAULT_KEYS} == names
    raw = {**spec(), "network": {"link": "1gbit", "slots": 3}}
    assert load_spec(raw).options.network.link == 1.25e8


def test_command_line_overrides_are_checked_with_the_spec():
    assert load_spec(spec(), {"iterations": 9, "seed": 5}).options.iterations == 9
    with pytest.raises(ConfigError, match=r"\[run\] iterations must be >= 1"):
        load_spec(spec(), {"iterations": 0})
    one = load_spec(spec(seeds=[1, 2]), {"seed": 2})
    assert one.options.seed == 2 and "seeds" not in one.run      # --seed replaces a comparison's seeds
    cfg = load_run(spec(), overrides={"iterations": 3, "seed": 1})
    assert (cfg.options.iterations, cfg.options.seed) == (3, 1)
    with pytest.raises(ConfigError, match=r"\[run\] seed must be >= 0"):
        load_run(spec(), overrides={"seed": -1})


# --- one object, made and checked once ------------------------------------------------------------------------
def test_the_object_is_frozen_and_checks_itself():
    options = RunOptions(iterations=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.iterations = 4
    with pytest.raises(ConfigError, match="late_workers = 'sometimes': accepted"):
        RunOptions(late_workers="sometimes")
    with pytest.raises(ConfigError, match="lr must be >= 0"):
        dataclasses.replace(options, lr=-1.0)
    assert RunOptions(lr=1, time_scale=1).lr == 1.0 and isinstance(RunOptions(lr=1).lr, float)


def test_simulate_takes_the_object_or_its_keywords_alike():
    delay = make_delay("exponential", mu=1.0)

    def run(*args, **kwargs):
        return as_written(simulate(make_scheme("fastest_k", n=4, k=3), delay, LSQ, *args, **kwargs).records)

    keywords = {"iterations": 5, "seed": 2, "lr": 0.01, "late_workers": "abandon", "loss_every": 2}
    assert run(**keywords) == run(RunOptions(**keywords)) == run(RunOptions(iterations=9, seed=7), **keywords)
    with pytest.raises(ConfigError, match="unknown run option.* itertions; accepted: iterations, seed"):
        run(itertions=5)
    with pytest.raises(ConfigError, match="lr must be >= 0"):
        run(lr=-1.0)
    with pytest.raises(ConfigError, match="options must be a RunOptions"):
        run({"iterations": 5})


def test_both_clusters_get_the_spec_options_unchanged():
    loaded = load_spec(spec({"lr": 0.02, "time_scale": 0.05}))
    (scheme,), delay, workload = build(loaded)
    scheme.bind(delay=delay)
    scheme.reset()
    assert SimulatedCluster(scheme, delay, workload, loaded.options).options is loaded.options
    cfg = load_run(spec({"lr": 0.02, "time_scale": 0.05}))
    assert cfg.options is cfg.spec.options and cfg.options == loaded.options
    assert cfg.summary_fields([], None)["time_scale"] == 0.05


def test_gradcode_simulate_applies_iterations_and_seed(tmp_path):
    import tomli_w

    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(spec(seeds=[0, 1])))
    assert main(["simulate", str(path), "--out", str(tmp_path / "a"), "--iterations", "3", "--seed", "1"]) == 0
    records = [json.loads(line) for line in (tmp_path / "a" / "records.jsonl").read_text().splitlines()]
    assert len(records) == 3
    assert records == as_written(simulate(make_scheme("fastest_k", n=4, k=3), make_delay("exponential", mu=1.0),
                                          LSQ, iterations=3, seed=1).records)
    assert main(["simulate", str(path), "--out", str(tmp_path / "b")]) == 2   # seeds and no --seed: refused
