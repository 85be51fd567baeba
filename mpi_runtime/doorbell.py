"""Doorbells: wake a rank that waits on this host at once, instead of letting it poll.

A rank that waits by polling (test, sleep 0.2 ms, test again) wakes 5,000 times a second; with 9 ranks on 2 cores
the waiting ranks alone took most of the CPU, and the ranks that had work to do (or the last one to arrive at a
barrier) queued for it. A doorbell is a Unix datagram socket in Linux's abstract namespace (no file to clean up;
it disappears with its process), named after the job and the rank. A waiting rank blocks in ``select`` on its own
socket for at most ``timeout`` seconds; whoever ends its wait sends it one byte. The waiter always tests its
condition again after waking, so a ring that comes early, twice, or never (the socket's buffer full, a ring before
the socket exists) costs at most one ``timeout``, never a wrong result. Where there is none (not Linux, rank 0 on
another host, or no shared memory) a rank gets :data:`NO_DOORBELL`, which nobody rings: its ``wait`` is a sleep of
the caller's ``poll`` interval, so the callers need no second branch.

>>> a, b = Doorbell("doctest", 0, 2), Doorbell("doctest", 1, 2)
>>> a.ring(1)
>>> b.wait(1.0)     # returns at once: rung
True
>>> b.wait(0.01)    # nothing more: times out
False
>>> a.close(); b.close()
"""

from __future__ import annotations

import os
import select
import socket
import sys
import time


class Doorbell:
    """Rank ``rank``'s doorbell among ``size`` ranks of the job named ``job``."""

    def __init__(self, job: str, rank: int, size: int):
        self.addresses = [f"\0gradcode-{job}-{r}" for r in range(size)]
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.addresses[rank])
        self.sock.setblocking(False)

    def ring(self, rank: int) -> None:
        """Wake ``rank`` (if it waits). Never blocks and never fails: a lost ring only delays the waiter."""
        try:
            self.sock.sendto(b"\0", self.addresses[rank])
        except OSError:        # not bound yet, gone, or its buffer full: it will look again after its timeout
            pass

    def wait(self, timeout: float, poll: float | None = None) -> bool:
        """Block until rung or ``timeout`` seconds passed; True if rung. Every ring received so far is consumed.
        (``poll``: what :class:`NoDoorbell` sleeps instead; a doorbell needs no polling.)"""
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return False
        try:
            while True:
                self.sock.recv(64)
        except BlockingIOError:
            return True

    def close(self) -> None:
        self.sock.close()


class NoDoorbell:
    """The stand-in where a rank has no doorbell: rings go nowhere, and a wait never ends early, so the caller polls
    (``wait(timeout, poll)`` sleeps ``poll`` seconds if given, else ``timeout``)."""

    def ring(self, rank: int) -> None:
        pass

    def wait(self, timeout: float, poll: float | None = None) -> bool:
        time.sleep(timeout if poll is None else poll)
        return False

    def close(self) -> None:
        pass


NO_DOORBELL = NoDoorbell()


def job_doorbell(what: str, rank: int, size: int, local_pids: dict[int, int]) -> Doorbell | NoDoorbell:
    """This rank's doorbell in the job whose rank 0 has the pid ``local_pids[0]`` (a name unique on the host while
    the job runs; every rank on rank 0's host knows it after the first checkpoint, :class:`~mpi_runtime.peers.Peers`);
    :data:`NO_DOORBELL` if rank 0 is not on this host, or where Linux's abstract socket namespace is not available."""
    pid = os.getpid() if rank == 0 else local_pids.get(0)
    if pid is None or not sys.platform.startswith("linux"):
        return NO_DOORBELL
    try:
        return Doorbell(f"{what}-{pid}", rank, size)
    except OSError:
        return NO_DOORBELL
