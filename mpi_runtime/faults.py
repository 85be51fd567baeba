"""Test hooks that inject faults into an MPI run (read from the environment of every rank).

- ``GRADCODE_TEST_CRASH="RANK:WHEN[:HOW]"``: rank ``RANK`` (0 is the master, or the recording peer of a
  decentralized scheme) fails at ``WHEN``: an iteration number (a worker when it picks up that plan, the master
  when it starts that iteration; under DropCompute any rank at that step), ``start`` (after ``MPI_Init`` and the
  build, before the start-up checkpoint) or ``warmup`` (before the warm-up exchange). ``HOW`` is empty (raise an
  exception: the rank reports it and the job ends naming it), ``exit`` (end the process at once with
  ``os._exit(13)``, as a segfault or an OOM kill would: no Python clean-up), ``kill`` (``SIGKILL`` to itself: a
  death by signal, as an OOM kill is) or ``hang`` (stop answering for ever, as a stopped process would).
- ``GRADCODE_TEST_NAN="RANK:ITER[,RANK:ITER...]"``: that worker rank overwrites its message of that iteration with
  NaN before sending it (the master must treat it as an erasure).

Several entries are separated by commas. A hook that could not fire (a rank outside the job, an iteration the run
does not have, a NaN on rank 0, which sends no message) is a :class:`~gradcode.errors.ConfigError` before the run
(:func:`check_hooks`). An unresponsive worker needs no hook: use the ``unresponsive`` delay model (its emulated
delay is infinite, and the rank then behaves as a hung process: it never answers anything).
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np

from gradcode.errors import ConfigError

CRASH_ENV = "GRADCODE_TEST_CRASH"
NAN_ENV = "GRADCODE_TEST_NAN"
STAGES = ("start", "warmup")       # crash points before iteration 0
HOWS = ("", "exit", "kill", "hang")


class InjectedCrash(RuntimeError):
    """The crash the test hook asked for."""


def _entries(env: str, environ=None) -> list[tuple[int, int | str, str]]:
    text = (os.environ if environ is None else environ).get(env, "").strip()
    out = []
    accepted = ("RANK:ITER" if env == NAN_ENV
                else "RANK:WHEN or RANK:WHEN:HOW (WHEN an iteration, start or warmup; HOW exit or hang)")
    for item in filter(None, (s.strip() for s in text.split(","))):
        fields = item.split(":")
        ok = len(fields) == 2 or (len(fields) == 3 and env == CRASH_ENV and fields[2] in HOWS)
        try:
            rank = int(fields[0])
            when: int | str = fields[1] if env == CRASH_ENV and fields[1] in STAGES else int(fields[1])
        except (ValueError, IndexError):
            ok = False
        if not ok:
            raise ConfigError(f"{env}={text!r}: {item!r} is not {accepted}")
        out.append((rank, when, fields[2] if len(fields) == 3 else ""))
    return out


def check_hooks(ranks: int, iterations: int, environ=None) -> None:
    """:class:`ConfigError` unless every hook in the environment names a rank of the job (``0..ranks-1``; a NaN
    only a worker, ``1..ranks-1``) and an iteration the run has (``0..iterations-1``)."""
    for env, low in ((CRASH_ENV, 0), (NAN_ENV, 1)):
        for rank, when, _ in _entries(env, environ):
            if not low <= rank < ranks:
                what = "a worker rank" if low else "a rank"
                raise ConfigError(f"{env}: rank {rank} is not {what} of this job ({low}..{ranks - 1}: rank 0 is "
                                  "the master, rank i + 1 worker i)")
            if isinstance(when, int) and not 0 <= when < iterations:
                raise ConfigError(f"{env}: iteration {when} is not one of this run's (0..{iterations - 1})")


class Faults:
    """The hooks that apply to one rank, and its death if the spec plans one (``[faults]``, ``planned``: ``{worker:
    at}``, :func:`gradcode.deaths.planned_deaths`): worker ``i`` is killed (``SIGKILL``) at its first plan ``t >=
    at``, the simulator's dead worker."""

    def __init__(self, rank: int, planned: dict[int, int] | None = None):
        self.rank = rank
        self.crash = {t: how for r, t, how in _entries(CRASH_ENV) if r == rank}
        self.nan = {t for r, t, _ in _entries(NAN_ENV) if r == rank}
        self.die_at = (planned or {}).get(rank - 1) if rank > 0 else None

    def maybe_crash(self, t: int | str) -> None:
        """Fail here if a hook asks for it at iteration (or stage) ``t``, or die if the spec says so."""
        if isinstance(t, int) and self.die_at is not None and t >= self.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if t not in self.crash:
            return
        if self.crash[t] == "exit":
            os._exit(13)
        if self.crash[t] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.crash[t] == "hang":
            while True:
                time.sleep(1.0)
        raise InjectedCrash(f"injected crash ({CRASH_ENV}) at {'iteration ' if isinstance(t, int) else ''}{t}")

    def maybe_poison(self, t: int, payload: np.ndarray) -> bool:
        if t in self.nan:
            payload[:] = np.nan
            return True
        return False
