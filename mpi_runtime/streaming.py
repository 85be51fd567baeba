"""The bookkeeping of shared memory between plans and results (no MPI here: the caller syncs and sends).

A plan may send several results (a streaming scheme), and under ``late_workers = "abandon"`` a worker may hold two
plans; on one node the payloads still travel through the shared window of ``protocol.py``:

- the model of iteration ``t`` goes into a slot that no worker may still read (:class:`Unread`, master side);
- each worker writes its messages into a ring of segments of its own (:class:`Ring`, worker side; one segment
  when every plan sends one message) and sends the header alone, which names the message's number; the master
  reads the payload and counts it in its own segment (``SharedMemory.consumed``), and the worker reuses a segment
  only once the message in it is counted. A worker never waits for the master: with no free segment the message
  goes inline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .protocol import SharedMemory


class Unread:
    """Master side: the model slots named by plans that a worker may still read.

    A worker reads the model of its plan before it sends the plan's first result (a worker that may send before
    its last chunk copies it out first), and results from one worker arrive in the order it sent them; so once a
    result of plan ``t`` (or of a later plan: a plan it skipped or dropped is never read again) has come from
    worker ``i``, no plan of ``i`` up to ``t`` is read any more. Until then its slot is held, whether the worker is
    computing it, has not taken it yet, or will skip it (a worker that drains several queued plans reads the
    newest only, but the master cannot know which it saw)."""

    def __init__(self, n: int):
        self.plans: list[list[tuple[int, int]]] = [[] for _ in range(n)]

    def sent(self, i: int, t: int, slot: int) -> None:
        if slot >= 0:
            self.plans[i].append((t, slot))

    def answered(self, i: int, t: int) -> None:
        """A result of plan ``t`` came from worker ``i``."""
        if self.plans[i] and self.plans[i][0][0] <= t:
            self.plans[i] = [(u, s) for u, s in self.plans[i] if u > t]

    def held(self) -> list[int]:
        return [s for plans in self.plans for _, s in plans]


class Ring:
    """Worker side: this worker's message segments in shared memory.

    Message number ``m`` (counted over the run, only those sent through the ring) goes into segment ``m mod R``,
    which held message ``m - R``: free once the master has read that one (``consumed > m - R``; the master counts
    every ring message it reads, in order). Messages staged but dropped (a newer plan under ``abandon``) were never
    sent: :meth:`rewind` hands their numbers out again."""

    def __init__(self, shared: SharedMemory, i: int):
        self.shared, self.i = shared, i
        self.segments = shared.rings[i]
        self.next = 0      # number of the next message staged
        self.sent = 0      # messages sent so far (the ones staged before them are all sent)

    def stage(self, payload: np.ndarray) -> int:
        """Write ``payload`` into the next segment if the master has read it; its number, or -1 (then it travels
        inline: the worker never waits for the master)."""
        m = self.next
        self.shared.sync()
        if self.shared.consumed[self.i] <= m - len(self.segments):
            return -1
        np.copyto(self.segments[m % len(self.segments)], payload)
        self.next += 1
        return m

    def sending(self, m: int) -> None:
        """Message ``m`` is about to be announced (its payload is written: ordered before the header)."""
        self.shared.sync()
        self.sent = m + 1

    def rewind(self) -> None:
        self.next = self.sent
