"""`gradcode compare` with MPI runs: the MPI rules checked before any run, failed runs printed with their reason,
kill -9 of compare leaving no process behind and the experiment resumed whole.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ENV, MPI_OK, MPI_RUN, NO_MPI, cli, experiment, processes, summary_rows, wait_dead

from gradcode.errors import ConfigError
from gradcode.study.harness import HarnessError, compare, load_experiment


@pytest.mark.parametrize("change, key, mpi_only", [
    ({"workload": None}, "[workload]", True),
    ({"run": {"time_scale": -1}}, "time_scale", False),   # a bad number is refused for every cluster
    ({"run": {"grace": 0}}, "grace", False),
])
@pytest.mark.parametrize("kind", ["mpi", "both"])
def test_mpi_rules_are_checked_before_any_run(tmp_path, change, key, mpi_only, kind):
    bad = experiment(**MPI_RUN)
    bad["cluster"]["kind"] = kind
    for table, value in change.items():
        bad.pop(table) if value is None else bad[table].update(value)
    with pytest.raises(ConfigError, match="MPI runs" if mpi_only else r"\[run\]") as err:
        compare(bad, tmp_path / "out", progress=False, figures=False, mpi=MPI_OK)
    assert key in str(err.value)
    assert not (tmp_path / "out").exists()
    if mpi_only:
        assert load_experiment(bad, mpi=NO_MPI).clusters == ["sim"]     # without MPI there is nothing to check
    else:
        with pytest.raises(ConfigError, match=key):
            load_experiment(bad, mpi=NO_MPI)


@pytest.mark.mpi
def test_failed_mpi_runs_are_printed_with_their_reason(tmp_path, monkeypatch):
    failing = experiment(iterations=4, seeds=[0], **MPI_RUN)
    failing["cluster"]["kind"] = "mpi"
    failing["schemes"] = [{"name": "sync"}]
    monkeypatch.setenv("GRADCODE_TEST_CRASH", "1:0")   # before any record
    # the reason is the error rank 0's summary names (the rank, what it raised, the host)
    with pytest.raises(HarnessError, match=r"(?s)every run failed.*worker 0 \(rank 1, host [^)]*\) at iteration 0: "
                                           r"failed: crashed \(InjectedCrash\).*on host") as err:
        compare(failing, tmp_path / "out", progress=False, figures=False, mpi=MPI_OK)
    assert "no run has any records" not in str(err.value)


@pytest.mark.slow
@pytest.mark.mpi
def test_kill_9_of_compare_leaves_no_process_and_resumes_whole(tmp_path):
    import tomli_w

    mpi = experiment(iterations=30, seeds=[0], time_scale=0.05, grace=2.0)
    mpi["cluster"]["kind"] = "mpi"
    mpi["schemes"] = [{"name": "sync"}]
    path = tmp_path / "mpi.toml"
    path.write_text(tomli_w.dumps(mpi))
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "gradcode", "compare", str(path), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    records: list[Path] = []
    end = time.monotonic() + 60
    while time.monotonic() < end and not records:
        records = [p for p in out.glob("runs/*/records.jsonl") if p.stat().st_size > 0]
        time.sleep(0.2)
    assert records, "the MPI run never started"
    tree = processes(str(out))
    assert len(tree) >= 5                        # gradcode run, mpiexec, 4 ranks (3 workers + master)
    proc.kill()
    proc.wait()
    assert wait_dead(tree, 10) == [], processes(str(out))
    done = cli("compare", path, "--out", out, timeout=120)   # at once: nothing left to race with
    assert done.returncode == 0, done.stderr
    assert [r["status"] for r in summary_rows(out)] == ["complete"]
    assert len(records[0].read_text().splitlines()) == 30
