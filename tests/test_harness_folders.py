"""Results folders of `gradcode compare`: one writer at a time, damaged runs reported with their reason and redone,
one experiment per folder (--replace), a bad --out refused before any work, a report that cannot be written said.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from helpers import MPI_RUN, NO_MPI, cli, experiment, summary_rows

import gradcode.clusters.sim
from gradcode import make_delay
from gradcode.errors import ConfigError
from gradcode.output.report import build_report
from gradcode.study.harness import COMPLETE, compare


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("safety") / "ref"
    compare(experiment(), out, progress=False, figures=False, mpi=NO_MPI)
    return out


# --- one writer; damaged runs redone --------------------------------------------------------------------------------
def test_compare_refuses_a_folder_being_written(reference, tmp_path):
    from gradcode.plumbing.outdir import FolderBusy, FolderLock

    out = tmp_path / "busy"
    shutil.copytree(reference, out)
    victim = sorted((out / "runs").iterdir())[0]
    (victim / COMPLETE).unlink()
    with FolderLock(victim), pytest.raises(FolderBusy, match=f"pid {os.getpid()}"):
        compare(experiment(), out, progress=False, figures=False, mpi=NO_MPI)
    with FolderLock(out), pytest.raises(FolderBusy, match=str(out)):
        compare(experiment(), out, progress=False, figures=False, mpi=NO_MPI)


@pytest.mark.parametrize("damage", ["garbage line", "count", "unreadable marker"])
def test_a_damaged_run_is_reported_with_its_reason_and_redone(reference, tmp_path, damage):

    out = tmp_path / "damaged"
    shutil.copytree(reference, out)
    victim = sorted((out / "runs").iterdir())[1]
    if damage == "garbage line":     # two writers interleaved: the marker exists, a line does not parse
        with open(victim / "records.jsonl", "a") as fh:
            fh.write('{"iteration": 4, "sta\n')
        reason = "unparsable line"
    elif damage == "count":
        (victim / COMPLETE).write_text(json.dumps({**json.loads((victim / COMPLETE).read_text()), "records": 9}))
        reason = "names 9 records, records.jsonl holds 5"
    else:
        (victim / COMPLETE).write_text("{")
        reason = "cannot be read"
    build_report(out)
    text = (out / "report.md").read_text()
    assert "PARTIAL" in text and reason in text and "no completion marker" not in text
    compare(experiment(), out, progress=False, figures=False, mpi=NO_MPI)
    assert (out / "summary.csv").read_bytes() == (reference / "summary.csv").read_bytes()
    assert "PARTIAL" not in (out / "report.md").read_text()


# --- one experiment per folder --------------------------------------------------------------------------------------
def test_an_interrupted_new_experiment_is_never_mixed_with_the_old(reference, tmp_path, monkeypatch):

    out = tmp_path / "mixed"
    shutil.copytree(reference, out)
    new = experiment(iterations=3)
    with pytest.raises(ConfigError, match="--replace"):
        compare(new, out, progress=False, figures=False, mpi=NO_MPI)
    calls = {"n": 0}
    real = gradcode.clusters.sim.simulate

    def cut(*args, **kwargs):       # the new experiment is interrupted after its first run
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(gradcode.clusters.sim, "simulate", cut)
    with pytest.raises(KeyboardInterrupt):
        compare(new, out, progress=False, figures=False, mpi=NO_MPI, replace=True)
    build_report(out)
    rows = summary_rows(out)
    assert [r["iterations"] for r in rows] == [3]      # only the new experiment's one finished run


@pytest.mark.slow
def test_compare_replace_on_the_command_line(reference, tmp_path):
    out = tmp_path / "cli"
    shutil.copytree(reference, out)
    path = tmp_path / "other.toml"
    import tomli_w

    path.write_text(tomli_w.dumps(experiment(iterations=3)))
    proc = cli("compare", path, "--out", out)
    assert proc.returncode == 2 and "holds another experiment" in proc.stderr and "--replace" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = cli("compare", path, "--out", out, "--replace")
    assert proc.returncode == 0, proc.stderr
    assert {r["iterations"] for r in summary_rows(out)} == {3}
    assert "--replace" in cli("compare", "--help").stdout


def test_compare_refuses_a_sweep_folder_and_takes_a_spec_dict_with_none_fields(tmp_path):
    # compare must not write its runs into a sweep's folder, and a None (from DelayModel.spec()) must not fail
    # writing spec.toml after spec.json.
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
    for schemes in ([None], [{"name": "sync"}, None], "sync"):   # not a TypeError for a None entry
        with pytest.raises(ConfigError, match=r"\[\[schemes\]\] must be a non-empty array of tables"):
            compare({**raw, "schemes": schemes}, tmp_path / "other", progress=False, figures=False)


# --- output folders checked before any work -------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["compare", "simulate", "run"])
@pytest.mark.parametrize("where", ["file", "under a file", "unwritable"])
def test_a_bad_out_is_an_error_before_any_work(tmp_path, command, where):
    import tomli_w

    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    out = {"file": a_file, "under a file": a_file / "sub", "unwritable": Path("/proc/gradcode_out")}[where]
    big = {k: v for k, v in experiment().items() if k != "schemes"} | {"scheme": {"name": "sync"}}
    big["run"] = {"iterations": 100000, "seed": 0, **MPI_RUN}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(big))
    start = time.monotonic()
    proc = cli(command, path, "--out", out, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "--out" in proc.stderr and str(out) in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - start < 30 and "mpiexec" not in proc.stdout


def test_report_into_an_unwritable_folder_is_an_error(reference, tmp_path, monkeypatch):
    import tempfile


    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    with pytest.raises(ConfigError, match="cannot be written: Permission denied"):
        build_report(reference)
