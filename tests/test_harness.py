"""The comparison harness: experiment specs validated as a whole, runs in folders, resuming after an interruption,
the default experiment and the README's main command in reduced form."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import tomli_w
from helpers import NO_MPI, ROOT, cli

import gradcode.clusters.sim
from gradcode.errors import ConfigError
from gradcode.spec import tomllib
from gradcode.study.harness import (
    COMPLETE,
    compare,
    default_spec_path,
    delay_label,
    load_experiment,
    mpi_status,
    scheme_label,
)

SMALL = {
    "experiment": {"name": "small"},
    "cluster": {"workers": 4, "kind": "sim"},
    "workload": {"name": "least_squares", "n_samples": 200, "dim": 5, "condition": 30.0},
    "delays": [{"label": "sexp", "name": "shifted_exponential", "a": 1.0, "mu": 1.0},
               {"name": "bimodal", "p": 0.2, "kappa": 3.0}],
    "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 3}, {"name": "adaptive_k", "k0": 2},
                {"name": "coded", "code": "cyclic_repetition", "s": 1},
                {"name": "dropcompute", "M": 2, "tau": "auto", "warmup": 1, "record_steps": 3}],
    "run": {"iterations": 12, "seeds": [0, 1], "batch": 8, "target_loss": 0.022},
}


def small(**changes) -> dict:
    spec = copy.deepcopy(SMALL)
    for path, value in changes.items():
        table, _, key = path.partition("__")
        if value is None:
            spec[table].pop(key) if key else spec.pop(table)
        elif key:
            spec[table][key] = value
        else:
            spec[table] = value
    return spec


# --- the spec -----------------------------------------------------------------------------------------------
def test_default_spec_and_example_are_identical():
    assert (ROOT / "examples" / "default.toml").read_text() == default_spec_path().read_text()


def test_default_experiment_is_valid_and_covers_the_schemes():
    exp = load_experiment(None, mpi=NO_MPI)
    names = {r.meta["scheme_name"] for r in exp.runs}
    assert {"sync", "fastest_k", "backup", "adaptive_k", "adaptive_k_load", "coded", "dropcompute", "partial_coded",
            "anytime"} <= names
    codes = {t.get("code") for t in exp.spec.schemes if t["name"] == "coded"}
    assert {"cyclic_repetition", "expander"} <= codes          # one exact, one approximate
    delays = {r.meta["delay"] for r in exp.runs}
    assert delays == {"pareto", "trace"}
    assert exp.spec.cluster["kind"] == "both" and exp.clusters == ["sim"]
    assert "MPI runs skipped" in exp.notes[0]
    assert len(exp.runs) == 10 * 2 * len(exp.spec.run["seeds"])
    quick = load_experiment(None, quick=True, mpi=NO_MPI)
    assert len(quick.runs) == 10 and all(r.spec["run"]["iterations"] <= 15 for r in quick.runs)
    assert {r.meta["delay"] for r in quick.runs} == {"pareto"}


@pytest.mark.parametrize("changes, key", [
    ({"run__iteratons": 5}, "iteratons"),
    ({"run__iterations": 0}, "iterations"),
    ({"run__seeds": [1, 1]}, "seeds"),
    ({"run__seeds": []}, "seeds"),
    ({"run__seeds": [-1]}, "seeds"),
    ({"run__seeds": "0"}, "seeds"),
    ({"cluster__workers": None}, "workers"),
    ({"cluster__kind": "cloud"}, "kind"),
    ({"cluster__colour": 1}, "colour"),
    ({"schemes": [{"name": "nope"}]}, "nope"),
    ({"schemes": [{"name": "fastest_k"}]}, "'k'"),
    ({"schemes": [{"name": "fastest_k", "k": 9}]}, "k"),
    ({"schemes": [{"name": "sync"}, {"name": "sync"}]}, "labels must be unique"),
    ({"schemes": []}, "[[schemes]]"),
    ({"delays": [{"name": "pareto", "alpha": -1}]}, "alpha"),
    ({"delays": [{"name": "pareto"}, {"name": "pareto", "beta": 2}]}, "beta"),
    ({"delays": [{"name": "pareto"}, {"name": "pareto"}]}, "labels must be unique"),
    ({"delay": {"name": "pareto"}}, "[delay] or [[delays]]"),
    ({"delays": None}, "[delay]"),
    ({"extra": {}}, "extra"),
    ({"experiment__owner": "me"}, "owner"),
    ({"run__target_loss": "low"}, "target_loss"),
])
def test_spec_errors_name_the_key(changes, key):
    with pytest.raises(ConfigError) as err:
        load_experiment(small(**changes), mpi=NO_MPI)
    assert key in str(err.value)


def test_delay_sweep_errors_name_the_delay():
    spec = small(delays=[{"name": "shifted_exponential"}, {"label": "slow", "name": "bimodal", "p": 2.0}])
    with pytest.raises(ConfigError, match=r"\[\[delays\]\] 1.*p"):
        load_experiment(spec, mpi=NO_MPI)


def test_cluster_override_and_bad_override():
    assert load_experiment(small(), cluster="mpi", mpi=(True, "ok")).clusters == ["mpi"]
    assert load_experiment(small(), cluster="both", mpi=(True, "ok")).clusters == ["sim", "mpi"]
    with pytest.raises(ConfigError, match="--cluster"):
        load_experiment(small(), cluster="grid", mpi=NO_MPI)


def test_labels():
    assert scheme_label({"name": "coded", "code": "cyclic_repetition", "s": 2}) == "coded/cyclic_repetition s=2"
    assert scheme_label({"name": "fastest_k", "k": 6}) == "fastest_k k=6"
    assert scheme_label({"name": "sync", "label": "baseline"}) == "baseline"
    assert delay_label({"name": "trace", "trace": "bytedance-SE"}) == "trace/bytedance-SE"


def test_single_run_specs_round_trip_through_toml():
    exp = load_experiment(None, mpi=NO_MPI)
    for run in exp.runs:
        assert tomllib.loads(tomli_w.dumps(run.spec)) == run.spec


def test_mpi_status_without_mpi4py(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    ok, reason = mpi_status()
    assert not ok and "mpi4py" in reason


# --- running, resuming --------------------------------------------------------------------------------------
def _files(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in ("summary.csv", "summary.json")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cmp") / "ref"
    compare(small(), out, progress=False, figures=False, mpi=NO_MPI)
    return out


def test_run_folders_hold_spec_records_and_marker(reference):
    runs = sorted((reference / "runs").iterdir())
    assert len(runs) == 2 * 5 * 2
    for run in runs:
        for name in ("spec.json", "spec.toml", "run.json", "records.jsonl", COMPLETE):
            assert (run / name).stat().st_size > 0, (run, name)
        records = (run / "records.jsonl").read_text().splitlines()
        assert json.loads((run / COMPLETE).read_text())["records"] == len(records)
    rows = json.loads((reference / "summary.json").read_text())
    assert len(rows) == 20 and all(r["status"] == "complete" for r in rows)
    sync = [r for r in rows if r["scheme"] == "sync"]
    assert all(r["speedup_iteration"] == 1.0 for r in sync)
    coded = [r for r in rows if r["scheme_name"] == "coded"]
    assert all(r["samples_computed"] == r["computed_units"] * 8 for r in coded)
    assert all(r["bytes"] == r["messages"] * 5 * 8 for r in coded)


def test_resume_after_interruption_gives_the_same_summary(reference, tmp_path, monkeypatch):
    out = tmp_path / "cut"
    real = gradcode.clusters.sim.simulate
    calls = {"runs": 0}

    class Interrupted(Exception):
        pass

    def flaky(*args, on_record=None, **kwargs):
        calls["runs"] += 1
        if calls["runs"] == 7:   # the 7th run dies after 3 iterations, records half written
            seen = []

            def cut(rec):
                on_record(rec)
                seen.append(rec)
                if len(seen) == 3:
                    raise Interrupted

            return real(*args, on_record=cut, **kwargs)
        return real(*args, on_record=on_record, **kwargs)

    monkeypatch.setattr(gradcode.clusters.sim, "simulate", flaky)
    with pytest.raises(Interrupted):
        compare(small(), out, progress=False, figures=False, mpi=NO_MPI)
    monkeypatch.setattr(gradcode.clusters.sim, "simulate", real)
    done = sorted(p.parent.name for p in (out / "runs").glob(f"*/{COMPLETE}"))
    assert len(done) == 6
    cut_run = next(p for p in (out / "runs").iterdir() if not (p / COMPLETE).exists())
    assert len((cut_run / "records.jsonl").read_text().splitlines()) == 3

    # the partial run is reported as partial, never as a finished one
    from gradcode.output.report import build_report

    build_report(out)
    rows = {r["run_id"]: r for r in json.loads((out / "summary.json").read_text())}
    assert rows[cut_run.name]["status"] == "partial" and rows[cut_run.name]["iterations"] == 3
    assert "PARTIAL" in (out / "report.md").read_text()

    stamps = {name: (out / "runs" / name / "records.jsonl").stat().st_mtime_ns for name in done}
    counted = {"runs": 0}

    def counting(*args, **kwargs):
        counted["runs"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(gradcode.clusters.sim, "simulate", counting)
    compare(small(), out, progress=False, figures=False, mpi=NO_MPI)
    assert counted["runs"] == 20 - 6                       # finished runs are not redone
    assert all((out / "runs" / n / "records.jsonl").stat().st_mtime_ns == t for n, t in stamps.items())
    assert _files(out) == _files(reference)


def test_deleted_marker_means_rerun(reference, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(reference, out)
    victims = sorted((out / "runs").iterdir())[::7]
    for run in victims:
        (run / COMPLETE).unlink()
        lines = (run / "records.jsonl").read_text().splitlines(keepends=True)
        (run / "records.jsonl").write_text("".join(lines[:2]) + lines[2][:10])   # a cut line
    compare(small(), out, progress=False, figures=False, mpi=NO_MPI)
    assert _files(out) == _files(reference)


def test_changed_spec_needs_replace_then_reruns_what_changed(reference, tmp_path):
    import shutil

    out = tmp_path / "changed"
    shutil.copytree(reference, out)
    spec = small(run__iterations=6)
    with pytest.raises(ConfigError, match=r"holds another experiment.*differs in run.*--replace"):
        compare(spec, out, progress=False, figures=False, mpi=NO_MPI)
    compare(spec, out, progress=False, figures=False, mpi=NO_MPI, replace=True)
    rows = json.loads((out / "summary.json").read_text())
    assert all(r["iterations"] <= 6 for r in rows)


def test_mpi_unavailable_is_stated_in_the_report(reference):
    text = (reference / "report.md").read_text()
    assert "## MPI vs simulator" in text and "not part of this comparison" in text
    both = load_experiment(small(cluster__kind="both"), mpi=(False, "no mpi4py here"))
    assert both.clusters == ["sim"] and "no mpi4py here" in both.notes[0]


# --- the README's main command --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.mpi
def test_readme_main_command_quick(tmp_path):
    """`gradcode compare --quick --out DIR`: the default experiment, cluster "both", so MPI runs too when
    mpi4py and `gradcode run` are available, and the report cross-checks them against the simulator."""
    out = tmp_path / "quick"
    assert mpi_status()[0], f"MPI is part of the main command and is installed by `make`: {mpi_status()[1]}"
    proc = cli("compare", "--quick", "--out", str(out), timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("summary.csv", "summary.json", "report.md"):
        assert (out / name).stat().st_size > 0
    rows = json.loads((out / "summary.json").read_text())
    assert all(r["status"] == "complete" for r in rows)
    text = (out / "report.md").read_text()
    section = text.split("## MPI vs simulator")[1].split("\n## ")[0]      # up to the next section (Hosts, Plots)
    assert "## Hosts (MPI)" in text      # every MPI run wrote its hosts.json
    mpi = [r for r in rows if r["cluster"] == "mpi"]
    assert len(mpi) == len(rows) // 2
    ratios = [float(line.split("|")[5]) for line in section.splitlines() if line.startswith("| ")
              and line.split("|")[5].strip()[:1].isdigit()]
    assert len(ratios) == len({(r["delay"], r["scheme"]) for r in mpi})
    assert all(0.5 < x < 2.0 for x in ratios)   # the 10% agreement is read off the full default experiment


def test_a_failed_mpi_run_is_reported_with_its_summarys_error(tmp_path, monkeypatch):
    """The reason a compare gives for a failed MPI run is the error its summary names (rank 0's, or `gradcode
    run`'s for a job ended from outside), not the log's last line (which is where the files are)."""
    from types import SimpleNamespace

    from gradcode.plumbing.outdir import FolderLock
    from gradcode.study import harness

    error = "mpiexec exited 0 before rank 0 wrote its summary: the job was ended from outside"

    def job(cmd, stdout=None, **kwargs):
        stdout.write(f"gradcode run: sync, 2 iterations on MPI\n  error                {error}\n  wrote o/\n")
        (tmp_path / "summary.json").write_text(json.dumps({"iterations": 2, "error": error}))
        (tmp_path / "records.jsonl").write_text('{"t": 0}\n{"t": 1}\n')
        return 1
    monkeypatch.setattr(harness, "run_child", job)
    with FolderLock(tmp_path) as lock, pytest.raises(harness.HarnessError, match=r"x: the MPI run failed \(exit 1\): "
                                                                                 "mpiexec exited 0 before rank 0"):
        harness._run_mpi(SimpleNamespace(run_id="x"), tmp_path, lock)


def test_compare_hostfile_reaches_every_mpi_run_and_is_checked_first(tmp_path, monkeypatch):
    """`compare --hostfile`: a missing file, or a comparison without MPI runs, is refused before any run; given one,
    every MPI run is `gradcode run ... --hostfile <absolute path>`."""
    from helpers import EXPERIMENT, MPI_OK, MPI_RUN

    import gradcode.study.harness as harness

    spec = copy.deepcopy(EXPERIMENT)
    with pytest.raises(ConfigError, match="no such file"):
        harness.compare(spec, tmp_path / "a", progress=False, mpi=NO_MPI, hostfile=tmp_path / "nope")
    (tmp_path / "hosts").write_text("localhost:4\n")
    with pytest.raises(ConfigError, match="no MPI run"):
        harness.compare(spec, tmp_path / "a", progress=False, mpi=NO_MPI, hostfile=tmp_path / "hosts")
    assert not (tmp_path / "a").exists()
    commands = []
    monkeypatch.setattr(harness, "run_child", lambda cmd, **kwargs: commands.append(cmd) or 1)
    spec["cluster"]["kind"] = "mpi"
    spec["run"].update(MPI_RUN)
    with pytest.raises(harness.HarnessError):     # every (faked) run failed
        harness.compare(spec, tmp_path / "b", progress=False, mpi=MPI_OK, hostfile=tmp_path / "hosts")
    assert len(commands) == 4
    assert all(cmd[-2:] == ["--hostfile", str((tmp_path / "hosts").resolve())] for cmd in commands)
