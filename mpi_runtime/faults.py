"""Test hooks that inject faults into an MPI run (read from the environment of every rank).

- ``GRADCODE_TEST_CRASH="RANK:ITER"``: rank ``RANK`` raises an exception when it starts iteration ``ITER`` (a
  worker when it picks up that plan; under DropCompute any rank at that step). ``"RANK:ITER:exit"`` instead ends
  the process at once with ``os._exit(13)``, as a segfault or an OOM kill would (no Python clean-up; the MPI
  launcher then reports the dead process and kills the job).
- ``GRADCODE_TEST_NAN="RANK:ITER[,RANK:ITER...]"``: that worker rank overwrites its message of that iteration with
  NaN before sending it (the master must treat it as an erasure).

Several entries are separated by commas. An unresponsive worker needs no hook: use the ``unresponsive`` delay
model (its emulated delay is infinite, and the rank then behaves as a hung process: it never answers anything).
"""

from __future__ import annotations

import os

import numpy as np

CRASH_ENV = "GRADCODE_TEST_CRASH"
NAN_ENV = "GRADCODE_TEST_NAN"


class InjectedCrash(RuntimeError):
    """The crash the test hook asked for."""


def _entries(env: str) -> list[tuple[int, int, str]]:
    text = os.environ.get(env, "").strip()
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        fields = item.split(":")
        if len(fields) not in (2, 3):
            raise ValueError(f"{env}={text!r}: each entry must be RANK:ITER (or RANK:ITER:exit)")
        out.append((int(fields[0]), int(fields[1]), fields[2] if len(fields) == 3 else ""))
    return out


class Faults:
    """The hooks that apply to one rank."""

    def __init__(self, rank: int):
        self.rank = rank
        self.crash = {t: how for r, t, how in _entries(CRASH_ENV) if r == rank}
        self.nan = {t for r, t, _ in _entries(NAN_ENV) if r == rank}

    def maybe_crash(self, t: int) -> None:
        if t not in self.crash:
            return
        if self.crash[t] == "exit":
            os._exit(13)
        raise InjectedCrash(f"injected crash ({CRASH_ENV}) at iteration {t}")

    def maybe_poison(self, t: int, payload: np.ndarray) -> bool:
        if t in self.nan:
            payload[:] = np.nan
            return True
        return False
