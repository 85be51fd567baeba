"""What the master hears of each worker in one iteration: the records' ``worker_*`` fields, on the MPI cluster.

The master reads its own clock when it sends a plan and when an answer arrives; the answer's header brings the
worker's own durations (its compute, its time from taking the plan up to sending, its emulated delay). Sent time is
then the plan's departure plus that duration, so no offset between the ranks' clocks enters
(:func:`gradcode.clusters.records.worker_times` turns them into the record's fields).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradcode.clusters.records import worker_times

from .protocol import Result


class Heard:
    """Per-worker times of the current iteration (model units), reset by :meth:`new` each iteration."""

    KEYS = ("arrived", "compute", "held", "delay")

    def __init__(self, n: int, scale: float):
        self.scale = scale
        self.plan_at = np.full(n, np.nan)   # master clock when it sent the worker's plan ...
        self.plan_iter = np.full(n, -1)     # ... of that iteration
        self.t = -1
        self.values = {key: np.full(n, np.nan) for key in self.KEYS}

    def new(self, t: int) -> None:
        self.t = t
        for values in self.values.values():
            values.fill(np.nan)

    def plan_sent(self, i: int, t: int, now: float) -> None:
        self.plan_at[i], self.plan_iter[i] = now, t

    def read(self, res: Result) -> tuple[float, float, float]:
        """From a result header: the worker's compute, its time from taking the plan up to sending (both its own
        durations, in model units) and its emulated delay."""
        return res.real / self.scale, (res.sent_at - res.taken_at) / self.scale, res.emulated / self.scale

    def stamp(self, i: int, heard: tuple[float, float, float], now: float) -> None:
        """Worker ``i``'s message of the current iteration arrived ``now`` (the master's clock)."""
        self.values["arrived"][i] = now
        self.values["compute"][i], self.values["held"][i], self.values["delay"][i] = heard

    def fields(self, t: int, start: float, injects: bool) -> dict[str, Any]:
        """The record's ``worker_*`` fields. The plan reached the worker after it left, so ``sent`` is at most the
        true send time, itself before the arrival (``min`` guards the round-off)."""
        v = self.values
        plan_received = np.where(self.plan_iter == t, self.plan_at, np.nan)
        sent = np.fmin(plan_received + v["held"], v["arrived"])
        sent[np.isnan(v["arrived"])] = np.nan
        return worker_times(start, plan_received=plan_received, compute=v["compute"], sent=sent,
                            arrived=v["arrived"], delay=v["delay"] if injects else None)
