"""Asynchronous updates on the virtual clock (``async_sgd``): every worker always has one gradient in flight, and
each update applies one of them, the first the scheme's stop rule accepts in arrival order.

Worker ``i``'s ``j``-th gradient (its **task** ``j``, counted from 0 over the run) takes the delay model's draw for
``(seed, t = j, i, load)``, the draw of worker ``i`` in iteration ``j`` of a synchronous scheme, and is computed on
the mini-batch of iteration ``j`` (common random numbers: the ``j``-th gradient of a worker costs the same time and
reads the same samples under every scheme). Task ``j + 1`` begins when the master sends the new model, at the end
of the update that applied task ``j``, and its message arrives ``compute + comm`` later, the arithmetic of
:func:`gradcode.clusters.iteration.iteration` (which finds the first acceptable arrival: it is called with each
worker's task in flight, begun at its own time). A gradient that arrived but may not yet be applied (bounded
staleness) waits; it is applied at the later of its arrival and the previous update's end.

The simulator runs this with zero overhead; the MPI master (``mpi_runtime/async_master.py``) runs it on the same
draws from where its workers really began, for each update's ideal end.
"""

from __future__ import annotations

import numpy as np

from ..schemes._base import Plan
from .iteration import Iteration, iteration

ROWS = 64   # tasks drawn at once for every worker (the workers' task numbers stay close: one block serves them all)


class Tasks:
    """Each worker's task in flight: its number ``task[i]``, when it began (``begin``) and its draws (``compute``,
    ``comm``, model units), for the delay model ``delay`` with ``seed`` and one plan's ``load``."""

    def __init__(self, delay, seed: int, load):
        self.delay, self.seed = delay, seed
        self.load = np.array(load, dtype=float)
        n = len(self.load)
        self._rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.task = np.zeros(n, dtype=np.intp)
        self.begin = np.zeros(n)
        compute, comm = self.draws(0)
        self.compute, self.comm = compute.copy(), comm.copy()

    def draws(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Every worker's ``(compute, comm)`` of task ``j``: the delay model's row ``t = j``, drawn ``ROWS`` rows at
        a time (a draw depends on ``(seed, t, i, load)`` only, so these are the numbers of one call per row)."""
        if j not in self._rows:
            for old in [r for r in self._rows if r < self.task.min()]:
                del self._rows[old]
            ts = np.arange(j, j + ROWS)
            compute, comm = self.delay.sample(self.seed, ts, len(self.load), self.load)
            self._rows.update({int(t): (compute[k], comm[k]) for k, t in enumerate(ts)})
        return self._rows[j]

    def hand_out(self, i: int, at: float) -> int:
        """Worker ``i`` begins its next task at ``at``; its number."""
        self.task[i] += 1
        compute, comm = self.draws(int(self.task[i]))
        self.begin[i], self.compute[i], self.comm[i] = at, compute[i], comm[i]
        return int(self.task[i])

    def arrival(self, i: int) -> float:
        """When worker ``i``'s task in flight arrives at the master: ``begin + compute + comm``."""
        return float(self.begin[i] + self.compute[i] + self.comm[i])


def next_update(policy, plan: Plan, start: float, tasks: Tasks) -> tuple[int, float, Iteration]:
    """The update after ``start``: ``(worker, end, it)``, the worker whose gradient it applies (the last message of
    the prefix the stop ``policy`` accepts, :func:`iteration` over the tasks in flight), when (the later of its
    arrival and ``start``: a gradient held back by a staleness bound is applied once allowed), and the iteration."""
    it = iteration(policy, plan, start, tasks.begin, tasks.compute, tasks.comm, "finish")
    return int(it.senders[-1]), max(start, it.end), it
