"""The shell around every rank of a job on several hosts: ``python rankshell.py COMMAND...`` (``launch.py``).

It does what ``launch.SURVIVE_DEATH`` (the ``sh`` one-liner used on one host) does -- runs the rank, forwards the
signals Hydra sends its processes (``SIGUSR1``, ``SIGTERM``), turns a death on a signal into the exit status
``128 + N`` (so that MPICH's proxy does not kill the rank's neighbours) and names the rank, its process and its host
when it died on a crash signal -- and two things more, for MPICH's Hydra across hosts:

- **it drops its copy of the rank's PMI socket** (``PMI_FD``) at once, so the socket closes when the rank exits,
  not when this shell does. Under ``-disable-auto-cleanup`` every rank's PMI socket that closes makes its proxy tell
  ``mpiexec`` that the rank terminated, and ``mpiexec`` forwards a ``SIGUSR1`` to every *other* proxy
  (``pmiserv_cb.c``). When one host's ranks have all gone, its proxy exits; a rank on another host ending a moment
  later then makes ``mpiexec`` write to that closed proxy socket: ``mpiexec`` dies of ``SIGPIPE`` (``gradcode run``
  exited 243, i.e. -13, with no message) or, with ``SIGPIPE`` ignored, fails with "unable to send SIGUSR1
  downstream" (255). ``sh`` (dash) cannot close a descriptor above 9, and Hydra's ``PMI_FD`` is 11-16.
- **it lingers** ``GRADCODE_RANK_LINGER`` seconds (default 1.0) after its rank has ended, ignoring ``SIGUSR1``, so
  that this host's proxy is still there while the other hosts' ranks end and ``mpiexec`` signals it. The ranks end
  together (they meet at the "shutdown" checkpoint first), so the lingering only has to outlast their spread.

Standard library only and no package import: it starts before every rank and must be quick.
"""

from __future__ import annotations

import os
import signal
import sys
import time

CRASH_SIGNALS = {signal.SIGILL, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGKILL, signal.SIGSEGV}
LINGER_ENV = "GRADCODE_RANK_LINGER"
DEFAULT_LINGER = 1.0


def rank_name() -> str:
    for key in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if os.environ.get(key):
            return os.environ[key]
    return "?"


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python rankshell.py COMMAND [ARGS...]", file=sys.stderr)
        return 2
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        except OSError as err:
            print(f"gradcode: rank {rank_name()}: cannot run {argv[0]}: {err.strerror}", file=sys.stderr, flush=True)
        os._exit(127)
    pmi = os.environ.get("PMI_FD", "")
    if pmi.isdigit():
        try:
            os.close(int(pmi))
        except OSError:
            pass

    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, forward)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            status = 0
            break
    return _ended(pid, status)


def _ended(pid: int, status: int) -> int:
    """The command's exit code (``128 +`` a signal's number), once it has ended with ``status``, after the
    linger."""
    # from here on SIGUSR1 says nothing. SIG_IGN, not a Python handler: Python's own exit puts its handlers back to
    # SIG_DFL, and a SIGUSR1 then would kill this shell (seen: exit 138). When one arrived for the forwarding handler
    # just before, Python raises "Signal 10 ignored due to race condition" after the change: nothing to do.
    try:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    except OSError:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        code = 128 + sig
        if sig in CRASH_SIGNALS:
            print(f"gradcode: rank {rank_name()} (process {pid}) on host {os.uname().nodename} ended on signal "
                  f"{sig}", file=sys.stderr, flush=True)
    else:
        code = os.WEXITSTATUS(status)
    try:
        linger = float(os.environ.get(LINGER_ENV, DEFAULT_LINGER))
    except ValueError:
        linger = DEFAULT_LINGER
    time.sleep(max(0.0, linger))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
