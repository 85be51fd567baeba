"""Faults of an MPI run: every wait is bounded, every failure names its rank, rank 0 keeps its records and writes
its summary with the error whenever it is alive; bad test hooks and launcher options are errors before the run;
zero injected delay gives no meaningless ratio and no overrun.

Every job runs in a subprocess with a timeout (``tests/helpers.py``); small runs, short grace.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from helpers import ENV, check_worker_times, experiment, mpi_spec, processes, read_whole_records, run_mpi, wait_dead

from gradcode.clusters.records import summarize
from gradcode.errors import ConfigError
from mpi_runtime.faults import check_hooks
from mpi_runtime.launch import SURVIVE_DEATH, find_mpiexec, prepare

TIMEOUT = 40
DROP = {"name": "dropcompute", "M": 2, "micro_load": 1.0, "tau": 3.0, "warmup": 1}   # a unit per micro-batch


def _fault(spec: dict, tmp_path: Path, **env: str):
    """Run with test hooks; (process, summary or None, seconds)."""
    tick = time.monotonic()
    proc, out = run_mpi(spec, tmp_path, env_extra=env, timeout=TIMEOUT)
    summary = out / "summary.json"
    return proc, json.loads(summary.read_text()) if summary.exists() else None, time.monotonic() - tick


# --- a rank that stops before the clock starts -------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("stage, what", [("start", "start-up"), ("warmup", "warm-up")])
def test_worker_stuck_before_the_run_is_named(stage, what, tmp_path):
    spec = mpi_spec({"name": "fastest_k", "k": 2}, n=3, iterations=4, grace=1.0)
    spec["run"]["startup_timeout"] = 2.0
    proc, summary, _ = _fault(spec, tmp_path, GRADCODE_TEST_CRASH=f"2:{stage}:hang")
    assert proc.returncode == 1, proc.stderr
    assert f"{what}: rank 2 (worker 1) did not arrive" in proc.stderr
    assert f"{what}: rank 2 (worker 1)" in summary["error"]


@pytest.mark.mpi
def test_master_stuck_before_the_run_is_named(tmp_path):
    spec = mpi_spec({"name": "sync"}, n=2, iterations=4, grace=1.0)
    spec["run"]["startup_timeout"] = 2.0
    proc, summary, _ = _fault(spec, tmp_path, GRADCODE_TEST_CRASH="0:warmup:hang")
    assert proc.returncode == 1
    assert "warm-up: rank 0 (master) did not answer" in proc.stderr and "rank 0: its process is" in proc.stderr


# --- crashes name the rank; rank 0 writes its summary -------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("how", ["exit", "kill"])
def test_dead_worker_is_named_and_summary_written(tmp_path, how):
    """A worker that ends without a word (a segfault, an OOM kill): the launcher no longer kills the job first.
    Under sync, which needs every worker, the death ends the run (tests/test_mpi_deaths.py: the schemes that
    outlive it)."""
    spec = mpi_spec({"name": "sync"}, iterations=10)
    proc, summary, _ = _fault(spec, tmp_path, GRADCODE_TEST_CRASH=f"2:3:{how}")
    assert proc.returncode == 1
    said = "worker 1 (rank 2, host "
    assert said in proc.stderr and "its process is gone" in proc.stderr
    assert "BAD TERMINATION" not in proc.stdout + proc.stderr
    if how == "kill":   # the shell around the rank names it too, under any launcher
        assert re.search(r"gradcode: rank 2 \(process \d+\) ended on signal 9", proc.stderr), proc.stderr
    assert said in summary["error"] and "the stop rule of sync can no longer hold" in summary["error"]
    assert 3 <= len(read_whole_records(tmp_path / "out")) <= 4


@pytest.mark.mpi
def test_failed_worker_reason_reaches_the_summary(tmp_path):
    spec = mpi_spec({"name": "sync"}, iterations=10)
    proc, summary, _ = _fault(spec, tmp_path, GRADCODE_TEST_CRASH="2:3")
    assert proc.returncode == 1
    assert "rank 2 (worker 1) crashed (InjectedCrash)" in proc.stderr
    assert "at iteration 3: failed: crashed (InjectedCrash): injected crash" in summary["error"]


@pytest.mark.mpi
@pytest.mark.parametrize("how", ["", ":exit"])
def test_master_crash(how, tmp_path):
    """Crashing the master works: raised, it writes its summary; dead, the workers notice and name it."""
    spec = mpi_spec({"name": "fastest_k", "k": 2}, n=3, iterations=10)
    proc, summary, _ = _fault(spec, tmp_path, GRADCODE_TEST_CRASH=f"0:3{how}")
    assert proc.returncode == 1
    if how:
        assert "error: rank 0 (master) died: its process is gone" in proc.stderr
    else:
        assert "rank 0 (master) crashed (InjectedCrash)" in proc.stderr
        assert "injected crash" in summary["error"] and len(read_whole_records(tmp_path / "out")) == 3


@pytest.mark.mpi
@pytest.mark.parametrize("how, said", [(":hang", "rank 2 (worker 1) stopped answering"),
                                       (":exit", "rank 2 (worker 1) died")])
def test_dropcompute_names_the_rank_that_stopped(how, said, tmp_path):
    spec = mpi_spec(dict(DROP), n=3, iterations=6, grace=1.0)
    proc, summary, _ = _fault(spec, tmp_path, GRADCODE_TEST_CRASH=f"2:2{how}")
    assert proc.returncode == 1
    assert said in proc.stderr and said in summary["error"]
    assert len(read_whole_records(tmp_path / "out")) == 2


@pytest.mark.mpi
def test_nan_under_sync_names_the_erased_worker_at_once(tmp_path):
    spec = mpi_spec({"name": "sync"}, n=3, iterations=6, grace=10.0)
    proc, summary, seconds = _fault(spec, tmp_path, GRADCODE_TEST_NAN="2:3")
    assert proc.returncode == 1
    assert "erasures (non-finite messages, never combined) from workers [1] (ranks [2])" in summary["error"]
    assert seconds < 10, "failed only after grace: nothing could arrive any more"


def _rank_pid(spec_path: Path, rank: int) -> int | None:
    """The pid of ``rank`` of the job started on ``spec_path`` (Linux /proc)."""
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes()
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        python = cmd.split(b"\0")[0] != b"sh"     # not the shell around the rank (launch.SURVIVE_DEATH)
        if python and b"mpi_runtime" in cmd and str(spec_path).encode() in cmd and f"PMI_RANK={rank}".encode() in env:
            return int(proc.name)
    return None


@pytest.mark.mpi
@pytest.mark.parametrize("rank, said", [(2, "rank 0 (master) error: iteration "),
                                        (0, "error: rank 0 (master) died")])
def test_sigkill_of_a_rank_is_named(rank, said, tmp_path):
    """``kill -9`` of a worker (under sync rank 0 names it and writes its summary) or of the master (the workers
    name it)."""
    spec = mpi_spec({"name": "sync"}, n=3, iterations=400)
    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    cmd, env, _ = prepare(path, tmp_path / "out", 4)
    job = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        records = tmp_path / "out" / "records.jsonl"
        limit = time.monotonic() + 20
        while not (records.exists() and records.read_text().count("\n") >= 2) and time.monotonic() < limit:
            time.sleep(0.05)
        os.kill(_rank_pid(path, rank), signal.SIGKILL)
        _, stderr = job.communicate(timeout=TIMEOUT)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 1 and said in stderr, stderr
    if rank:
        error = json.loads((tmp_path / "out" / "summary.json").read_text())["error"]
        assert "worker 1 (rank 2, host " in error and "its process is gone" in error, error


# --- hooks that could not fire, and launcher options --------------------------------------------------------
@pytest.mark.parametrize("env, said", [
    ({"GRADCODE_TEST_CRASH": "9:5"}, "rank 9 is not a rank of this job (0..3"),
    ({"GRADCODE_TEST_CRASH": "-1:5"}, "rank -1 is not a rank"),
    ({"GRADCODE_TEST_CRASH": "2:50"}, "iteration 50 is not one of this run's (0..9)"),
    ({"GRADCODE_TEST_CRASH": "2:x"}, "'2:x' is not RANK:WHEN"),
    ({"GRADCODE_TEST_CRASH": "2:3:boom"}, "'2:3:boom' is not RANK:WHEN"),
    ({"GRADCODE_TEST_NAN": "0:3"}, "rank 0 is not a worker rank of this job (1..3"),
    ({"GRADCODE_TEST_NAN": "4:3"}, "rank 4 is not a worker rank"),
    ({"GRADCODE_TEST_NAN": "2:3:exit"}, "is not RANK:ITER"),
])
def test_hooks_that_cannot_fire_are_errors(env, said):
    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
        check_hooks(4, 10, environ=env)


def test_gradcode_run_rejects_a_hook_before_launch(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(mpi_spec({"name": "sync"}, iterations=3)))
    proc = subprocess.run([sys.executable, "-m", "gradcode", "run", str(path), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "GRADCODE_TEST_CRASH": "0:9"})
    assert proc.returncode == 2 and "GRADCODE_TEST_CRASH: iteration 9" in proc.stderr
    assert "mpiexec" not in proc.stdout


def test_explicit_mpiexec_must_exist(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="--mpiexec /nonexistent: no such file"):
        find_mpiexec("/nonexistent")
    with pytest.raises(ConfigError, match="no such command on PATH"):
        find_mpiexec("no-such-mpiexec-here")
    plain = tmp_path / "mpiexec"
    plain.write_text("")
    with pytest.raises(ConfigError, match="not an executable file"):
        find_mpiexec(str(plain))
    with pytest.raises(ConfigError, match="not an executable file"):
        find_mpiexec(str(tmp_path))
    assert find_mpiexec(str(Path(sys.executable).parent / "mpiexec")).endswith("mpiexec")
    text = tmp_path / "not-a-program"
    text.write_text("hello\n")
    text.chmod(0o755)
    with pytest.raises(ConfigError, match="cannot run it"):
        prepare(tmp_path / "s.toml", tmp_path / "o", 2, mpiexec=str(text))


def test_hostfile_must_exist(tmp_path):
    with pytest.raises(ConfigError, match="--hostfile .*missing: no such file"):
        prepare(tmp_path / "s.toml", tmp_path / "o", 2, hostfile=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="not a file"):
        prepare(tmp_path / "s.toml", tmp_path / "o", 2, hostfile=str(tmp_path))


# --- zero injected delay --------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("scheme, value", [({"name": "fastest_k", "k": 2}, 0.0), (dict(DROP), 1e-9)])
def test_zero_delay_has_no_ratio_and_no_overrun(scheme, value, tmp_path):
    """Zero, and tiny (1e-9 units: far below the runtime's 1 ms resolution), delays: no ratio (null, with the
    reason), no overrun, messages and work counted, per-worker times consistent."""

    spec = mpi_spec(scheme, n=3, iterations=4, delay={"name": "constant", "value": value})
    proc, summary, _ = _fault(spec, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert summary["overhead_ratio"] is None and summary["median_overhead_ratio"] is None
    assert "ideal time of 0" in summary["overhead_ratio_note"]
    records = read_whole_records(tmp_path / "out")
    assert summary["overruns"] == 0 and all(r["overruns"] == [] for r in records)
    assert summary["messages"] >= 2 * len(records) and all(r["messages"] >= 2 for r in records)
    assert summary["computed"] > 0 and summary["wasted"] >= 0
    for rec in records:
        check_worker_times(rec, 3)


def test_summarize_leaves_out_iterations_of_zero_ideal_time():
    def rec(start, end, ideal):
        return {"scheme": "s", "start": start, "end": end, "ideal_end": start + ideal, "computed": 0.0, "wasted": 0.0,
                "messages": 0, "residual": None, "loss": None}

    summary = summarize([rec(0.0, 1.0, 0.0), rec(1.0, 3.0, 1.0), rec(3.0, 4.0, 1e-15)])   # 1e-15: round-off
    assert summary["median_overhead_ratio"] == 2.0 and summary["overhead_ratio"] == pytest.approx(4.0)
    assert summary["overhead_ratio_note"].startswith("2 of 3 iterations")
    zero = summarize([rec(0.0, 1.0, 0.0), rec(1.0, 2.0, 0.0)])
    assert zero["overhead_ratio"] is None and zero["median_overhead_ratio"] is None
    assert np.isclose(summarize([rec(0.0, 2.0, 1.0)])["median_overhead_ratio"], 2.0)
    tiny = summarize([rec(0.0, 1.0, 1e-9), rec(1.0, 2.0, 1e-9)])      # tiny, but real: the ratio says so
    assert tiny["median_overhead_ratio"] == pytest.approx(1e9) and tiny["overhead_ratio"] == pytest.approx(1e9)


# --- the shell around each rank -------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [0, 3])
def test_rank_wrapper_reports_the_rank_status_through_sigusr1(code):
    """Hydra sends SIGUSR1 to every rank each time a peer exits, so signals reach the wrapper shell while its rank
    is finishing. The trap ends ``wait`` early with 138; the job's exit code must still be the rank's own (CI once
    failed a complete run with 138). The rank here ignores SIGUSR1 and exits after 30 ms; SIGUSR1 every ms."""
    rank = ["sh", "-c", f'trap "" USR1; sleep 0.05; exit {code}']
    for _ in range(20):
        proc = subprocess.Popen(SURVIVE_DEATH + rank)
        _wait_for_signal_mask(proc.pid, "SigCgt", signal.SIGUSR1)       # the wrapper's trap is set
        child = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        _wait_for_signal_mask(int(child[0]), "SigIgn", signal.SIGUSR1)  # and the rank's
        while proc.poll() is None:
            os.kill(proc.pid, signal.SIGUSR1)
            time.sleep(0.001)
        assert proc.wait(5) == code


def _wait_for_signal_mask(pid: int, mask: str, sig: int, timeout: float = 10.0) -> None:
    """Until ``sig`` is in ``pid``'s ``mask`` (``SigCgt`` caught, ``SigIgn`` ignored): before its trap is set, the
    signal would end the shell."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        if int(next(line for line in lines if line.startswith(mask + ":")).split()[1], 16) >> (sig - 1) & 1:
            return
        time.sleep(0.001)
    raise AssertionError(f"pid {pid}: signal {sig} not in {mask} within {timeout} s")


@pytest.mark.parametrize("variable", ["PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"])
def test_rank_wrapper_reports_a_rank_killed_by_a_signal(variable):
    # The rank number of MPICH, Open MPI and PMIx launchers: the wrapper names the rank under any of them.
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")}
    proc = subprocess.run(SURVIVE_DEATH + ["sh", "-c", "kill -9 $$"], timeout=10, capture_output=True, text=True,
                          env={**env, variable: "5"})
    assert proc.returncode == 128 + signal.SIGKILL
    assert re.search(r"gradcode: rank 5 \(process \d+\) ended on signal 9", proc.stderr), proc.stderr
    quiet = subprocess.run(SURVIVE_DEATH + ["sh", "-c", "exit 3"], timeout=10, capture_output=True, text=True)
    assert quiet.returncode == 3 and quiet.stderr == ""


def test_every_launcher_gets_the_rank_wrapper():
    from mpi_runtime.launch import command

    for flavor in ("mpich", "openmpi", "unknown"):
        cmd = command("s.toml", "out", 4, mpiexec="mpiexec", flavor=flavor)
        start = cmd.index("sh")
        assert cmd[start:start + len(SURVIVE_DEATH)] == SURVIVE_DEATH, flavor
        assert cmd[start + len(SURVIVE_DEATH) + 1:start + len(SURVIVE_DEATH) + 5] == ["-m", "mpi4py", "-m",
                                                                                     "mpi_runtime"]


@pytest.mark.slow
@pytest.mark.mpi
def test_ranks_hung_in_startup_are_killed_with_the_reason(tmp_path):
    """Every rank hangs before any code of ours runs (here in Python's start-up, as in a stuck MPI_Init): the ranks'
    own bounded waits never begin, so the launcher's watchdog must end the job and say why."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import os, time\nwhile 'PMI_RANK' in os.environ:\n    time.sleep(1)\n")
    spec = mpi_spec({"name": "sync"}, iterations=3)
    spec["run"]["startup_timeout"] = 1.0
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(spec))
    env = {**os.environ, "PYTHONPATH": f"{hook}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "gradcode", "run", str(path), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=90, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "did not all start within 12 s" in proc.stdout
    assert time.monotonic() - start < 60
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert "MPI_Init" in summary["error"] and summary["iterations"] == 0


# --- a launcher that dies -------------------------------------------------------------------------------------------
def _argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


@pytest.mark.mpi
@pytest.mark.parametrize("victim", ["proxy", "wrapper"])
def test_ranks_end_when_their_launcher_dies(tmp_path, victim):
    """kill -9 of MPICH's proxy (the ranks' launcher) or of one rank's wrapper shell (launch.SURVIVE_DEATH): no
    rank runs on as an orphan, and nothing is left holding the run folder."""
    import tomli_w

    run = experiment(iterations=400, seeds=[0], time_scale=0.05, grace=2.0)
    run.pop("experiment")
    run["schemes"] = [{"name": "sync"}]
    run["run"]["seed"] = run["run"].pop("seeds")[0]
    path = tmp_path / "run.toml"
    path.write_text(tomli_w.dumps(run))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "gradcode", "run", str(path), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and not (out / "records.jsonl").is_file():
            time.sleep(0.2)
        assert (out / "records.jsonl").is_file(), "the MPI run never started"
        ranks = [p for p in processes(str(out)) if "mpi_runtime" in _argv(p) and "python" in _argv(p)[0]]
        assert len(ranks) == 4
        shell = int(Path(f"/proc/{ranks[1]}/stat").read_text().split()[3])    # the rank's parent: its wrapper
        proxy = int(Path(f"/proc/{shell}/stat").read_text().split()[3])
        os.kill(proxy if victim == "proxy" else shell, signal.SIGKILL)
        assert wait_dead(ranks, 15) == [], processes(str(out))
        proc.wait(timeout=30)       # and the launcher ends (no process holds the job open)
    finally:
        proc.kill()
