"""The report: rebuilt from the records alone, exactly; confidence intervals; every plot produced."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from gradcode.errors import ConfigError
from gradcode.output.plots import PLOTS
from gradcode.output.report import build_report, mean_ci, read_records
from gradcode.output.run_report import report_main
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


# --- damaged result files: named, skipped or cut, never a traceback -------------------------------------------------
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


def test_gradient_error_beside_the_residual_and_identical_schemes_flagged(tmp_path):
    """An averaging scheme's residual is n/a and its gradient error is shown; fastest_k k = n - 1 and backup b = 1
    give the same records on every seed, and the notes say so (sync and the code are not flagged)."""
    spec = {"cluster": {"workers": 4}, "workload": {"name": "least_squares", "n_samples": 80, "dim": 3},
            "delay": {"name": "shifted_exponential"},
            "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 3}, {"name": "backup", "b": 1},
                        {"name": "coded", "code": "cyclic_mds", "s": 1}],
            "run": {"iterations": 6, "seeds": [0, 1]}}
    out = tmp_path / "out"
    compare(spec, out, progress=False, mpi=(False, "not in this test"), figures=False)
    text = (out / "report.md").read_text()
    head = next(line for line in text.splitlines() if line.startswith("| cluster"))
    assert head.index("speedup to target") < head.index("p95 it. time")
    titles = [t.strip() for t in head.strip("|").split("|")]
    row = next(line for line in text.splitlines() if "| fastest_k" in line)
    cells = dict(zip(titles, (c.strip() for c in row.strip("|").split("|")), strict=True))
    assert cells["residual"] == "n/a" and cells["grad. error"] not in ("n/a", "-", "0")
    coded = next(line for line in text.splitlines() if "| coded" in line)
    assert "n/a" not in coded
    assert "fastest_k k=3 and backup b=1 are the SAME scheme here" in text
    assert "sync and" not in text and "and coded are the SAME" not in text


def test_slowest_workers_and_hosts_of_a_run():
    """Response time = arrived - plan received, over the iterations a worker answered; hosts gather their workers."""
    from gradcode.clusters.run_view import per_host, per_worker, scheme_text, slowest_lines

    records = [{"scheme": "coded", "code": "cyclic_mds", "s": 1, "worker_plan_received": [0.0, 0.0, 0.0, 0.0],
                "worker_arrived": [1.0, 2.0, 5.0, None]},
               {"scheme": "coded", "code": "cyclic_mds", "s": 1, "worker_plan_received": [3.0, 3.0, 3.0, 3.0],
                "worker_arrived": [4.0, 6.0, 10.0, 4.0]}]
    workers = per_worker(records)
    assert [w["mean_response"] for w in workers] == [1.0, 2.5, 6.0, 1.0]
    assert [w["answered"] for w in workers] == [1.0, 1.0, 1.0, 0.5]
    hosts = ["a", "a", "b", "b"]
    assert [(h["host"], h["workers"], h["mean_response"], h["slowest"]) for h in per_host(workers, hosts)] == \
        [("a", [0, 1], 1.75, 1), ("b", [2, 3], 3.5, 2)]
    lines = slowest_lines(records, hosts, top=2)
    assert lines[0].startswith("  slowest workers      2 on b (6") and ", 1 on a (2.5" in lines[0]
    assert lines[1].startswith("  slowest hosts        b (3.5")
    assert scheme_text({"scheme": "coded"}, records) == "coded cyclic_mds s=1"


def test_a_comparisons_mpi_runs_by_host(tmp_path):
    """The report's per-host table reads each MPI run's hosts.json; a run without one (simulated) adds nothing."""
    from gradcode.output.report import RunData, hosts_section

    records = [{"worker_plan_received": [0.0, 0.0], "worker_arrived": [1.0, 3.0]}]
    (tmp_path / "mpi").mkdir()
    (tmp_path / "mpi" / "hosts.json").write_text(json.dumps({"master": "h0", "workers": ["h0", "h1"]}))
    runs = [RunData(meta={"scheme": "sync"}, records=records, complete=True, folder=tmp_path / folder)
            for folder in ("mpi", "sim")]
    assert hosts_section(runs)[2:] == ["| sync | h0 | 0 | 1 | 100% | 1 |", "| sync | h1 | 1 | 3 | 100% | 1 |"]
    assert hosts_section(runs[1:]) == []


def test_report_of_a_simulate_folder(tmp_path):
    """`gradcode report DIR` on one run's folder (here `gradcode simulate`'s): per-worker table, no hosts, timeline."""
    from gradcode.cli import main

    spec = tmp_path / "one.toml"
    spec.write_text('[cluster]\nworkers = 3\n[workload]\nname = "least_squares"\nn_samples = 60\ndim = 3\n'
                    '[delay]\nname = "pareto"\n[scheme]\nname = "coded"\ncode = "cyclic_repetition"\ns = 1\n'
                    '[run]\niterations = 4\n')
    assert main(["simulate", str(spec), "--out", str(tmp_path / "s")]) == 0
    assert main(["report", str(tmp_path / "s")]) == 0
    text = (tmp_path / "s" / "report.md").read_text()
    assert "coded cyclic_repetition s=1, 4 iterations on the simulated cluster" in text
    assert "| 2 | - |" in text and "No hosts.json" in text and (tmp_path / "s" / "plots" / "timeline.png").is_file()
