"""The master rank of an asynchronous scheme (``async_sgd``): the simulator's asynchronous updates on the wall clock
(``gradcode/clusters/asynchronous.py``), through the same transport as every master/worker scheme.

At the clock start every worker gets task 0 on the initial model. Update ``u``:

1. **Poll** until a gradient that the scheme accepts has arrived (its stop rule over the gradients in hand, in
   arrival order: the first, unless a staleness bound holds it back). Each result is worker ``i``'s task
   ``task[i]``: its header's ``t`` is the task number (the worker draws its delay and mini-batch by it, as the
   simulator does), so a result is never mistaken for another. A gradient held back is copied out and kept.
2. **Conclude**: ``scheme.accept`` (its staleness), the estimate, ``w -= lr * g``, the record
   (:meth:`gradcode.clusters.driver.Driver.conclude_update`).
3. **Hand out**: that worker alone gets the new model as its next task; the other workers compute on.

**Times.** As in ``master.py``: ``start`` when the update begins waiting, ``end`` when the gradient is applied, in
model units, evaluations off the clock. ``ideal_end``: the simulator's update (:func:`next_update`) on the same
draws from when each worker really got its task (the wall time its plan was stamped, on this update's model clock:
workers compute on while the master evaluates), so each update is charged its own overhead only. A non-finite
gradient ends the run with the reason (every gradient is applied: none can be dropped as an erasure).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from gradcode.clusters.asynchronous import Tasks, next_update
from gradcode.clusters.driver import SimulationError
from gradcode.deaths import planned_deaths
from gradcode.schemes._base import Received

from . import protocol as P
from .master import Master
from .protocol import RunFailure


class AsyncMaster(Master):
    """The master of an asynchronous scheme (see the module's docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if planned_deaths(self.options, self.n) or self.links is not None:
            raise RunFailure(f"{self.scheme.name}: [network] and [faults] are not modelled for asynchronous "
                             "updates; leave them out for this scheme")
        self.tasks = Tasks(self.delay, self.options.seed, np.ones(self.n))    # the shadow clock's tasks in flight
        self.arrived: list[int] = []              # workers whose gradient is in hand, in arrival order
        self.gradients: dict[int, np.ndarray] = {}
        self.waited = np.full(self.n, np.nan)
        self.overran = np.zeros(self.n, dtype=bool)
        self.sent_at = np.zeros(self.n)     # wall time (time.time) at which each worker's task was stamped

    def gather(self, t: int, plan) -> dict[str, Any]:
        self.faults.maybe_crash(t)
        if t == 0:
            self._hand_out(plan, range(self.n), 0)
        start = self.now()
        # each task's begin on this update's model clock, from the wall time its plan left (the model clock stops
        # during evaluations, the workers' does not)
        self.tasks.begin[:] = start + (self.sent_at - time.time()) / self.scale
        try:
            ideal_worker, ideal_end, _ = next_update(self.policy, plan, start, self.tasks)
        except SimulationError as err:
            raise RunFailure(f"update {t}: {err}") from None
        self._write_record()
        i = self._wait(t, plan)
        end = self.now()
        tick = time.perf_counter()
        self.evaluation_s = 0.0
        task, begin = int(self.tasks.task[i]), float(self.tasks.begin[i])
        self.scheme.accept(i, t)
        combined = self.scheme.combine_sum(self.gradients.pop(i), 1, plan)
        rec = self.conclude_update(t, plan, start, end, ideal_end=ideal_end, worker=i, combined=combined, task=task,
                                   worker_begin=begin, worker_delay=float(self.waited[i]),
                                   ideal_responders=[ideal_worker])
        self._hand_out(plan, [i], t + 1)
        master_s = time.perf_counter() - tick - self.evaluation_s
        rec.update(master_us=master_s * 1e6, evaluation_us=self.evaluation_s * 1e6, stale=0, erasures=[],
                   overruns=[i] if self.overran[i] else [])
        return rec

    def _hand_out(self, plan, workers, version: int) -> None:
        """The current model to ``workers``, each as its next task (0 for the first), on model ``w_version``."""
        workers = list(workers)
        stamp = time.time()
        tasks = [0 if version == 0 else self.tasks.hand_out(i, self.now()) for i in workers]
        slot = self.port.publish(tasks[0], self.w)     # several workers: all on task 0, one model
        for i, task in zip(workers, tasks, strict=True):
            message = self.port.prepare(i, task, plan, self.w, stamp, slot)
            self.port.send(i, task, message, ring=False)
            self.scheme.hand_out(i, version)
            self.busy[i] = task
            self.sent_at[i] = stamp
        self.port.ring(workers)

    def _wait(self, t: int, plan) -> int:
        """Poll until an acceptable gradient is in hand; its worker."""
        last = time.perf_counter()
        while True:
            for i, res in self.port.arrivals():
                last = time.perf_counter()
                self._take(t, plan, i, res)
            if self.arrived:
                m = self.scheme.stop_index(Received(self.arrived), plan)
                if m is not None:
                    return self.arrived.pop(m - 1)
            if time.perf_counter() - last > self.options.grace:
                waiting = [i for i in range(self.n) if i not in self.arrived]
                raise RunFailure(f"update {t}: no gradient for {self.options.grace:g} s ([run] grace); waiting "
                                 f"for workers {waiting}{self.peers.states([i + 1 for i in waiting])}")
            self.peers.check()
            self.port.nap(np.inf)

    def _take(self, t: int, plan, i: int, res) -> None:
        """Worker ``i``'s result: its task's gradient, copied out. A non-finite one ends the run with the reason:
        every gradient is applied, so none may be dropped, and handing the worker the model again would retry for
        ever if the model itself has diverged."""
        if res.t != self.busy[i] or res.kind == P.MESSAGE:   # a guard on the protocol: one message per task
            raise RunFailure(f"update {t}: worker {i} (rank {i + 1}) answered task {res.t} with kind {res.kind}, "
                             f"expected the last message of task {self.busy[i]}")
        payload = self.port.payload(i, res)
        if payload is None or not P.finite(payload):
            raise RunFailure(f"update {t}: worker {i} (rank {i + 1}) sent a non-finite gradient of task {res.t}; "
                             f"{self.scheme.name} applies every gradient, so the run stops (a diverged model: give "
                             "a smaller [run] lr, or step = \"staleness\")")
        self.gradients[i] = np.array(P.as_payload(payload, self.port.is_complex))
        self.waited[i] = res.emulated / self.scale     # the delay it waited out: its task's draw
        self.overran[i] = res.overrun                   # its real compute outlasted that delay
        self.port.done(i, res)
        self.busy[i] = -1
        self.arrived.append(i)
