"""Nothing lost or mixed (issue 11, items 5-8, 11 and Ctrl-C): child processes die with their parent, one writer per
folder, damaged runs redone, a fingerprint over every input, one experiment per folder, output folders checked
before any work, MPI rules checked before any run and run failures printed with their reason."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gradcode
import gradcode.clusters.sim
import gradcode.plumbing.fingerprint
from gradcode.errors import ConfigError
from gradcode.study.harness import COMPLETE, HarnessError, compare, load_experiment

ROOT = Path(__file__).resolve().parents[1]
NO_MPI = (False, "MPI disabled in this test")
MPI_OK = (True, "`gradcode run`")
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

SPEC = {
    "experiment": {"name": "safety"},
    "cluster": {"workers": 3, "kind": "sim"},
    "workload": {"name": "least_squares", "n_samples": 60, "dim": 4},
    "delay": {"name": "shifted_exponential", "a": 1.0, "mu": 1.0},
    "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 2}],
    "run": {"iterations": 5, "seeds": [0, 1]},
}
MPI_RUN = {"time_scale": 0.01, "grace": 2.0}


def spec(**run) -> dict:
    out = copy.deepcopy(SPEC)
    out["run"].update(run)
    return out


def _rows(out: Path) -> list[dict]:
    return json.loads((out / "summary.json").read_text())


def _cli(*args, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradcode", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=timeout, **kwargs)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")   # a zombie is dead


def _wait_dead(pids, seconds: float = 10.0) -> list[int]:
    end = time.monotonic() + seconds
    while time.monotonic() < end and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _processes(tag: str) -> list[int]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines() if tag in line and "ps -eo" not in line]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("safety") / "ref"
    compare(spec(), out, progress=False, figures=False, mpi=NO_MPI)
    return out


# --- item 5: children die with their parent; one writer per folder; damaged runs redone ----------------------
PARENT = """
import sys, time
from gradcode.plumbing.children import start_child
child = start_child([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_child_dies_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=ENV)
    child = int(parent.stdout.readline())
    assert _alive(child)
    assert os.getpgid(child) == child          # its own process group: a terminal's Ctrl-C reaches the parent only
    parent.kill()
    parent.wait()
    assert _wait_dead([child], 5) == []


def test_a_second_writer_gets_the_pid_of_the_first(tmp_path):
    from gradcode.plumbing.outdir import FolderBusy, FolderLock

    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from gradcode.plumbing.outdir import FolderLock\n"
                               f"FolderLock({str(folder)!r}).acquire(); print('locked', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(FolderBusy, match=rf"{folder}.*pid {holder.pid}"):
            FolderLock(folder).acquire()
    finally:
        holder.kill()
        holder.wait()
    with FolderLock(folder):                   # the holder died: the lock died with it
        pass


def test_a_child_handed_the_lock_adopts_it(tmp_path):
    from gradcode.plumbing.outdir import FolderLock

    folder = tmp_path / "run"
    with FolderLock(folder) as lock:
        code = ("from gradcode.plumbing.outdir import FolderLock\n"
                f"assert FolderLock({str(folder)!r}).acquire().adopted\n")
        proc = subprocess.run([sys.executable, "-c", code], env=lock.child_env(ENV), pass_fds=(lock.fd,))
        assert proc.returncode == 0
        other = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True)
        assert other.returncode != 0 and "FolderBusy" in other.stderr


def test_compare_refuses_a_folder_being_written(reference, tmp_path):
    from gradcode.plumbing.outdir import FolderBusy, FolderLock

    out = tmp_path / "busy"
    shutil.copytree(reference, out)
    victim = sorted((out / "runs").iterdir())[0]
    (victim / COMPLETE).unlink()
    with FolderLock(victim), pytest.raises(FolderBusy, match=f"pid {os.getpid()}"):
        compare(spec(), out, progress=False, figures=False, mpi=NO_MPI)
    with FolderLock(out), pytest.raises(FolderBusy, match=str(out)):
        compare(spec(), out, progress=False, figures=False, mpi=NO_MPI)


@pytest.mark.parametrize("damage", ["garbage line", "count", "unreadable marker"])
def test_a_damaged_run_is_reported_with_its_reason_and_redone(reference, tmp_path, damage):
    from gradcode.output.report import build_report

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
    compare(spec(), out, progress=False, figures=False, mpi=NO_MPI)
    assert (out / "summary.csv").read_bytes() == (reference / "summary.csv").read_bytes()
    assert "PARTIAL" not in (out / "report.md").read_text()


# --- item 6: the fingerprint covers every input --------------------------------------------------------------
def _trace_spec(path: Path) -> dict:
    out = spec()
    out["delay"] = {"name": "trace", "trace": str(path), "normalize": False}
    return out


def test_a_changed_trace_file_is_rerun(tmp_path):
    trace = tmp_path / "t.csv"
    shutil.copy(ROOT / "gradcode" / "data" / "traces" / "bytedance-ST.csv", trace)
    out = tmp_path / "out"
    compare(_trace_spec(trace), out, progress=False, figures=False, mpi=NO_MPI)
    before = [r["mean_iteration_time"] for r in _rows(out)]
    head, *body = trace.read_text().splitlines()
    scaled = [",".join(line.split(",")[:4] + [repr(10 * float(line.split(",")[4]))]) for line in body]
    trace.write_text("\n".join([head, *scaled]) + "\n")
    compare(_trace_spec(trace), out, progress=False, figures=False, mpi=NO_MPI)
    after = [r["mean_iteration_time"] for r in _rows(out)]
    assert after == pytest.approx([10 * x for x in before])


PLUGIN = """from gradcode.delays.parametric import ConstantDelay


class Slow(ConstantDelay):
    def __init__(self, value=1.0, **kw):
        super().__init__(value={factor} * value, **kw)
"""


def test_a_changed_plugin_module_is_rerun_and_unchanged_inputs_are_not(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "slowplug.py").write_text(PLUGIN.format(factor=1))
    user = spec()
    user["delay"] = {"name": "slowplug:Slow", "value": 1.0}
    out = tmp_path / "out"
    compare(user, out, progress=False, figures=False, mpi=NO_MPI)
    assert {r["mean_iteration_time"] for r in _rows(out)} == {1.0}
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/records.jsonl")}
    compare(user, out, progress=False, figures=False, mpi=NO_MPI)                 # nothing changed: nothing redone
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    plugin = tmp_path / "slowplug.py"
    plugin.write_text(PLUGIN.format(factor=3))
    # the edit as a user makes it, seconds later: Python's bytecode cache keys a module on its size and its mtime in
    # whole seconds, so an edit of the same size within the second of the first import would load the old code
    # (where bytecode is written: PYTHONDONTWRITEBYTECODE unset, as on a user's machine)
    later = plugin.stat().st_mtime + 2
    os.utime(plugin, (later, later))
    for name in [m for m in sys.modules if m == "slowplug"]:
        del sys.modules[name]
    from gradcode.plumbing.registry import DELAYS

    DELAYS._cache.pop("slowplug:Slow", None)
    compare(user, out, progress=False, figures=False, mpi=NO_MPI)
    assert {r["mean_iteration_time"] for r in _rows(out)} == {3.0}


def test_the_fingerprint_covers_the_package_version(monkeypatch):
    before = load_experiment(spec(), mpi=NO_MPI).runs[0].digest()
    monkeypatch.setattr(gradcode.plumbing.fingerprint, "VERSION", "99.0")   # gradcode.__version__ is this string
    assert load_experiment(spec(), mpi=NO_MPI).runs[0].digest() != before


# --- item 7: one experiment per folder -----------------------------------------------------------------------
def test_an_interrupted_new_experiment_is_never_mixed_with_the_old(reference, tmp_path, monkeypatch):
    from gradcode.output.report import build_report

    out = tmp_path / "mixed"
    shutil.copytree(reference, out)
    new = spec(iterations=3)
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
    rows = _rows(out)
    assert [r["iterations"] for r in rows] == [3]      # only the new experiment's one finished run


def test_compare_replace_on_the_command_line(reference, tmp_path):
    out = tmp_path / "cli"
    shutil.copytree(reference, out)
    path = tmp_path / "other.toml"
    import tomli_w

    path.write_text(tomli_w.dumps(spec(iterations=3)))
    proc = _cli("compare", path, "--out", out)
    assert proc.returncode == 2 and "holds another experiment" in proc.stderr and "--replace" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = _cli("compare", path, "--out", out, "--replace")
    assert proc.returncode == 0, proc.stderr
    assert {r["iterations"] for r in _rows(out)} == {3}
    assert "--replace" in _cli("compare", "--help").stdout


# --- item 8: output folders checked before any work ----------------------------------------------------------
@pytest.mark.parametrize("command", ["compare", "simulate", "run"])
@pytest.mark.parametrize("where", ["file", "under a file", "unwritable"])
def test_a_bad_out_is_an_error_before_any_work(tmp_path, command, where):
    import tomli_w

    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    out = {"file": a_file, "under a file": a_file / "sub", "unwritable": Path("/proc/gradcode_out")}[where]
    big = {k: v for k, v in spec().items() if k != "schemes"} | {"scheme": {"name": "sync"}}
    big["run"] = {"iterations": 100000, "seed": 0, **MPI_RUN}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(big))
    start = time.monotonic()
    proc = _cli(command, path, "--out", out, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "--out" in proc.stderr and str(out) in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - start < 30 and "mpiexec" not in proc.stdout


def test_report_into_an_unwritable_folder_is_an_error(reference, tmp_path, monkeypatch):
    import tempfile

    from gradcode.output.report import build_report

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    with pytest.raises(ConfigError, match="cannot be written: Permission denied"):
        build_report(reference)


# --- item 11: MPI rules up front, failures with their reason -------------------------------------------------
@pytest.mark.parametrize("change, key, mpi_only", [
    ({"workload": None}, "[workload]", True),
    ({"run": {"time_scale": -1}}, "time_scale", False),   # a bad number is refused for every cluster
    ({"run": {"grace": 0}}, "grace", False),
])
@pytest.mark.parametrize("kind", ["mpi", "both"])
def test_mpi_rules_are_checked_before_any_run(tmp_path, change, key, mpi_only, kind):
    bad = spec(**MPI_RUN)
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


def test_failed_mpi_runs_are_printed_with_their_reason(tmp_path, monkeypatch):
    failing = spec(iterations=4, seeds=[0], **MPI_RUN)
    failing["cluster"]["kind"] = "mpi"
    failing["schemes"] = [{"name": "sync"}]
    monkeypatch.setenv("GRADCODE_TEST_CRASH", "1:0")   # before any record
    # the reason is the error rank 0's summary names (the rank, what it raised, the host)
    with pytest.raises(HarnessError, match=r"(?s)every run failed.*rank 1 \(worker 0\) failed: crashed "
                                           r"\(InjectedCrash\).*on host") as err:
        compare(failing, tmp_path / "out", progress=False, figures=False, mpi=MPI_OK)
    assert "no run has any records" not in str(err.value)


def test_kill_9_of_compare_leaves_no_process_and_resumes_whole(tmp_path):
    import tomli_w

    mpi = spec(iterations=30, seeds=[0], time_scale=0.05, grace=2.0)
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
    tree = _processes(str(out))
    assert len(tree) >= 5                        # gradcode run, mpiexec, 4 ranks (3 workers + master)
    proc.kill()
    proc.wait()
    assert _wait_dead(tree, 10) == [], _processes(str(out))
    done = _cli("compare", path, "--out", out, timeout=120)   # at once: nothing left to race with
    assert done.returncode == 0, done.stderr
    assert [r["status"] for r in _rows(out)] == ["complete"]
    assert len(records[0].read_text().splitlines()) == 30


def _argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


@pytest.mark.parametrize("victim", ["proxy", "wrapper"])
def test_ranks_end_when_their_launcher_dies(tmp_path, victim):
    """kill -9 of MPICH's proxy (the ranks' launcher) or of one rank's wrapper shell (launch.SURVIVE_DEATH): no
    rank runs on as an orphan, and nothing is left holding the run folder."""
    import tomli_w

    run = spec(iterations=400, seeds=[0], time_scale=0.05, grace=2.0)
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
        ranks = [p for p in _processes(str(out)) if "mpi_runtime" in _argv(p) and "python" in _argv(p)[0]]
        assert len(ranks) == 4
        shell = int(Path(f"/proc/{ranks[1]}/stat").read_text().split()[3])    # the rank's parent: its wrapper
        proxy = int(Path(f"/proc/{shell}/stat").read_text().split()[3])
        os.kill(proxy if victim == "proxy" else shell, signal.SIGKILL)
        assert _wait_dead(ranks, 15) == [], _processes(str(out))
        proc.wait(timeout=30)       # and the launcher ends (no process holds the job open)
    finally:
        proc.kill()


# --- Ctrl-C ---------------------------------------------------------------------------------------------------
def _interrupt(args: list, out: Path, *, group: bool) -> subprocess.CompletedProcess:
    # SIG_DFL: a test run in the background would otherwise hand down an ignored SIGINT
    proc = subprocess.Popen([sys.executable, "-m", "gradcode", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    end = time.monotonic() + 60
    while time.monotonic() < end and not [p for p in out.glob("**/records.jsonl") if p.stat().st_size > 0]:
        time.sleep(0.2)
    time.sleep(0.5)
    # as a terminal does: SIGINT to the whole foreground process group
    os.killpg(proc.pid, signal.SIGINT) if group else proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.parametrize("command, cluster", [("compare", "sim"), ("compare", "mpi"), ("simulate", "sim")])
def test_ctrl_c_is_one_line_exit_130_and_keeps_records(tmp_path, command, cluster):
    import tomli_w

    long = spec(iterations=20000 if cluster == "sim" else 400, **MPI_RUN)
    long["cluster"]["kind"] = cluster
    long["schemes"] = [{"name": "sync"}]
    del long["run"]["seeds"]
    path = tmp_path / "long.toml"
    path.write_text(tomli_w.dumps(long))
    out = tmp_path / "out"
    proc = _interrupt([command, path, "--out", out], out, group=True)
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1] == f"gradcode {command}: interrupted"
    run = next((out / "runs").iterdir()) if command == "compare" else out
    assert len((run / "records.jsonl").read_text().splitlines()) > 0 and not (run / COMPLETE).exists()
    assert _wait_dead(_processes(str(out)), 10) == []


def test_ctrl_c_of_a_sweep_with_jobs_is_one_line_exit_130(tmp_path):
    # Before: every pool worker printed its own KeyboardInterrupt traceback.
    import tomli_w

    long = spec(iterations=20000)
    long["schemes"] = [{"name": "sync"}]
    del long["run"]["seeds"]
    long["sweep"] = {"run.seed": [0, 1]}
    path = tmp_path / "sweep.toml"
    path.write_text(tomli_w.dumps(long))
    out = tmp_path / "out"
    proc = _interrupt(["sweep", path, "--out", out, "--jobs", "2"], out, group=True)
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.rstrip().splitlines()[-1] == "gradcode sweep: interrupted"
    assert _wait_dead(_processes(str(out)), 10) == []


def test_ctrl_c_while_the_libraries_load_is_one_line_exit_130():
    """A real SIGINT at the moment numpy starts to load, in a process that starts as the `gradcode` script does
    (``from gradcode.cli import main``): the imports happen inside main(), so one line and 130, no traceback."""
    code = ("import builtins, os, signal, sys\n"
            "real = builtins.__import__\n"
            "def hooked(name, *args, **kwargs):\n"
            "    if name == 'numpy' and not hooked.fired:\n"
            "        hooked.fired = True\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "    return real(name, *args, **kwargs)\n"
            "hooked.fired = False\n"
            "builtins.__import__ = hooked\n"
            "from gradcode.cli import main\n"
            "sys.exit(main(['list']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and proc.stderr.strip() == "gradcode list: interrupted"


def test_a_done_marker_is_whole_or_absent(tmp_path, monkeypatch):
    """Completion markers are written whole or not at all (``outdir.write_whole``): a writer killed mid-write must
    not leave a truncated marker (the sweep's resume once redid a cell whose marker another process had seen)."""
    from gradcode.plumbing import outdir

    marker = tmp_path / "CELL_COMPLETE"
    outdir.write_whole(marker, '{"fingerprint": "a"}\n')
    assert marker.read_text() == '{"fingerprint": "a"}\n' and not list(tmp_path.glob("*.tmp"))

    def killed(src, dst):          # the process dies after writing the text, before the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(outdir.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        outdir.write_whole(marker, '{"fingerprint": "b"}\n')
    with pytest.raises(KeyboardInterrupt):
        outdir.write_whole(tmp_path / "COMPLETE", "{}\n")
    assert marker.read_text() == '{"fingerprint": "a"}\n'     # the old marker, whole
    assert not (tmp_path / "COMPLETE").exists()                 # no marker, not an empty one
