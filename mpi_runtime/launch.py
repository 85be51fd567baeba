"""Build and run the ``mpiexec`` command of an MPI run (``gradcode run``); never imports mpi4py.

The job is ``mpiexec -n n+1 python -m mpi4py -m mpi_runtime SPEC --out DIR``. ``python -m mpi4py`` makes an
uncaught exception on any rank abort the whole job instead of hanging it.

Which MPI? ``mpiexec --version`` says: MPICH's Hydra prints ``HYDRA``, Open MPI prints ``Open MPI`` (or ``OpenRTE``
/ ``PRRTE`` in recent versions). The launcher found first is the virtual environment's own (``pip install mpi4py
mpich`` puts one next to ``python``), then ``$MPIEXEC``, then ``mpiexec`` on ``PATH``. mpi4py must be built against
the same MPI as the launcher.

Oversubscription (more ranks than cores, e.g. 9 ranks on a 2-core laptop):

- **MPICH** needs no flag for it, but busy-polls: ``MPIR_CVAR_CH4_PROGRESS_THROTTLE=1`` and
  ``MPIR_CVAR_POLLS_BEFORE_YIELD=1`` make waiting ranks yield the CPU. Never pass ``--oversubscribe`` to MPICH
  (Hydra mis-parses it and the job hangs).
- **Open MPI** refuses more ranks than slots unless given ``--oversubscribe``; ``OMPI_MCA_mpi_yield_when_idle=1``
  makes idle ranks yield.

**A dead rank**: a shell around each rank (:data:`SURVIVE_DEATH`, under every launcher) prints which rank died on a
signal (``gradcode: rank 2 (process 1234) ended on signal 9``). With MPICH, ``-disable-auto-cleanup`` and that
shell also keep Hydra from killing the job the moment one process dies, so that the others can name it and rank 0
can write its summary (``peers.py``); ``MPI_Abort`` still ends every rank. Open MPI's ``mpirun`` ends the whole job
as soon as a rank dies or exits without ``MPI_Finalize``: the shell's line names the rank, but the survivors may be
gone before rank 0 writes ``summary.json``. When it loses a host's daemon it ends the job and may still exit 0:
``gradcode run`` turns a job that exited 0 without rank 0's summary into exit 1 and writes that summary itself.

Both get ``OPENBLAS_NUM_THREADS=1`` (and the OMP/MKL equivalents) so that ranks sharing cores do not also spawn a
BLAS thread per core each.

**Several hosts.** Give a hostfile: ``gradcode run SPEC --out DIR --hostfile hosts`` adds ``-f hosts`` (MPICH) or
``--hostfile hosts`` (Open MPI). Every host needs the same Python environment at the same path (or a shared
file system), the spec file and any user module the spec names by import path; only rank 0 writes ``DIR``. The
command is printed before it runs, so it can be copied into a batch script; with a system MPI, build mpi4py against
it (``pip install --no-binary mpi4py mpi4py``) and do not install the ``mpich`` wheel.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from gradcode.clusters.footprint import check_mpi_memory
from gradcode.clusters.records import write_summary
from gradcode.deaths import name_dead
from gradcode.errors import ConfigError
from gradcode.plumbing.children import NotEnded, NotStarted, run_child
from gradcode.plumbing.outdir import FolderLock, writable_folder
from gradcode.plumbing.registry import pythonpath

from .config import FINISHED, STARTED, load_run
from .faults import check_hooks

ROOT = Path(__file__).resolve().parent.parent   # the folder that holds mpi_runtime/ (and gradcode/)
# A rank that dies must not take the job down with it: the survivors name it, rank 0 writes its summary, then
# MPI_Abort ends the job (peers.py). Hydra kills the whole job when a process ends on a signal (SIGKILL, SIGSEGV,
# an OOM kill), even with -disable-auto-cleanup; this shell around each rank turns that into an exit code. It
# forwards the signals Hydra sends its processes (SIGUSR1 tells MPICH that a peer is gone; SIGTERM) to the rank.
# The rank itself watches that this shell keeps its parent (__main__.py): a killed proxy must not leave ranks running.
# A trapped signal ends ``wait`` early with 128 + its number (138 for SIGUSR1) -- and Hydra sends SIGUSR1 to every
# rank each time a peer exits, so at the end of every run. That status is not the rank's: once the rank is gone,
# a second ``wait`` returns its own exit status (the shell keeps it; an unknown pid would give 127).
# The shell also names its rank when the rank dies on a crash signal (SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGKILL,
# SIGSEGV: exit status 128 + the signal), from the rank number any launcher gives its processes (MPICH's PMI_RANK,
# Open MPI's OMPI_COMM_WORLD_RANK, PMIx's PMIX_RANK): under every launcher, the error then says which rank it was,
# even where the launcher ends the job before the survivors can (Open MPI).
SURVIVE_DEATH = ["sh", "-c", '"$@" & c=$!; trap "kill -USR1 $c 2>/dev/null" USR1; trap "kill -TERM $c 2>/dev/null" '
                 'TERM; while :; do wait $c; s=$?; kill -0 $c 2>/dev/null && continue; wait $c; t=$?; '
                 '[ $t -eq 127 ] && t=$s; case $t in 132|134|135|136|137|139) echo "gradcode: rank '
                 '${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-?}}} (process $c) ended on signal $((t - 128))" '
                 '>&2;; esac; exit $t; done', "sh"]

# On several hosts the shell around each rank is rankshell.py instead: it also drops its copy of the rank's PMI socket
# and lingers a second after the rank, so that no host's proxy exits while mpiexec may still signal it (MPICH's
# mpiexec then died of SIGPIPE: `gradcode run` exited 243 in 3 of 40 runs across 3 emulated hosts).
RANK_SHELL = Path(__file__).resolve().with_name("rankshell.py")


def find_mpiexec(explicit: str | None = None) -> str:
    """The launcher: ``explicit``, the virtual environment's, ``$MPIEXEC``, or ``mpiexec`` on PATH. A launcher the
    user named (``explicit`` or ``$MPIEXEC``, when it is the one reached) that is not an executable file is an
    error, never replaced by another one."""
    if explicit is not None:
        return _executable(explicit, "--mpiexec")
    own = Path(sys.executable).parent / "mpiexec"
    if own.is_file() and os.access(own, os.X_OK):
        return str(own)
    if os.environ.get("MPIEXEC"):
        return _executable(os.environ["MPIEXEC"], "$MPIEXEC")
    for c in (shutil.which("mpiexec"), shutil.which("mpirun")):
        if c:
            return c
    raise ConfigError("no mpiexec found: install one with `pip install mpi4py mpich` (or a system MPI and set "
                      "$MPIEXEC)")


def _executable(name: str, what: str) -> str:
    """``name`` if it is an executable file (a path, or a command on PATH); else a :class:`ConfigError`."""
    path = Path(name) if os.sep in name else (Path(shutil.which(name)) if shutil.which(name) else None)
    if path is None or not path.exists():
        where = "no such file" if os.sep in name else "no such command on PATH"
        raise ConfigError(f"{what} {name}: {where}; give the path of an MPI launcher (mpiexec)")
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ConfigError(f"{what} {name}: not an executable file; give the path of an MPI launcher (mpiexec)")
    return name


SHOWN_ENV = ("MPIR_", "OMPI_", "PRTE_", "HYDRA_", "OPENBLAS", "PYTHONPATH")   # in the printed command line


def check_hostfile(hostfile: str | None) -> None:
    """:class:`ConfigError` unless ``hostfile`` (if given) is a readable file: MPICH would only say that it is
    "unable to parse user arguments"."""
    if hostfile is None:
        return
    path = Path(hostfile)
    if not path.is_file():
        raise ConfigError(f"--hostfile {hostfile}: {'not a file' if path.exists() else 'no such file'}")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"--hostfile {hostfile}: not readable")


def mpi_flavor(mpiexec: str) -> str:
    """``'mpich'``, ``'openmpi'`` or ``'unknown'``, from ``mpiexec --version``."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "unknown"
    except OSError as err:     # not a program at all (e.g. a text file with the executable bit)
        raise ConfigError(f"{mpiexec}: cannot run it ({err.strerror}); give the path of an MPI launcher") from None
    text = (out.stdout + out.stderr).lower()
    if "open mpi" in text or "openrte" in text or "prrte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text or "intel(r) mpi" in text:
        return "mpich"
    return "unknown"


def environment(flavor: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the job: oversubscription-friendly MPI settings, one BLAS thread per rank, and the
    project on ``PYTHONPATH`` so every rank imports the same ``mpi_runtime`` and ``gradcode``, followed by the
    folders of user modules that the spec names by import path (its own folder and the working directory,
    :func:`gradcode.plumbing.registry.add_user_dirs`)."""
    env = dict(os.environ if base is None else base)
    for key in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(key, "1")
    if flavor == "mpich":
        env.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "1")
        env.setdefault("MPIR_CVAR_POLLS_BEFORE_YIELD", "1")
    elif flavor == "openmpi":
        env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    env["PYTHONPATH"] = pythonpath(os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def command(spec: str | Path, out: str | Path, ranks: int, *, mpiexec: str, flavor: str,
            hostfile: str | None = None, python: str | None = None, extra: list[str] | None = None) -> list[str]:
    """The full ``mpiexec ... python -m mpi4py -m mpi_runtime SPEC --out DIR`` command line."""
    cmd = [mpiexec, "-n", str(ranks)]
    if flavor == "openmpi":
        # with a hostfile its slots say where ranks go (with --oversubscribe Open MPI 5 piled them on the first host),
        # and a host with more slots than cores is no error (Open MPI binds a rank to a core by default)
        cmd += ["--oversubscribe"] if hostfile is None else ["--bind-to", "none"]
    if flavor == "mpich":
        cmd.append("-disable-auto-cleanup")
    if hostfile is not None:
        cmd += (["--hostfile", hostfile] if flavor == "openmpi" else ["-f", hostfile])
    if hostfile is None:
        cmd += SURVIVE_DEATH      # every launcher: the shell names a rank that dies on a signal (see SURVIVE_DEATH)
    else:                         # several hosts: the same, and a clean end across them (rankshell.py)
        cmd += [python or sys.executable, str(RANK_SHELL)]
    cmd += [python or sys.executable, "-m", "mpi4py", "-m", "mpi_runtime", str(spec), "--out", str(out)]
    return cmd + list(extra or [])


def prepare(spec: str | Path, out: str | Path, ranks: int, *, mpiexec: str | None = None,
            hostfile: str | None = None, extra: list[str] | None = None) -> tuple[list[str], dict[str, str], str]:
    """``(command, environment, flavor)`` of a job: the launcher found, its flavour, the command line for it."""
    check_hostfile(hostfile)
    exe = find_mpiexec(mpiexec)
    flavor = mpi_flavor(exe)
    cmd = command(spec, out, ranks, mpiexec=exe, flavor=flavor, hostfile=hostfile, extra=extra)
    return cmd, environment(flavor), flavor


def check_partitions(scheme, workload) -> None:
    """The scheme's partitions of the data (``anytime``: ``n x max_samples``; DropCompute: ``n x M``) must not
    outnumber the workload's samples: a :class:`ConfigError` here, before the launch, not from every rank."""
    if workload is None:
        return
    n_parts = scheme.plan(0).n_parts
    try:
        workload.partition_bounds(n_parts)
    except ConfigError as err:
        raise ConfigError(f"scheme {scheme.name} plans {n_parts} data partitions: {err}") from None


def launch(spec: str | Path, out: str | Path, *, scheme: int = 0, iterations: int | None = None,
           seed: int | None = None, hostfile: str | None = None, mpiexec: str | None = None,
           timeout: float | None = None, echo=print) -> int:
    """Validate the spec and ``out`` (a :class:`ConfigError` before anything starts), then run the job, holding the
    lock on ``out`` (:class:`gradcode.plumbing.outdir.FolderLock`; ``mpiexec`` holds it too, and dies with this process:
    :mod:`gradcode.plumbing.children`); its exit code."""
    if timeout is not None and not timeout > 0:
        raise ConfigError(f"--timeout {timeout:g}: must be a number of seconds > 0 (leave it out for no limit)")
    overrides = {k: v for k, v in (("iterations", iterations), ("seed", seed)) if v is not None}
    cfg = load_run(spec, scheme_index=scheme, overrides=overrides)
    check_hooks(cfg.workers + 1, cfg.options.iterations)      # the test hooks in the environment, before the job
    scheme_, _, workload = cfg.build()
    check_partitions(scheme_, workload)
    if hostfile is None:     # one host: all n + 1 ranks here (with a hostfile the estimate says nothing per host)
        check_mpi_memory(scheme_, workload, cfg.options.iterations)
    with FolderLock(writable_folder(out)) as lock:
        code = _launch(spec, out, cfg, lock, scheme=scheme, overrides=overrides, hostfile=hostfile,
                       mpiexec=mpiexec, timeout=timeout, echo=echo)
    for line in summary_lines(Path(out), code):
        echo(line)
    return code


RUN_FILES = ("records.jsonl", "summary.json", "params.npy", "hosts.json")    # what rank 0 writes into --out


def summary_lines(out: Path, code: int) -> list[str]:
    """What ``gradcode run`` prints when the job has ended, from ``out/summary.json`` (as ``gradcode simulate``
    prints its summary): the scheme and iterations, the mean iteration time, the overhead ratio, the final loss, the
    error if any, the exit status if not 0, and where the files are."""
    try:
        s = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return [f"gradcode run: the job ended with exit status {code} and wrote no {out / 'summary.json'}"]
    from gradcode.clusters.records import read_records
    from gradcode.clusters.run_view import read_hosts, scheme_text, slowest_lines

    records = read_records(out / "records.jsonl")[0]
    scale = s.get("time_scale") or 1.0
    lines = [f"gradcode run: {scheme_text(s, records)}, {s.get('iterations', 0)} iterations on MPI"]
    mean = s.get("mean_iteration_time")
    if isinstance(mean, (int, float)):
        lines.append(f"  mean iteration time  {mean:.4g} model units ({mean * scale * 1e3:.4g} ms)")
    ratio = s.get("overhead_ratio")
    lines.append("  overhead ratio       " + (f"{ratio:.4g} (measured / ideal time)" if isinstance(ratio, float)
                                              else f"none ({s.get('overhead_ratio_note', 'no ideal time')})"))
    loss = s.get("final_loss")
    if isinstance(loss, (int, float)):
        lines.append(f"  final loss           {loss:.6g}")
    for death in s.get("deaths") or []:
        lines.append(f"  dead                 {name_dead(death['worker'], death['at'], death)}")
    lines += slowest_lines(records, read_hosts(out))
    if s.get("error"):
        lines.append(f"  error                {s['error']}")
    if code != 0:
        lines.append(f"  exit status          {code}")
    files = [f for f in RUN_FILES if (out / f).exists()]
    lines.append(f"  wrote {out}/ ({', '.join(files)})")
    return lines


def _launch(spec, out, cfg, lock: FolderLock, *, scheme: int, overrides: dict, hostfile: str | None,
            mpiexec: str | None, timeout: float | None, echo) -> int:
    extra = ["--scheme", str(scheme)]
    for key, value in overrides.items():
        extra += [f"--{key}", str(value)]
    cmd, env, flavor = prepare(spec, out, cfg.workers + 1, mpiexec=mpiexec, hostfile=hostfile, extra=extra)
    shown = {k: env[k] for k in sorted(env) if k.startswith(SHOWN_ENV)}
    echo(f"# {flavor} launcher; to rerun by hand:")
    echo(" ".join(f"{k}={shlex.quote(v)}" for k, v in shown.items()) + " " + shlex.join(cmd))
    try:
        # an earlier run's files must not pass for this one's (nor be counted as its records if it never starts)
        for name in RUN_FILES:
            (Path(out) / name).unlink(missing_ok=True)
        code = run_child(cmd, env=lock.child_env(env), pass_fds=(lock.fd,), timeout=timeout,
                         started=(STARTED, startup_bound(cfg)), finished=(FINISHED, END_BOUND))
        if not (Path(out) / "summary.json").is_file():
            # rank 0 writes a summary on every path it lives to see, failures included: this job was ended from
            # outside. Never exit 0 then: Open MPI's launcher, when it loses a host's daemon, ends the job and
            # sometimes exits 0 (1 run in 8 under kill -9 of a remote prted).
            status = "exited 0" if code == 0 else f"ended with exit status {code}"
            _summary_from_outside(Path(out), cfg, f"{Path(cmd[0]).name} {status} before rank 0 wrote its summary: "
                                  "the job was ended from outside (a lost host or MPI daemon, or a signal?)", echo)
            code = code or 1
        diverged(Path(out), echo)
        if code < 0:    # the launcher itself died on a signal: say so, and exit as a shell would (128 + N)
            echo(f"# {Path(cmd[0]).name} ended on signal {-code} ({_signal_name(-code)})")
            code = 128 - code
        return code
    except (KeyboardInterrupt, SystemExit) as stop:      # Ctrl-C, or SIGTERM (children.run_child: SystemExit(143))
        if not (Path(out) / "summary.json").is_file():
            how = "Ctrl-C" if isinstance(stop, KeyboardInterrupt) else f"a signal (exit {stop.code})"
            _summary_from_outside(Path(out), cfg, f"gradcode run was stopped by {how} and stopped the job", echo)
        raise
    except subprocess.TimeoutExpired:
        _summary_from_outside(Path(out), cfg, f"the job did not finish within {timeout:g} s and was killed", echo)
        return 124
    except NotEnded:
        # rank 0 wrote its summary, then the job did not end: a rank or a launcher's proxy it cannot reach (a lost host
        # or link) holds it. The run's outcome is rank 0's.
        echo(f"# the job did not end within {END_BOUND:g} s of rank 0's summary (a lost host or link?): it was "
             "stopped; the run's outcome is rank 0's")
        return 1 if _summary_error(Path(out)) else 0
    except NotStarted:
        # every rank hung before its own bounded waits begin (inside MPI_Init or Python's start-up): only the
        # launcher can see it
        _summary_from_outside(Path(out), cfg, f"the ranks did not all start within {startup_bound(cfg):g} s (2 x "
                              f"[run] startup_timeout + {STARTUP_SLACK:g} s): a rank hung in Python's start-up or in "
                              "MPI_Init, or was killed while it started (an out-of-memory kill: a line `gradcode: rank "
                              "N ... ended on signal 9` above); the job was killed", echo)
        return 1


def _summary_from_outside(out: Path, cfg, error: str, echo) -> None:
    """Say ``error`` and write the summary rank 0 could not: the error and the iterations recorded (whose records
    stay). A summary rank 0 wrote is never replaced: ``error`` is added to it as ``launcher_error``."""
    try:
        with open(out / "records.jsonl") as fh:
            done = sum(1 for line in fh if line.strip())
    except OSError:
        done = 0
    error = f"{error}; {done} iterations recorded, kept in records.jsonl"
    echo(f"# {error}")
    try:
        written = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        written = None
    try:
        if isinstance(written, dict):      # rank 0's, complete: kept, the launcher's word added
            write_summary(out, {**written, "launcher_error": error})
        else:
            write_summary(out, {"iterations": done, **cfg.summary_fields([], error)})
    except OSError as err:     # the folder gone or full: say so, and let the failure that brought us here stand
        echo(f"# could not write {out / 'summary.json'}: {err.strerror or err}")


def diverged(out: Path, echo) -> None:
    """Say so when the run's summary says its loss diverged (``gradcode.clusters.records.divergence``)."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return
    if isinstance(summary, dict) and summary.get("diverged"):
        echo(f"# warning: {summary['divergence_note']}")
def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


STARTUP_SLACK = 10.0   # seconds on top of start-up itself: the launcher and the Python interpreters
# seconds a job has to end once rank 0 wrote its summary: its MPI_Abort's wait (__main__.ABORT_WAIT, 5 s) or the
# ranks' MPI_Finalize and the rank shells' linger, with room for a loaded machine
END_BOUND = 20.0


def _summary_error(out: Path) -> bool:
    """Does rank 0's summary hold an error (or is it unreadable)?"""
    try:
        return bool(json.loads((out / "summary.json").read_text()).get("error"))
    except (OSError, ValueError, AttributeError):
        return True


def startup_bound(cfg) -> float:
    """Seconds from launch until rank 0 must have said every rank started: each rank's own start (imports, MPI_Init,
    building: ``startup_timeout``), then rank 0's wait for the slowest (``startup_timeout`` again), plus slack."""
    return 2 * cfg.options.startup_timeout + STARTUP_SLACK
