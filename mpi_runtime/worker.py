"""A worker rank of a master/worker scheme: receive a plan, compute, wait out the emulated response time, send.

Worker ``i`` (rank ``i + 1``) loops:

1. **Wait for a plan** by polling (``Iprobe`` + short sleep). If several plans are queued (it was busy), it drains
   them all and keeps only the newest: old plans are stale. A ``STOP`` ends the loop (it answers ``ACK``). The
   model is read where it arrived, never copied: in the plan buffer, or in the shared-memory slot the plan names
   (``protocol.py``), checked after the compute to still hold the plan's version.
2. **Compute** the real partial gradients of its partitions (``workload.gradients``) and encode them with
   ``scheme.message(i, partials, plan)``. Every rank built the same workload and scheme from the spec.
3. **Emulate the response time** that the delay model assigns it, ``(P_i(load_i) + C_i) * time_scale`` seconds
   from ``begin = max(start of the iteration at the master, when this worker became free)``, the simulator's
   ``begin_i = max(start, free_i)``: the time the plan (and the model, if it travels) spent in transit, like the
   real compute, counts toward the emulated time instead of adding to it (the start travels in the plan as
   wall-clock time, exact on one host; on several hosts it needs clocks synchronised by NTP, and a stamp from the
   future is clipped to the receive time). The same ``delay.sample(seed, t, n, load)`` draw the simulator uses
   (common random numbers). Real compute time counts toward it (only the remainder is slept); if the real compute
   was longer, the message goes out late and the result header's overrun flag says so. An infinite emulated delay
   (the ``unresponsive`` model) makes the rank behave as a hung process: it never answers anything again.
4. **Send** the result (the header, and the message unless it is in shared memory) with a non-blocking buffer
   send, tag ``t mod 32767``, and complete it by polling before the buffer is written again. The message is
   written (into the send buffer or the worker's shared segment) before the sleep, so that only the header is
   written after it. The worker counts as free from the moment it sent (the
   simulator's ``free_i = arrival``): the transfer of the result, like that of the plan, counts toward the next
   emulated time.
"""

from __future__ import annotations

import math
import time

import numpy as np
from mpi4py import MPI

from gradcode.schemes._base import Plan

from . import protocol as P
from .config import RunConfig
from .faults import Faults
from .peers import MasterLost, Peers, who


class Worker:
    def __init__(self, comm: MPI.Comm, cfg: RunConfig, scheme, delay, workload, capacity: int, peers: Peers,
                 faults: Faults):
        self.comm, self.cfg, self.scheme, self.delay, self.workload = comm, cfg, scheme, delay, workload
        self.peers, self.faults = peers, faults
        self.i = comm.Get_rank() - 1
        self.n = cfg.workers
        self.capacity = capacity
        d = workload.dim
        self.length, self.is_complex = P.message_layout(scheme, d)
        # the payloads in node-local shared memory if possible (protocol.py); collective, like warm_up
        self.shared = P.open_shared(comm, d, self.length,
                                    lambda: peers.checkpoint("shared memory", cfg.startup_timeout))
        # two plan buffers: drain into the spare one, keep whichever holds the newest plan
        # written once here, so that the page faults of first use do not land in iteration 0
        self.plans = [np.full(P.plan_size(capacity, d), 0.0), np.full(P.plan_size(capacity, d), 0.0)]
        self.result = np.full(P.RESULT_HEADER + (0 if self.shared else self.length), 0.0)
        self.payload = self.shared.messages[self.i] if self.shared else self.result[P.RESULT_HEADER:]
        self.ctrl = np.zeros(1)
        # how long the master may legitimately leave this worker without a plan: it fails an iteration after grace
        # seconds without any message, and an iteration takes at most 2 n messages (a late answer and a current one
        # per worker); beyond that the master is hung (a dead master on this host is noticed at once, peers.py)
        self.patience = (2 * self.n + 2) * cfg.grace
        self.free = 0.0          # wall time at which this worker sent its last result

    # --- the loop -------------------------------------------------------------------------------------------
    def run(self) -> None:
        self.faults.maybe_crash("warmup")
        setup = self.cfg.startup_timeout     # the bound of every wait until the clock starts
        self.peers.checkpoint("warm-up", setup)
        # the master names a missing worker within that; this worker names the master after twice that
        P.warm_up(self.comm, [(self.result, 0)], [(self.plans[0], 0)], 2 * setup + 1, self.peers.check)
        self.peers.checkpoint("clock start", setup)    # the master starts its clock after this
        while True:
            current = self._next_plan()
            if current is None or not self._work(self.plans[current]):
                break          # a STOP, answered with ACK
        if self.shared:
            self.peers.checkpoint("shutdown", self.cfg.grace)
            self.shared.close()     # collective with the master, which has every ACK

    def _next_plan(self) -> int | None:
        """Index of the buffer holding the newest queued plan; None on STOP."""
        current: int | None = None
        status = MPI.Status()
        limit = time.perf_counter() + self.patience
        while True:
            if self.comm.Iprobe(source=0, tag=MPI.ANY_TAG, status=status):
                if status.Get_tag() == P.CTRL_TAG:
                    self._stop()
                    return None
                slot = 0 if current is None else 1 - current
                self._wait(self.comm.Irecv(self.plans[slot], source=0, tag=status.Get_tag()), "a plan")
                if current is None or self.plans[slot][0] > self.plans[current][0]:
                    current = slot
                continue          # drain: more plans may be queued behind this one
            if current is not None:
                return current
            if time.perf_counter() > limit:
                raise MasterLost(f"no plan and no STOP from {who([0])} within {self.patience:g} s (2 n + 2 times "
                                 f"[run] grace){self.peers.states([0])}")
            self.peers.check()
            time.sleep(P.POLL)

    def _wait(self, request: MPI.Request, what: str) -> None:
        """Complete a transfer with the master, bounded (the master polls for it unless it is busy elsewhere)."""
        try:
            P.wait(request, timeout=self.patience, watch=self.peers.check)
        except TimeoutError:
            raise MasterLost(f"{what}: {who([0])} did not complete the transfer within {self.patience:g} s"
                             f"{self.peers.states([0])}") from None

    def _stop(self) -> None:
        """Receive the STOP and answer ACK (on the data communicator, so it follows every result sent before)."""
        self._wait(self.comm.Irecv(self.ctrl, source=0, tag=P.CTRL_TAG), "the STOP")
        self._wait(self.comm.Isend(self.ctrl, dest=0, tag=P.CTRL_TAG), "the ACK")

    # --- one plan -------------------------------------------------------------------------------------------
    def _work(self, buf: np.ndarray) -> bool:
        """Compute, wait out the emulated delay, send. False if a STOP arrived meanwhile."""
        received = time.time()
        t, load, batch, n_parts, parts, w, stamp, slot = P.unpack_plan(buf, self.capacity, self.shared)
        begin = max(min(stamp, received), self.free)
        self.faults.maybe_crash(t)
        payload = self._message(t, load, batch, n_parts, parts, w)
        P.check_model(self.shared, slot, t)
        real = time.time() - received
        target = self._emulated(t, load)
        # the real work alone took longer than a positive emulated time (a zero target has nothing to overrun)
        overrun = target > 0 and received + real > begin + target
        if not math.isfinite(target):
            _hang(self.peers)
        self.payload[:] = payload     # before the sleep: after it, only the header is left to write
        self.faults.maybe_poison(t, self.payload)
        if self.shared:
            self.shared.sync()        # the payload is written before the header that announces it is sent
        if not P.sleep_until(begin + target, self._stop_came):
            return False
        hdr = self.result
        hdr[:P.RESULT_HEADER] = (t, self.i, real, target, float(overrun), time.time())
        self.free = hdr[5]     # free from when it sent (its emulated arrival): the transfer counts toward the next plan
        self._wait(self.comm.Isend(hdr, dest=0, tag=P.data_tag(t)), f"the result of iteration {t}")
        return True

    def _message(self, t: int, load: float, batch: int | None, n_parts: int, parts, w) -> np.ndarray:
        partials = self.workload.gradients(w, t, parts, n_parts, batch)
        # the scheme only reads its own worker's entry of the plan
        own = tuple(tuple(parts) if j == self.i else () for j in range(self.n))
        plan = Plan(t=t, parts=own, n_parts=n_parts, load=np.full(self.n, load), batch=batch)
        return P.as_payload(self.scheme.message(self.i, partials, plan), self.is_complex)

    def _emulated(self, t: int, load: float) -> float:
        """Seconds this worker's response takes in the model: the simulator's draw for (seed, t, i, load)."""
        compute, comm = self.delay.sample(self.cfg.seed, t, self.n, np.full(self.n, load))
        return float(compute[0, self.i] + comm[0, self.i]) * self.cfg.time_scale

    def _stop_came(self) -> bool:
        """Has a STOP arrived while this worker waits out an emulated delay? (Then it answers ACK.)"""
        if self.comm.Iprobe(source=0, tag=P.CTRL_TAG):
            self._stop()
            return True
        self.peers.check()     # the master died meanwhile: say so now, not after the emulated delay
        return False


def _hang(peers: Peers) -> None:
    """An infinite emulated delay: behave as a hung process (no answer, ever). The master reports this rank after
    its grace period and aborts it; if the master dies first (on this host), this rank says so and fails."""
    while True:
        time.sleep(P.POLL * 100)
        peers.check()
