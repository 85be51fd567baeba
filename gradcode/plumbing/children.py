"""Child processes that die with their parent (``gradcode compare`` -> ``gradcode run`` -> ``mpiexec`` -> ranks).

A parent killed with ``SIGKILL`` cannot clean up, so the child side must notice: every child is started in its own
process group (a terminal's Ctrl-C reaches only the parent, which then stops the whole group itself, see
:func:`run_child`) and with a parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG)``): when its parent dies, the
kernel sends it ``SIGTERM``. Down the chain, MPICH's proxies end their ranks when ``mpiexec`` dies, and every rank
asks for the same signal when its proxy dies (:func:`die_with_parent`), so no process of a run outlives the command
that started it and no orphan keeps writing into a run folder that a resume is rewriting.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import subprocess
import sys
import threading
import time
from functools import partial

PR_SET_PDEATHSIG = 1           # from <linux/prctl.h>
STOP_WAIT = 5.0                # seconds a stopped child gets between SIGTERM and SIGKILL

_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux; ``False`` elsewhere).

    ``parent`` is the pid the parent had: if it is already gone (it died before the request was made), the signal
    is sent now, so there is no window in which the parent's death goes unnoticed.
    """
    if _LIBC is None or _LIBC.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)
    return True


def start_child(cmd: list[str], **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(cmd)`` in its own process group, with a parent-death signal."""
    # preexec_fn runs in the child between fork and exec: only async-signal-safe work (ctypes was loaded before)
    died = partial(die_with_parent, signal.SIGTERM, os.getpid())
    return subprocess.Popen(cmd, start_new_session=True, preexec_fn=died, **kwargs)


def stop_child(proc: subprocess.Popen, wait: float = STOP_WAIT) -> None:
    """End ``proc`` and its process group: ``SIGTERM``, then ``SIGKILL`` after ``wait`` seconds."""
    for sig, timeout in ((signal.SIGTERM, wait), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout)
            return
        except subprocess.TimeoutExpired:
            continue


class _Terminated(BaseException):
    """``SIGTERM`` received while waiting for a child (turned into an exception so the child is stopped too)."""


class NotStarted(RuntimeError):
    """The child did not say it had started (``run_child(started=...)``) in time; it was stopped."""


class NotEnded(RuntimeError):
    """The child said it had finished (``run_child(finished=...)``) but did not end in time; it was stopped."""


def run_child(cmd: list[str], *, timeout: float | None = None, started: tuple[str, float] | None = None,
              finished: tuple[str, float] | None = None, **kwargs) -> int:
    """Run ``cmd`` with :func:`start_child` and wait for it; its exit code.

    Whatever ends the wait (``timeout``: :class:`subprocess.TimeoutExpired`; Ctrl-C: ``KeyboardInterrupt``; a
    ``SIGTERM`` to this process, re-raised as ``SystemExit(143)``) stops the child's whole process group first.
    ``started = (marker, seconds)``: the child's standard output is relayed to ours line by line, and if no line
    holds ``marker`` within ``seconds`` (the child hangs while starting up) it is stopped and :class:`NotStarted`
    raised. ``finished = (marker, seconds)`` (with ``started``): once a line holds ``marker`` the child has
    ``seconds`` to end, else it is stopped and :class:`NotEnded` raised.
    """
    if started is not None:
        kwargs["stdout"] = subprocess.PIPE
    end = None if timeout is None else time.monotonic() + timeout
    proc = start_child(cmd, **kwargs)
    relay = None if started is None else _Relay(proc.stdout, started[0], finished and finished[0])
    previous = _on_sigterm()
    try:
        if relay is not None and not relay.wait_marker(proc, started[1]):
            stop_child(proc)
            raise NotStarted(f"no sign of start-up within {started[1]:g} s")
        code = _wait(proc, end, relay, None if finished is None else finished[1])
        if relay is not None:
            relay.join()
        return code
    except _Terminated:
        stop_child(proc)
        raise SystemExit(128 + signal.SIGTERM) from None
    except NotStarted:
        raise
    except BaseException:
        stop_child(proc)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _wait(proc: subprocess.Popen, end: float | None, relay, linger: float | None) -> int:
    """The child's exit code, waited for until ``end`` (``subprocess.TimeoutExpired`` then), and at most ``linger``
    seconds after the relay saw its ``finished`` marker (:class:`NotEnded` then)."""
    while True:
        step = 0.2 if linger is not None else None
        if end is not None:
            step = max(0.0, min(step if step is not None else math.inf, end - time.monotonic()))
        try:
            return proc.wait(step)
        except subprocess.TimeoutExpired:
            if end is not None and time.monotonic() >= end:
                raise
        if relay.ended_at is not None and time.monotonic() - relay.ended_at > linger:
            raise NotEnded(f"still running {linger:g} s after it said it had finished")


class _Relay:
    """Copies a child's output to ours as it comes (a thread) and notes when a line holds ``marker`` (and when one
    holds ``finished``, if given: ``ended_at``, a ``time.monotonic`` reading)."""

    def __init__(self, pipe, marker: str, finished: str | None = None):
        self.marker = marker.encode()
        self.finished = finished.encode() if finished else None
        self.ended_at: float | None = None
        self.seen = threading.Event()
        self.thread = threading.Thread(target=self._copy, args=(pipe,), name="relay", daemon=True)
        self.thread.start()

    def _copy(self, pipe) -> None:
        out = getattr(sys.stdout, "buffer", None)    # a replaced sys.stdout (pytest's capture) may take text only
        for line in iter(pipe.readline, b""):
            if out is None:
                sys.stdout.write(line.decode(errors="replace"))
            else:
                out.write(line)
            sys.stdout.flush()
            if self.marker in line:
                self.seen.set()
            if self.finished is not None and self.finished in line and self.ended_at is None:
                self.ended_at = time.monotonic()

    def wait_marker(self, proc: subprocess.Popen, seconds: float) -> bool:
        """True once the marker was seen or the child ended (its exit code tells the rest); False at the limit."""
        end = time.monotonic() + seconds
        while not self.seen.wait(0.2):
            if proc.poll() is not None:
                return True
            if time.monotonic() > end:
                return False
        return True

    def join(self) -> None:
        self.thread.join(timeout=5.0)    # the rest of the output; a grandchild holding the pipe cannot block us


def _on_sigterm():
    """Turn ``SIGTERM`` into :class:`_Terminated` while a child runs (main thread only); the previous handler."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise _Terminated

    return signal.signal(signal.SIGTERM, handler)


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, parent pid, ...); None if it cannot be read
    (gone, or not Linux). The name is skipped by its last ``)``: it may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid`` (Linux; ``None`` if it is gone or unknown)."""
    fields = proc_stat(pid)
    return None if fields is None else int(fields[1])


def die_with_grandparent(sig: int = signal.SIGTERM, interval: float = 1.0) -> bool:
    """Send ``sig`` to this process when its parent loses its own parent (Linux; ``False`` elsewhere).

    An MPI rank runs under a small shell (``mpi_runtime.launch.SURVIVE_DEATH``) under MPICH's proxy: the kernel's
    parent-death signal (:func:`die_with_parent`) covers the shell, this covers the proxy. A daemon thread looks
    once per ``interval`` seconds whether the shell's parent is still the one it started with.
    """
    parent = os.getppid()
    grandparent = parent_of(parent)
    if grandparent is None:
        return False

    def watch() -> None:
        while parent_of(parent) == grandparent:
            time.sleep(interval)
        os.kill(os.getpid(), sig)

    threading.Thread(target=watch, name="die-with-grandparent", daemon=True).start()
    return True
