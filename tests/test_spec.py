"""Experiment specs and the `gradcode simulate` command: validation before work, and the files it writes."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gradcode.workloads as workloads
from gradcode.cli import main
from gradcode.errors import ConfigError
from gradcode.spec import load_spec
from mpi_runtime.config import load_run

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "simulate.toml"


def base():
    return {
        "cluster": {"workers": 6},
        "workload": {"name": "least_squares", "n_samples": 120, "dim": 3},
        "delay": {"name": "exponential", "mu": 1.0},
        "scheme": {"name": "fastest_k", "k": 4},
        "run": {"iterations": 5, "seed": 0},
    }


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda s: s.pop("cluster"), ["[cluster]", "workers"]),
        (lambda s: s["cluster"].update(workers=0), ["n", ">= 1"]),
        (lambda s: s["cluster"].update(nodes=3), ["nodes", "workers"]),
        (lambda s: s.update(extra={}), ["extra", "accepted"]),
        (lambda s: s["run"].update(iters=3), ["iters", "iterations"]),
        (lambda s: s["scheme"].update(k=9), ["[scheme fastest_k]", "k"]),
        (lambda s: s.update(scheme={"name": "adaptive_k_load", "batch": 8}),
         ["[scheme adaptive_k_load]", "unknown parameter 'batch'", "max_batch"]),
        (lambda s: s.update(scheme={"name": "backup", "N": 5}), ["[scheme backup]", "'N'", "is k here"]),
        (lambda s: s["scheme"].update(name="fastest"), ["unknown scheme", "fastest_k"]),
        (lambda s: s["scheme"].pop("name"), ["name"]),
        (lambda s: s["delay"].update(mu=-1), ["[delay]", "mu"]),
        (lambda s: s["delay"].update(name="gamma"), ["[delay]", "gamma"]),
        (lambda s: s["workload"].update(dims=3), ["[workload]", "dims"]),
        (lambda s: s.pop("delay"), ["[delay]"]),
        (lambda s: s.pop("scheme"), ["scheme", "fastest_k"]),
    ],
)
def test_spec_errors_name_the_key(change, words):
    spec = base()
    change(spec)
    with pytest.raises(ConfigError) as err:
        load_spec(spec)
    for word in words:
        assert word in str(err.value)


def test_example_spec_is_valid():
    spec = load_spec(EXAMPLE)
    assert spec.workers == 12 and spec.schemes[0]["code"] == "cyclic_repetition"


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[cluster\nworkers = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_spec(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_spec(tmp_path / "nope.toml")


def test_simulate_command_writes_records_and_summary(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["simulate", str(EXAMPLE), "--out", str(out), "--iterations", "15"]) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert len(records) == 15 == summary["iterations"]
    assert summary["total_time"] == pytest.approx(records[-1]["end"])
    assert all(r["method"] == "exact" for r in records)
    assert "mean_iteration_time" in capsys.readouterr().out


def test_simulate_command_reports_errors_without_traceback(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('[cluster]\nworkers = 4\n[delay]\nname = "exponential"\n[scheme]\nname = "fastest_k"\nk = 7\n')
    proc = subprocess.run([sys.executable, "-m", "gradcode", "simulate", str(spec), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "k" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()   # nothing ran


def test_an_mpi_rank_builds_the_workload_once(monkeypatch):
    """``load_run`` checks the spec by building everything; ``RunConfig.build()`` reuses that workload, so an MPI rank
    builds it once. A later ``build()`` (another run) gets a new scheme and delay model, and the same workload
    (gradcode's own workloads are shared within a process); another workload table builds anew."""
    import gradcode.spec as spec_module

    built, make = [], workloads.make_workload
    monkeypatch.setattr(workloads, "make_workload", lambda *a, **k: built.append(make(*a, **k)) or built[-1])
    monkeypatch.setattr(spec_module, "_SHARED", {})
    cfg = load_run(base())
    scheme, delay, workload = cfg.build()
    assert len(built) == 1 and workload is built[0]
    scheme2, delay2, workload2 = cfg.build()
    assert len(built) == 1 and workload2 is workload
    assert scheme2 is not scheme and delay2 is not delay
    other = base()
    other["workload"]["seed"] = 1 + other["workload"].get("seed", 0)
    workload3 = load_run(other).build()[2]
    assert len(built) == 2 and workload3 is built[1] and not np.array_equal(workload3.X, workload.X)
    assert load_run(base()).build()[2] is not workload     # only the last table is kept


def test_a_workload_read_from_a_file_is_built_every_time(tmp_path):
    """A ``data`` file may change between two runs: such a workload is never shared."""
    from gradcode.spec import build

    path = tmp_path / "d.csv"
    path.write_text("".join(f"{i % 7},{i % 3},{i % 5}\n" for i in range(40)))
    raw = base()
    raw["workload"] = {"name": "least_squares", "data": str(path)}
    spec = load_spec(raw)
    assert build(spec)[2] is not build(spec)[2]
