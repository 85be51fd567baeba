"""The All-Reduce path's exchange of a step: the sum of every rank's contribution, and every rank's row of figures.

:class:`~mpi_runtime.allreduce.Decentralized` needs two collectives a step: the sum of ``[gradient sum, chunks
kept]`` over the ranks (an All-Reduce of ``d + 1`` floats) and every rank's row of figures (an All-Gather). Two
ways to do it, one interface (``send``, ``row`` to fill; ``exchange(wait)``; then ``total`` and ``rows`` to read):

- :class:`MessageExchange`: MPI's ``Iallreduce`` and ``Iallgather``, polled. Any set of hosts.
- :class:`SharedExchange`, when every rank is on one node: each rank writes its contribution and its row into its
  own segment of a shared window and marks a flag; rank 0 adds the contributions as they come in and marks the
  sum complete; every rank copies it. Why: MPI's All-Reduce moves the data in about ``2 log2(p)`` rounds, and
  with more ranks than cores each round waits until the ranks it needs are scheduled and poll; here a rank waits
  for one event only (rank 0: each contribution; the others: the sum), blocked on its doorbell (``doorbell.py``)
  instead of polling, and rank 0 has all but the last contribution added by the time the last one comes. Rank 0
  adds in rank order, so the sum is the same bit for bit on every rank and in every run (MPI does not promise
  that). Measured, see ``docs/design.md`` (the All-Reduce path).

Both wait through the caller's ``wait(test, what[, idle])``, which bounds the wait and names a rank that stopped
(:meth:`~mpi_runtime.allreduce.Decentralized._wait`).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import protocol as P
from .doorbell import job_doorbell


class MessageExchange:
    """The exchange by MPI's non-blocking collectives."""

    def __init__(self, comm: MPI.Comm, length: int, info: int):
        self.comm = comm
        self.send, self.total = np.zeros(length), np.zeros(length)
        self.row, self.rows = np.zeros(info), np.zeros((comm.Get_size(), info))

    def exchange(self, wait) -> None:
        wait(self.comm.Iallreduce(self.send, self.total, op=MPI.SUM).Test, "the All-Reduce")
        wait(self.comm.Iallgather(self.row, self.rows).Test, "the All-Gather")

    def close(self) -> None:
        pass


class SharedExchange:
    """The exchange through a node-local shared window (collective to build; every rank on one node).

    Rank ``r``'s segment holds its contribution (``length`` floats) and its row (``info``); rank 0's also two sums
    and two copies of every row (steps alternate between them), one flag per rank (the last step whose contribution
    the rank has written: each rank writes only its own) and the last step whose sum is complete. Rank 0 reduces:
    it adds the contributions in rank order, each as soon as it and the ones before it are in (a rank that writes
    its contribution rings rank 0's doorbell); after the last one it marks the sum complete and rings every other
    rank. Rank 0, which computes nothing, starts the next step's sum at once, while the others still read this
    one: hence two. It comes back to this step's buffers only after every rank's next contribution, i.e. after
    every rank has finished reading them."""

    def __init__(self, comm: MPI.Comm, length: int, info: int, barrier, local_pids: dict[int, int]):
        rank, size = comm.Get_rank(), comm.Get_size()
        own = length + info + (2 * (length + size * info) + size + 1 if rank == 0 else 0)
        self.win = MPI.Win.Allocate_shared(own * 8, 8, comm=comm)
        segments = [np.frombuffer(self.win.Shared_query(r)[0], dtype=np.float64) for r in range(size)]
        self.parts = [s[:length] for s in segments]
        self.row_of = [s[length:length + info] for s in segments]
        rest = segments[0][length + info:]
        self.sums, rest = rest[:2 * length].reshape(2, length), rest[2 * length:]
        self.rows_out, rest = rest[:2 * size * info].reshape(2, size, info), rest[2 * size * info:]
        self.flags, self.ready = rest[:size], rest[size:]
        self.rank, self.size, self.step, self.next = rank, size, 0, 0
        self.send, self.row = self.parts[rank], self.row_of[rank]      # filled in place: no copy
        self.total, self.rows = self.sums[0], np.zeros((size, info))     # total: a view, valid until the next step
        self.bell = job_doorbell("exchange", rank, size, local_pids)     # NO_DOORBELL (not Linux): the waits poll
        self.win.Lock_all(MPI.MODE_NOCHECK)
        segments[rank][...] = 0.0       # first touch by the owner, before the clock starts
        self.win.Sync()
        barrier()      # bounded: names a rank that did not get here (Peers.checkpoint)
        self.win.Sync()

    def exchange(self, wait) -> None:
        self.step += 1
        self.win.Sync()     # the contribution and the row are visible before the flag that announces them
        self.flags[self.rank] = self.step
        self.win.Sync()
        if self.rank == 0:
            self.next = 0
            self._wait(wait, self._sum_arrived, "the All-Reduce (a contribution in shared memory)")
            self.win.Sync()
            self.ready[0] = self.step
            self.win.Sync()
            for r in range(1, self.size):
                self.bell.ring(r)
        else:
            self.bell.ring(0)
            self._wait(wait, self._sum_ready, "the All-Reduce (the sum in shared memory)")
        self.total = self.sums[self.step % 2]
        np.copyto(self.rows, self.rows_out[self.step % 2])     # a copy: the caller keeps them longer

    def _sum_arrived(self) -> bool:
        """Rank 0: add every contribution that is in, in rank order; True once all are."""
        self.win.Sync()
        total, rows = self.sums[self.step % 2], self.rows_out[self.step % 2]
        while self.next < self.size and self.flags[self.next] >= self.step:
            r = self.next
            if r == 0:
                np.copyto(total, self.parts[0])
            else:
                total += self.parts[r]
            rows[r] = self.row_of[r]
            self.next += 1
        return self.next == self.size

    def _sum_ready(self) -> bool:
        self.win.Sync()
        return bool(self.ready[0] >= self.step)

    def _wait(self, wait, done, what: str) -> None:
        wait(done, what, lambda: self.bell.wait(P.RECHECK, poll=P.POLL))

    def close(self) -> None:
        """Collective: only when every rank reaches the end of the run (never before an ``MPI_Abort``)."""
        self.bell.close()
        self.win.Unlock_all()
        self.win.Free()


def open_exchange(comm: MPI.Comm, length: int, info: int, barrier, local_pids: dict[int, int]):
    """:class:`SharedExchange` if every rank is on one node (and ``GRADCODE_MPI_SHARED`` is not ``0``), else
    :class:`MessageExchange`. ``local_pids``: the pids of the ranks on this host (``Peers.local``: names the
    doorbells). Collective, like :func:`mpi_runtime.protocol.open_shared`."""
    if P.one_node(comm):
        return SharedExchange(comm, length, info, barrier, local_pids)
    return MessageExchange(comm, length, info)
