"""A dead worker is a straggler that never answers again (gradcode/deaths.py, mpi_runtime/deaths.py): on one host
under MPICH the run goes on while the stop rule holds with the living, and the simulator, given the same
``[faults]``, predicts the iterations and the responders; when the rule can no longer hold the run ends naming
the dead. Worker 0 is twice as slow as the others (constant times), so that who responds is decided by 5 model
units (100 ms), never by the wall clock's noise."""

from __future__ import annotations

import json
import re

import pytest
from helpers import mpi_spec, read_whole_records, run_mpi, simulate_spec

from gradcode.clusters.driver import SimulationError

SLOW_0 = {"name": "persistent", "base": {"name": "constant", "value": 5.0}, "workers": [0], "slowdown": 2.0}


def _spec(scheme: dict, die=None, iterations: int = 8) -> dict:
    spec = mpi_spec(scheme, iterations=iterations, delay=dict(SLOW_0))
    if die is not None:
        spec["faults"] = {"die": die}
    return spec


@pytest.mark.mpi
def test_simulator_predicts_the_run_a_death_leaves(tmp_path):
    """fastest_k, k = 3 of 4: workers {1, 2, 3} respond until worker 3 dies at iteration 4 (killed by its rank at
    that plan), then {0, 1, 2}; exit 0, every iteration recorded, the death in records and summary."""
    spec = _spec({"name": "fastest_k", "k": 3}, die={"worker": 3, "at": 4})
    proc, out = run_mpi(spec, tmp_path)
    assert proc.returncode == 0, proc.stderr
    # the process really died: the shell around rank 4 saw it end on SIGKILL (its own waitpid, not the master's word)
    assert re.search(r"gradcode: rank 4 \(process \d+\)( on host \S+)? ended on signal 9", proc.stderr), proc.stderr
    mpi, sim = read_whole_records(out), simulate_spec(spec).records
    assert len(mpi) == len(sim) == 8
    for a, b in zip(sim, mpi, strict=True):
        assert sorted(a["responders"]) == sorted(b["responders"]), (a["iteration"], a["responders"], b["responders"])
        assert a.get("dead") == b.get("dead") == ([3] if a["iteration"] >= 4 else None)
    assert sorted(mpi[-1]["responders"]) == [0, 1, 2]
    deaths = json.loads((out / "summary.json").read_text())["deaths"]
    assert [(d["worker"], d["rank"], d["why"]) for d in deaths] == [(3, 4, "its process is gone")]


@pytest.mark.mpi
def test_a_run_ends_naming_the_dead_when_the_rule_cannot_hold(tmp_path):
    """Two deaths leave 2 of 4 workers for k = 3: the run ends at the second death's iteration, on both clusters,
    with the records before it kept and an error that names both dead workers."""
    spec = _spec({"name": "fastest_k", "k": 3}, die=[{"worker": 3, "at": 2}, {"worker": 2, "at": 5}])
    with pytest.raises(SimulationError, match="iteration 5: the stop rule of fastest_k can no longer hold"):
        simulate_spec(spec)
    proc, out = run_mpi(spec, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert len(read_whole_records(out)) == 5
    error = json.loads((out / "summary.json").read_text())["error"]
    assert "iteration 5" in error and "worker 2 (rank 3" in error and "worker 3 (rank 4" in error, error


@pytest.mark.mpi
@pytest.mark.parametrize("scheme, hook", [
    ({"name": "coded", "code": "cyclic_repetition", "s": 1}, "2:3"),         # raises: reports, then ends alone
    ({"name": "partial_coded", "s": 1}, "2:3:exit"),                         # os._exit, as a segfault would
])
def test_coded_schemes_survive_a_failed_worker(scheme, hook, tmp_path):
    """An exact code with s = 1 outlives one worker that fails (an exception or an exit) and still decodes exactly:
    every iteration's gradient is the full one (grad_error ~ 0), worker 1 answers no plan from 3 on."""
    spec = _spec(scheme)
    proc, out = run_mpi(spec, tmp_path, env_extra={"GRADCODE_TEST_CRASH": hook})
    assert proc.returncode == 0, proc.stderr
    records = read_whole_records(out)
    assert len(records) == 8
    assert all(1 not in r["responders"] for r in records[4:])
    assert all(r["grad_error"] is None or r["grad_error"] < 1e-9 for r in records)
    summary = json.loads((out / "summary.json").read_text())
    assert [d["worker"] for d in summary["deaths"]] == [1] and "error" not in summary
    assert summary["unresponsive_ranks"] == []


@pytest.mark.mpi
@pytest.mark.slow
def test_an_all_reduce_ends_fast_naming_the_dead_rank(tmp_path):
    """DropCompute cannot go on without a rank under MPICH: the run ends at once (well within grace), naming the
    rank and saying what would go on (Open MPI with ULFM), with the steps before it recorded."""
    spec = mpi_spec({"name": "dropcompute", "M": 2}, iterations=10, grace=30.0)
    proc, out = run_mpi(spec, tmp_path, env_extra={"GRADCODE_TEST_CRASH": "2:5:kill"}, timeout=25)
    assert proc.returncode == 1, proc.stderr
    assert len(read_whole_records(out)) == 5
    error = json.loads((out / "summary.json").read_text())["error"]
    assert error.startswith("rank 2 (worker 1) died: its process is gone") and "Open MPI with ULFM" in error
