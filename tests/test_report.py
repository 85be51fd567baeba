"""The report: rebuilt from the records alone, exactly; confidence intervals; every plot produced."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from gradcode.errors import ConfigError
from gradcode.output.plots import PLOTS
from gradcode.output.report import mean_ci, read_records, report_main
from gradcode.study.harness import compare

SPEC = {
    "experiment": {"name": "report-test", "description": "a tiny comparison"},
    "cluster": {"workers": 4},
    "workload": {"name": "least_squares", "n_samples": 200, "dim": 5},
    "delays": [{"label": "pareto", "name": "pareto", "alpha": 2.5}, {"name": "trace", "trace": "bytedance-SE"}],
    "schemes": [{"name": "sync"}, {"name": "backup", "b": 1}, {"name": "adaptive_k_load", "max_batch": 8},
                {"name": "coded", "code": "cyclic_mds", "s": 2},
                {"name": "dropcompute", "M": 2, "tau": "auto", "warmup": 1, "record_steps": 3}],
    "run": {"iterations": 10, "seeds": [0, 1, 2], "batch": 8},
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rep") / "out"
    compare(SPEC, out, progress=False, mpi=(False, "not in this test"))
    return out


def test_report_rebuilds_the_summary_exactly(folder, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    for name in ("summary.csv", "summary.json", "report.md"):
        (copy / name).unlink()
    shutil.rmtree(copy / "plots")
    for run in (copy / "runs").iterdir():   # the cluster's own summaries are not used
        (run / "summary.json").unlink()
    assert report_main(SimpleNamespace(folder=str(copy))) == 0
    for name in ("summary.csv", "summary.json", "report.md"):
        assert (copy / name).read_bytes() == (folder / name).read_bytes(), name


def test_summary_rows_follow_the_records(folder):
    rows = json.loads((folder / "summary.json").read_text())
    assert len(rows) == 2 * 5 * 3
    for row in rows:
        records, whole = read_records(folder / "runs" / row["run_id"] / "records.jsonl")
        assert whole and row["iterations"] == len(records)
        assert row["computed_units"] == pytest.approx(sum(r["computed"] for r in records))
        assert row["messages"] == sum(r["messages"] for r in records)
    # complex code: two reals per entry
    mds = [r for r in rows if r["scheme"].startswith("coded/cyclic_mds")]
    assert mds and all(r["bytes"] == r["messages"] * 5 * 8 * 2 for r in mds)   # n - s = 2 is even: complex
    sync = {(r["delay"], r["seed"]): r for r in rows if r["scheme"] == "sync"}
    for r in rows:
        ref = sync[(r["delay"], r["seed"])]
        assert r["speedup_iteration"] == pytest.approx(ref["mean_iteration_time"] / r["mean_iteration_time"])


def test_every_plot_is_produced(folder):
    for name in PLOTS:
        path = folder / "plots" / name
        assert path.stat().st_size > 5000, name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"plots/{name}" in (folder / "report.md").read_text()


def test_report_text(folder):
    text = (folder / "report.md").read_text()
    assert "a tiny comparison" in text
    for section in ("## Summary", "## Reading", "## MPI vs simulator", "## Definitions"):
        assert section in text
    assert "| sim | pareto | sync | 3 |" in text and "±" in text
    assert "fastest" in text and "least computation" in text and "least communication" in text


def test_mean_ci_is_t_based():
    mean, half = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.302653 * 1.0 / 3 ** 0.5, rel=1e-6)
    assert mean_ci([5.0]) == (5.0, None)


def test_report_of_a_folder_without_runs(tmp_path):
    with pytest.raises(ConfigError, match="not a results folder"):
        report_main(SimpleNamespace(folder=str(tmp_path)))


def test_baseline_and_plots_follow_class_attributes_not_names(tmp_path, monkeypatch):
    """A user's subclass of Sync, named by import path, is the baseline of the speedups; the timeline orders
    scheme families by ``timeline_rank`` (a class without one comes last, in order of appearance)."""
    from gradcode import Scheme
    from gradcode.output.plots import _timeline_runs
    from gradcode.output.report import RunData, scheme_class

    (tmp_path / "my_sync_mod.py").write_text(
        "from gradcode.schemes.uncoded import Sync\n\n\nclass MySync(Sync):\n    name = 'my_sync'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = {"cluster": {"workers": 4}, "workload": {"name": "least_squares", "n_samples": 80, "dim": 3},
            "delay": {"name": "exponential"}, "run": {"iterations": 5},
            "schemes": [{"name": "fastest_k", "k": 2}, {"name": "my_sync_mod:MySync"}]}
    out = compare(spec, tmp_path / "out", progress=False, mpi=(False, "not in this test"))
    rows = {r["scheme_name"]: r for r in json.loads((out / "summary.json").read_text())}
    mine, fastest = rows["my_sync_mod:MySync"], rows["fastest_k"]
    assert mine["speedup_iteration"] == 1.0
    assert fastest["speedup_iteration"] == pytest.approx(mine["mean_iteration_time"] / fastest["mean_iteration_time"])
    assert scheme_class({"scheme_name": "not_installed_mod:X"}) is Scheme   # the defaults: not a baseline

    def run(name):
        return RunData({"scheme_name": name}, [], True, tmp_path)

    names = ["my_sync_mod:MySync", "dropcompute", "fastest_k", "adaptive_k", "coded", "fastest_k"]
    order = [r.meta["scheme_name"] for r in _timeline_runs([run(n) for n in names], panels=4)]
    assert order == ["my_sync_mod:MySync", "fastest_k", "coded", "adaptive_k"]
    assert [r.meta["scheme_name"] for r in _timeline_runs([run("my_sync_mod:MySync"), run("x:Y"), run("sync")],
                                                          panels=4)] == ["my_sync_mod:MySync", "sync", "x:Y"]
