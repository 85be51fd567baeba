"""Ctrl-C of the gradcode command: one line, exit status 130, records kept, no process left (compare, simulate,
a sweep with jobs, and while the libraries load).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ENV, MPI_RUN, experiment, processes, wait_dead

from gradcode.study.harness import COMPLETE


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


@pytest.mark.parametrize("command, cluster", [
    ("compare", "sim"),
    pytest.param("compare", "mpi", marks=[pytest.mark.mpi, pytest.mark.slow]),
    ("simulate", "sim"),
])
def test_ctrl_c_is_one_line_exit_130_and_keeps_records(tmp_path, command, cluster):
    import tomli_w

    long = experiment(iterations=20000 if cluster == "sim" else 400, **MPI_RUN)
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
    assert wait_dead(processes(str(out)), 10) == []


def test_ctrl_c_of_a_sweep_with_jobs_is_one_line_exit_130(tmp_path):
    # not a KeyboardInterrupt traceback from every pool worker
    import tomli_w

    long = experiment(iterations=20000)
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
    assert wait_dead(processes(str(out)), 10) == []


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
