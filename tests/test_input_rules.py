"""Issue 11: inputs never silently ignored, numbers by one rule, damaged files named, zero delays counted right,
memory estimated before a run, records compact at large n."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import gradcode.clusters.footprint
import gradcode.plumbing.memory
from gradcode import make_delay, make_scheme, make_workload, simulate
from gradcode.clusters.records import jsonable, record_load
from gradcode.errors import ConfigError, check_float, check_int
from gradcode.output.report import build_report
from gradcode.spec import load_spec
from gradcode.study.harness import compare


def spec(**tables):
    out = {"cluster": {"workers": 6}, "delay": {"name": "constant"}, "scheme": {"name": "sync"},
           "run": {"iterations": 2, "seed": 0}}
    out.update(tables)
    return out


# --- item 3: a listed worker the cluster does not have; seed next to seeds -------------------------------------
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


# --- item 12: one rule for numbers ---------------------------------------------------------------------------
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


# --- item 14: names that are not strings, binary spec files, damaged result files -------------------------------
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


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corrupt") / "out"
    exp = {"cluster": {"workers": 4}, "delay": {"name": "exponential"},
           "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 2}], "run": {"iterations": 3, "seeds": [0]}}
    compare(exp, out, progress=False, figures=False, mpi=(False, "not in this test"))
    return out


def _copy(results: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    folder = tmp_path / "copy"
    shutil.copytree(results, folder)
    return folder, sorted((folder / "runs").iterdir())


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", b"\x89\xff\xfe", json.dumps({"runs": 5})])
def test_report_on_a_damaged_experiment_json_names_it(results, tmp_path, content):
    folder, _ = _copy(results, tmp_path)
    path = folder / "experiment.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigError, match="experiment.json is damaged"):
        build_report(folder)


@pytest.mark.parametrize("content, why", [("{oops", "not JSON"), ("[]", "not a JSON object"),
                                          (json.dumps({"run_id": "x"}), "no scheme"), (b"\xff\xfe\x00", "not JSON")])
def test_report_skips_a_run_with_a_damaged_run_json_and_says_why(results, tmp_path, content, why):
    folder, runs = _copy(results, tmp_path)
    (runs[0] / "run.json").write_bytes(content if isinstance(content, bytes) else content.encode())
    report = build_report(folder).read_text()
    assert f"run skipped: {runs[0].name}: run.json is damaged ({why}" in report
    assert len(json.loads((folder / "summary.json").read_text())) == len(runs) - 1


@pytest.mark.parametrize("line", ["[1, 2]", '{"scheme": "sync"}', '{"a": 1}', "\udcff garbage"])
def test_report_drops_a_record_line_that_is_not_a_record(results, tmp_path, line):
    folder, runs = _copy(results, tmp_path)
    records = runs[0] / "records.jsonl"
    records.write_text(records.read_text() + line + "\n", errors="surrogateescape")
    build_report(folder)
    rows = {r["run_id"]: r for r in json.loads((folder / "summary.json").read_text())}
    assert rows[runs[0].name]["status"] == "partial" and rows[runs[0].name]["iterations"] == 3


def test_report_skips_a_run_without_a_readable_record(results, tmp_path):
    folder, runs = _copy(results, tmp_path)
    (runs[0] / "records.jsonl").write_bytes(os.urandom(100).replace(b"\n", b"x"))
    assert f"run skipped: {runs[0].name}: records.jsonl holds no readable record" in build_report(folder).read_text()


# --- item 4: zero and tiny delays -------------------------------------------------------------------------------
@pytest.mark.parametrize("delay", [{"name": "constant", "value": 0}, {"name": "constant", "value": 5e-324},
                                   {"name": "constant", "value": 0, "comm": 1e-310}], ids=str)
@pytest.mark.parametrize("scheme", [{"name": "sync"}, {"name": "fastest_k", "k": 3},
                                    {"name": "coded", "code": "cyclic_repetition", "s": 2},
                                    {"name": "adaptive_k_load", "max_batch": 2}], ids=str)
@pytest.mark.parametrize("late", ["finish", "abandon", "between_chunks"])
def test_zero_delay_records_are_consistent(delay, scheme, late):
    workload = make_workload({"name": "least_squares", "n_samples": 60, "dim": 3})
    for wl in (None, workload):
        res = simulate(make_scheme(**scheme, n=6), delay, wl, iterations=3, late_workers=late)
        for rec in res.records:
            used = float(record_load(rec, 6)[list(rec["responders"])].sum())
            assert rec["messages"] >= len(rec["responders"]) > 0
            assert rec["computed"] >= used - 1e-12 and rec["wasted"] >= 0
        assert res.summary["wasted"] >= 0 and res.summary["computed"] > 0


# --- item 16: a trace path that is not a trace --------------------------------------------------------------------
@pytest.mark.parametrize("content", ["user,password\nalice,SECRET123\n", "a,b,c,d,e\n1,2,3,4,SECRET456\n",
                                     "step,dp_rank,stage,microbatch,compute_s\n0,0,0,0,SECRET789\n",
                                     "step;dp_rank\nSECRETabc;1\n"])
def test_trace_error_quotes_nothing_of_the_file(tmp_path, content):
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(ConfigError, match="not a trace|must have") as err:
        make_delay("trace", trace=str(path))
    assert "SECRET" not in str(err.value) and "alice" not in str(err.value)


# --- item 15: memory -------------------------------------------------------------------------------------------
def test_a_run_that_does_not_fit_is_refused_with_the_figures(monkeypatch):
    monkeypatch.setattr(gradcode.plumbing.memory, "available_bytes", lambda: (10**9, "a test limit"))
    with pytest.raises(ConfigError, match=r"need about \d\.\d GB .* only 1\.0 GB is available \(a test limit\)"):
        simulate(make_scheme("sync", n=10**7), "exponential", iterations=10)
    simulate(make_scheme("sync", n=10**5), "exponential", iterations=2)   # 22 MB: fits


def test_the_estimate_covers_records_kept():
    small, long = (gradcode.clusters.footprint.estimate_bytes(make_scheme("sync", n=10**6), it) for it in (1, 1001))
    assert long - small == 1000 * 8 * 10**6     # the responders of every record kept


def test_available_memory_is_read():
    have = gradcode.plumbing.memory.available_bytes()
    assert have is None or have[0] > 0 and isinstance(have[1], str)


def test_uniform_load_is_one_number_and_read_back():
    res = simulate(make_scheme("fastest_k", n=5, k=3), "exponential", iterations=2)
    assert [rec["load"] for rec in res.records] == [1.0, 1.0]
    assert record_load(res.records[0], 5).tolist() == [1.0] * 5
    assert record_load({"load": [1.0, 2.0]}, 2).tolist() == [1.0, 2.0]
    res = simulate(make_scheme("dropcompute", n=4, M=3, tau=1.0, warmup=0), "exponential", iterations=2)
    assert any(np.ndim(rec["load"]) == 1 for rec in res.records)   # workers that kept different loads


def test_simulate_refuses_to_drop_the_seeds_of_a_spec(tmp_path):
    """`gradcode simulate` on a spec with [run] seeds ran seed 0 in silence; now it asks for --seed."""
    path = tmp_path / "seeds.toml"
    text = '[cluster]\nworkers = 4\n[delay]\nname = "pareto"\n[[schemes]]\nname = "sync"\n[run]\niterations = 3\n'
    path.write_text(text + "seeds = [3, 4]\n")
    (tmp_path / "one.toml").write_text(text + "seed = 4\n")
    from gradcode.cli import main

    assert main(["simulate", str(path), "--out", str(tmp_path / "a")]) == 2
    assert not (tmp_path / "a").exists()
    assert main(["simulate", str(path), "--out", str(tmp_path / "b"), "--seed", "4"]) == 0
    assert main(["simulate", str(tmp_path / "one.toml"), "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "b" / "records.jsonl").read_text() == (tmp_path / "c" / "records.jsonl").read_text()


def test_per_worker_lists_are_compact_at_huge_n():
    # Issue 11: a sync step at n = 20,002 wrote every responder (a 7.9 MB JSON line at n = 10^6); now the
    # stragglers (none) and the last to arrive. Per-worker lists of equal values are one number.
    from gradcode.clusters.records import per_worker, record_responders, worker_values
    from gradcode.output.report import _is_record

    n = 20_002
    res = simulate(make_scheme("sync", n=n), make_delay("exponential"), iterations=2, seed=0)
    rec = res.records[0]
    assert rec["responders"]["count"] == n and rec["responders"]["stragglers"] == []
    assert len(json.dumps(rec, default=jsonable)) < 2000
    order = record_responders(rec, n)
    assert sorted(order) == list(range(n)) and order[-1] == rec["responders"]["last"]
    assert _is_record(json.loads(json.dumps(rec, default=jsonable)))
    small = simulate(make_scheme("fastest_k", n=6, k=4), make_delay("exponential"), iterations=1, seed=0)
    assert not isinstance(small.records[0]["responders"], dict) and len(small.records[0]["responders"]) == 4
    assert per_worker(np.full(5, 2.0)) == 2.0 and per_worker([1.0, 2.0]).tolist() == [1.0, 2.0]
    assert worker_values({"w": 3}, "w", 4).tolist() == [3] * 4 and worker_values({}, "w", 4) is None


def test_compare_refuses_a_sweep_folder_and_takes_a_spec_dict_with_none_fields(tmp_path):
    # Before: compare wrote its runs into a sweep's folder without complaint, and a None (from DelayModel.spec())
    # failed writing spec.toml after spec.json.
    raw = {"cluster": {"workers": 3}, "delay": make_delay("persistent", workers=[0]).spec(),
           "schemes": [{"name": "sync", "label": None}], "run": {"iterations": 2}}
    assert raw["delay"]["frac"] is None          # persistent: frac or workers; the unset one is None in spec()
    folder = tmp_path / "sweep"
    (folder / "cells").mkdir(parents=True)
    with pytest.raises(ConfigError, match="results of a sweep .*not a comparison"):
        compare(raw, folder, progress=False, figures=False)
    assert not (folder / "runs").exists() and not (folder / "experiment.json").exists()
    out = compare(raw, tmp_path / "out", progress=False, figures=False)
    run = next((out / "runs").iterdir())
    assert "None" not in (run / "spec.toml").read_text() and (run / "records.jsonl").is_file()
    for schemes in ([None], [{"name": "sync"}, None], "sync"):   # was a TypeError for a None entry
        with pytest.raises(ConfigError, match=r"\[\[schemes\]\] must be a non-empty array of tables"):
            compare({**raw, "schemes": schemes}, tmp_path / "other", progress=False, figures=False)


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


def test_an_mpi_run_that_will_not_fit_is_refused_with_the_figure_before_launching(tmp_path, monkeypatch):
    # Before: the estimate was the simulator's only; an MPI run of 10^4 ranks started and swapped or was killed.
    from mpi_runtime.launch import launch

    monkeypatch.setattr(gradcode.plumbing.memory, "available_bytes", lambda: (10**9, "a test limit"))
    raw = {"cluster": {"workers": 40}, "workload": {"name": "least_squares", "n_samples": 400, "dim": 4},
           "delay": {"name": "constant"}, "schemes": [{"name": "sync"}], "run": {"iterations": 2}}
    launched = []
    monkeypatch.setattr("mpi_runtime.launch._launch", lambda *a, **k: launched.append(1) or 0)
    with pytest.raises(ConfigError, match=r"MPI run would need about 2.\d GB .*41 ranks.*1.0 GB is available "
                                          r"\(a test limit\)"):
        launch(raw, tmp_path / "out")
    assert launched == []
    raw["cluster"]["workers"] = 3                         # 4 ranks: about 0.24 GB
    assert launch(raw, tmp_path / "out") == 0 and launched == [1]
    need = gradcode.clusters.footprint.estimate_mpi_bytes(make_scheme("sync", n=3),
                                              make_workload("least_squares", n_samples=400, dim=4), 2)
    assert 0.2e9 < need < 0.3e9


# --- found by benchmarks/probes/probe_reliability.py --kinds inputs (every parameter of every registered part) ----
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


def test_mpi_run_with_more_partitions_than_samples_is_refused_before_the_launch(tmp_path, monkeypatch):
    """anytime plans n x max_samples partitions: with too few samples every rank used to fail after the launch."""
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
