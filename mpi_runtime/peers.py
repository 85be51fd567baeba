"""Who is in the job and whether they still answer: checkpoints that name the ranks that did not arrive, failure
reports to rank 0, and (for ranks on the same host) whether a peer's process is still there.

**Every wait is bounded and names a rank.** A blocking collective (``Barrier``, ``Comm.Dup``, ``Win.Free``, ...)
waits for ever for a rank that stopped, and cannot say which one it waits for. The runtime therefore meets at
:meth:`Peers.checkpoint` (point-to-point messages with rank 0, polled: rank 0 names the ranks that did not arrive
within the timeout, a worker names rank 0) and only enters a collective that has no non-blocking form
(``Split_type``, ``Win.Allocate_shared``) right after one. Every polling loop calls :meth:`Peers.check`, which

- on rank 0 receives a worker's failure report (:meth:`Peers.report_failure`, sent by ``__main__`` when a worker
  fails: rank 0 then ends the run naming it, writes its summary and aborts the job, instead of being killed by the
  worker's ``MPI_Abort`` with nothing written);
- notices that a watched peer's process is gone (rank 0 watches every worker, a worker watches rank 0). This needs
  the peer on the same host (its pid, exchanged at the first checkpoint, read in ``/proc``); on another host the
  timeouts alone bound the wait. The launcher must not kill the job itself when one process dies
  (``-disable-auto-cleanup`` for MPICH's Hydra, see ``launch.py``): the survivors say who died, then abort.
- answers rank 0's pings (:meth:`Peers.ping`: which ranks are still waiting in a collective that does not end).

Everything here travels on ``MPI.COMM_WORLD``; the runtime's data travels on a duplicate of it, so that neither
can match the other's tags.
"""

from __future__ import annotations

import os
import time
import zlib

import numpy as np
from mpi4py import MPI

from gradcode.plumbing.children import proc_stat

from .protocol import POLL, RunFailure, wait, wait_all

FAIL_TAG = 1          # worker -> rank 0: "I failed" (its own message on stderr says why)
PING_TAG = 2          # rank 0 -> a peer: are you still waiting with us?
PONG_TAG = 3          # ... yes
CHECKPOINT_TAG = 10   # + the checkpoint's number
CHECK_EVERY = 0.05    # seconds between two checks in a polling loop


class MasterLost(RunFailure):
    """A worker's failure because rank 0 died or stopped answering (nothing to report to it)."""


def role(rank: int) -> str:
    return "master" if rank == 0 else f"worker {rank - 1}"


def who(ranks) -> str:
    """``'rank 2 (worker 1)'``, or ``'ranks [2, 3] (workers [1, 2])'``."""
    ranks = sorted(int(r) for r in ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]} ({role(ranks[0])})"
    roles = ["master"] * (0 in ranks) + [f"workers {[r - 1 for r in ranks if r > 0]}"]
    return f"ranks {ranks} ({', '.join(roles)})"


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (``'R'``, ``'S'``, ``'T'`` stopped, ...), None if it is gone (or a
    zombie: it exited and waits for its parent)."""
    fields = proc_stat(pid)
    if fields is None:
        try:
            os.kill(pid, 0)       # no /proc (not Linux): existence only
        except ProcessLookupError:
            return None
        except OSError:
            return "?"
        return "?"
    return None if fields[0] in ("Z", "X") else fields[0]


class Peers:
    """This rank's view of the others (see the module docstring)."""

    def __init__(self, world: MPI.Comm):
        self.world = world
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.me = np.array([os.getpid(), zlib.crc32(MPI.Get_processor_name().encode())], dtype=float)
        self.local: dict[int, int] = {}     # rank -> pid, for the peers on this host (known after a checkpoint)
        # whose death or failure report ends the run: rank 0 watches every worker, a worker watches rank 0
        self.watched = set(range(1, self.size)) if self.rank == 0 else {0}
        self.checkpoints = 0
        self.next_check = 0.0
        self.box = np.zeros(1)
        self.sent: list = []     # sends never waited for (pongs, pings, a failure report), with their buffers
        # rank 0 of a master/worker run, once its clock runs: a worker's death or failure is an erasure, kept in
        # ``lost`` (rank -> why) for the master to take (:meth:`take_lost`) instead of raised
        self.tolerant = False
        self.lost: dict[int, str] = {}
        self.note = ""       # said after a death that ends the run (e.g. what an All-Reduce would need to go on)

    # --- meeting points -------------------------------------------------------------------------------------
    def checkpoint(self, stage: str, timeout: float) -> None:
        """Every rank has reached ``stage`` (collective, in the same order on every rank). Rank 0 waits up to
        ``timeout`` s for every worker's report, then raises :class:`RunFailure` naming those missing; then it
        sends each a go. A worker waits up to ``2 timeout + 1`` s for the go (rank 0 names a missing worker
        first), then raises naming rank 0. The first checkpoint also exchanges the pids."""
        tag = CHECKPOINT_TAG + self.checkpoints
        self.checkpoints += 1
        if self.rank == 0:
            self._gather(stage, tag, timeout)
            sends = [self.world.Isend(self.me, dest=r, tag=tag) for r in range(1, self.size)]
            if wait_all(sends, timeout, self.check):      # eager sends to live ranks: never expected
                raise RunFailure(f"{stage}: could not release the workers within {timeout:g} s")
            return
        send = self.world.Isend(self.me, dest=0, tag=tag)
        go = np.zeros(2)
        patience = 2 * timeout + 1
        try:
            wait(self.world.Irecv(go, source=0, tag=tag), timeout=patience, watch=self.check)
            wait(send, timeout=timeout, watch=self.check)
        except TimeoutError:
            raise MasterLost(f"{stage}: {who([0])} did not answer within {patience:g} s{self.states([0])}") from None
        self._learn(0, go)

    def _gather(self, stage: str, tag: int, timeout: float) -> None:
        bufs = [np.zeros(2) for _ in range(1, self.size)]
        recvs = [self.world.Irecv(buf, source=r + 1, tag=tag) for r, buf in enumerate(bufs)]
        missing = [i + 1 for i in wait_all(recvs, timeout, self.check)]
        if missing:
            raise RunFailure(f"{stage}: {who(missing)} did not arrive within {timeout:g} s{self.states(missing)}")
        for r, buf in enumerate(bufs, start=1):
            self._learn(r, buf)

    def _learn(self, rank: int, info: np.ndarray) -> None:
        if info[1] == self.me[1]:
            self.local[rank] = int(info[0])

    # --- in every polling loop ------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise :class:`RunFailure` if a watched peer reported a failure or its process is gone; answer pings.
        Cheap enough for any polling loop: does something at most every :data:`CHECK_EVERY` seconds."""
        now = time.perf_counter()
        if now < self.next_check:
            return
        self.next_check = now + CHECK_EVERY
        status = MPI.Status()
        if self.rank == 0:
            while self.world.Iprobe(source=MPI.ANY_SOURCE, tag=FAIL_TAG, status=status):
                failed = status.Get_source()
                text = bytearray(status.Get_count(MPI.BYTE))
                self.world.Recv([text, MPI.BYTE], source=failed, tag=FAIL_TAG)
                self._lose(failed, f"failed: {text.decode(errors='replace')}")
                self._send(np.zeros(1), failed, FAIL_TAG)     # heard: it may end (__main__), not the job
        elif self.world.Iprobe(source=0, tag=PING_TAG):
            self.world.Recv(self.box, source=0, tag=PING_TAG)
            self._send(np.zeros(1), 0, PONG_TAG)
        for rank in list(self.watched):
            if rank in self.local and process_state(self.local[rank]) is None:
                if rank == 0:
                    raise MasterLost(f"{who([0])} died: its process is gone")
                self._lose(rank, "its process is gone")

    def _lose(self, rank: int, why: str) -> None:
        """Worker ``rank`` died or failed: kept for the master if it tolerates that, else the run's end."""
        if not self.tolerant:
            raise RunFailure(f"{who([rank])} {why if why.startswith('failed') else 'died: ' + why}{self.note}")
        self.lost[rank] = why
        self.forget(rank)

    def take_lost(self) -> dict[int, str]:
        """The workers lost since the last call (rank -> why), forgotten here (never watched again)."""
        lost, self.lost = self.lost, {}
        return lost

    def forget(self, rank: int) -> None:
        """``rank`` has finished its part (it may exit now): no longer watched."""
        self.watched.discard(rank)

    def state(self, rank: int) -> str:
        """``'its process is stopped'`` and the like; empty if unknown (another host, or no pid yet)."""
        if rank not in self.local:
            return ""
        state = process_state(self.local[rank])
        if state is None:
            return "its process is gone"
        if state in ("T", "t"):
            return "its process is stopped (SIGSTOP or a debugger)"
        return "its process is alive but does not answer"

    def states(self, ranks) -> str:
        """``'; rank 2: its process is stopped'`` for the ranks whose state is known, for a message."""
        known = [f"rank {r}: {self.state(r)}" for r in sorted(ranks) if self.state(r)]
        return "; " + ", ".join(known) if known else ""

    def ping(self, ranks, timeout: float) -> list[int]:
        """Rank 0: which of ``ranks`` do not answer a ping within ``timeout`` s (a rank answers while it waits in
        a polling loop, i.e. while it waits in the same collective)."""
        boxes = [np.zeros(1) for _ in ranks]
        recvs = [self.world.Irecv(box, source=r, tag=PONG_TAG) for r, box in zip(ranks, boxes, strict=True)]
        for r in ranks:
            self._send(np.zeros(1), r, PING_TAG)
        return [ranks[i] for i in wait_all(recvs, timeout)]

    # --- when this rank fails -------------------------------------------------------------------------------
    def report_failure(self, error: str, patience: float) -> bool:
        """A worker failed with ``error`` (also printed): tell rank 0 and wait up to ``patience`` s for its answer.
        True if rank 0 heard it and goes on without this worker (a master that tolerates deaths): this rank may then
        end alone; False if not (rank 0 names it, writes its summary and aborts the job, or is gone: the caller
        aborts)."""
        if self.rank == 0 or (0 in self.local and process_state(self.local[0]) is None):
            return False
        self._send([np.frombuffer(error.encode()[:4000], dtype=np.uint8), MPI.BYTE], 0, FAIL_TAG)
        limit = time.perf_counter() + patience
        while time.perf_counter() < limit:
            if self.world.Iprobe(source=0, tag=FAIL_TAG):
                self.world.Recv(self.box, source=0, tag=FAIL_TAG)
                return True
            if 0 in self.local and process_state(self.local[0]) is None:
                return False
            time.sleep(10 * POLL)
        return False

    def _send(self, buf, dest: int, tag: int) -> None:
        """A small send completed in the background (eagerly): its request and buffer are kept alive meanwhile."""
        self.sent = [(r, b) for r, b in self.sent if not r.Test()]
        self.sent.append((self.world.Isend(buf, dest=dest, tag=tag), buf))
