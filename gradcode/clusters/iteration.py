"""One master iteration on the virtual clock: when every worker's chunks end, which messages end the iteration, and
what each worker did. The simulator runs it; the MPI master runs it on the same draws for its ideal (zero-overhead)
end and for the work counted.

One message model (``docs/design.md#chunked-workers``): worker ``i`` runs its plan's ``L_i`` chunks (an unchunked
plan: one) at one speed, the delay model's draw ``compute_i`` for the whole plan split evenly, so chunk ``j`` ends at
``chunk_end[i, j] = begin_i + compute_i (j + 1) / L_i``; it starts chunk ``j >= 1`` only while ``chunk_end[i, j - 1]
- begin_i < tau`` (its local deadline). Its message after ``c`` chunks (``c`` in ``scheme.emits``) arrives ``comm_i``
after chunk ``c`` ends (sending overlaps the next chunk). The stop policy ends the iteration at the first prefix of
the arrivals after which its rule holds.

A late worker (``late_workers``) under ``finish`` completes the chunks it started; under ``abandon`` a chunked plan is
dropped at the next chunk boundary (the chunk in progress is finished: a worker looks up from its work only between
chunks), while an unchunked plan, one piece of work the textbook model lets a worker drop at any instant, is dropped
at once, with the share of its compute done by the end counted as done.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..network import Links
from ..schemes._base import Plan, Received, Scheme, as_received
from .records import WORKER_TIMES_MAX_N, worker_times


@dataclass
class Iteration:
    """One master iteration on the virtual clock (see the module's docstring).

    ``received`` are the messages, in arrival order (their arrival times ``arrive``), that ended the iteration at
    ``end``; ``started[i]`` whether worker ``i`` took up the plan before then; ``done[i]`` the chunks it computes on
    this plan (a share of the one chunk of an unchunked plan dropped at once); ``free[i]`` when it can take the next
    plan; ``sent[i]`` the messages it sends; ``table`` every message the plan lets a worker send
    (:func:`emit_table`) and ``times`` their arrivals, when the cluster has them at hand.
    """

    start: float
    end: float
    begin: np.ndarray
    chunk_end: np.ndarray
    received: Received       # or a list of (worker, chunks) pairs
    arrive: np.ndarray
    started: np.ndarray
    done: np.ndarray
    free: np.ndarray
    sent: np.ndarray
    table: tuple[np.ndarray, np.ndarray] | None = None
    times: np.ndarray | None = None
    leave: np.ndarray | None = None     # when the table's messages were sent, where a network delays them

    @cached_property
    def senders(self) -> np.ndarray:
        """The worker of each received message."""
        return as_received(self.received).workers

    @cached_property
    def counts(self) -> np.ndarray:
        """The chunks after which each received message was sent (its ``c``)."""
        return as_received(self.received).chunks

    @cached_property
    def responders(self) -> np.ndarray:
        """The workers heard from, in the order of their first received message."""
        if as_received(self.received).one_each:
            return self.senders
        return self.senders[np.sort(np.unique(self.senders, return_index=True)[1])]

    def computed(self, plan: Plan) -> np.ndarray:
        """Load units each worker computed on this plan."""
        return self.done * _chunk_load(plan, len(self.done))

    def used(self, scheme: Scheme, plan: Plan) -> np.ndarray:
        """Load units each worker delivered in the received messages (a chunk delivered twice counts twice)."""
        n = len(self.done)
        who, c = self.senders, self.counts
        if not len(who) or as_received(self.received).one_each:   # each its worker's one message: all its load
            used = np.zeros(n)
            used[who] = _chunk_load(plan, n)[who]
            return used
        # a message after c chunks carries those since its worker's previous emit: looked up in the table of every
        # (worker, emit), sorted by worker then chunks, all messages at once
        worker, chunks = self.table if self.table is not None else emit_table(scheme, plan, n)
        span = int(max(chunks.max(initial=0), c.max())) + 1
        at = np.searchsorted(worker * span + chunks, who * span + c)
        previous = np.where((at > 0) & (worker[at - 1] == who), chunks[at - 1], 0)
        return np.bincount(who, weights=(c - previous) * _chunk_load(plan, n)[who], minlength=n)

    def worker_times(self, compute: np.ndarray, comm: np.ndarray) -> dict[str, Any]:
        """The record's per-worker times (:func:`gradcode.clusters.records.worker_times`): the plan taken up at
        ``begin``; sent and arrival of each worker's last message to arrive by the end (as on MPI, where no later
        one is known), and its compute up to that message, else that of the chunks it took up (an unchunked plan
        dropped at once: its whole draw, the work it had taken on)."""
        n = len(self.begin)
        if n >= WORKER_TIMES_MAX_N:
            return {}    # worker_times leaves them out
        took = self.started
        chunks = np.maximum(np.isfinite(self.chunk_end).sum(axis=1), 1)    # (finite ends past its last: inf)
        with np.errstate(invalid="ignore"):
            work = np.where(took, compute * np.maximum(np.ceil(self.done), 1) / chunks, np.nan)
        sent, arrived = np.full(n, np.nan), np.full(n, np.nan)
        worker, c = self.table if self.table is not None else (np.arange(n), np.ones(n, dtype=np.intp))
        by_end = self.times <= self.end
        if by_end.any():     # each worker's last message by the end: the table lists a worker's emits in order
            who, c, at = worker[by_end], c[by_end], self.times[by_end]
            last = len(who) - 1 - np.unique(who[::-1], return_index=True)[1]
            i, c, at = who[last], c[last], at[last]
            sent[i], arrived[i] = (at - comm[i] if self.leave is None else self.leave[by_end][last]), at
            work[i] = compute[i] * c / chunks[i]
        return worker_times(self.start, plan_received=np.where(took, self.begin, np.nan), compute=work, sent=sent,
                            arrived=arrived, delay=np.where(took, compute + comm, np.nan))


def begins(plan: Plan, late: str, start: float, free: np.ndarray) -> np.ndarray:
    """When each worker begins the plan issued at ``start``: when it is free of its last one (``free``), except an
    unchunked plan under ``abandon``, whose workers drop the old one at once and begin at ``start``."""
    return np.maximum(start, free) if late == "finish" or plan.chunked else np.full(len(free), start)


def iteration(policy, plan: Plan, start: float, begin: np.ndarray, compute: np.ndarray, comm: np.ndarray,
              late: str, links: Links | None = None) -> Iteration:
    """The messages of every worker's chunks, ended by the stop policy ``policy`` (a
    :class:`gradcode.clusters.driver.StopPolicy`); ``late`` is ``finish`` or ``abandon``
    (:func:`gradcode.clusters.driver.late_rule`). With ``links`` (:mod:`gradcode.network`) the plans
    and the messages cross them: a worker begins when its plan has come, a message arrives when the links say."""
    n = len(begin)
    if links is not None:
        begin = links.plans(begin, links.plan_bytes)
    one_each = not plan.chunked     # one message a worker, in worker order: the same arithmetic on whole arrays
    if one_each:
        ends, started, worker, chunks = (begin + compute)[:, None], None, None, None
        times = ends[:, 0] + comm
    else:
        ends, started = chunk_ends(plan, begin, compute)
        worker, chunks = emit_table(policy.scheme, plan, n)
        keep = chunks <= started[worker]      # a message after a chunk the worker never starts is never sent
        worker, chunks = worker[keep], chunks[keep]
        times = ends[worker, chunks - 1] + comm[worker]
    leave = None
    if links is not None:
        leave, times = times, links.messages(times, np.arange(n) if one_each else worker,
                                             policy.scheme.message_bytes(links.d))
    order = arrival_order(times)
    finite = np.isfinite(times)
    if not finite.all():      # (usually all are: then no gather of every time)
        order = order[finite[order]]
    arrived = Received(order) if one_each else Received(worker[order], chunks[order])
    m = policy.count(arrived, times[order] if math.isfinite(plan.deadline) else None, start, plan)
    received, end = arrived[:m], float(times[order[m - 1]])
    # took up the plan: began before the end, or (at zero or tiny delays, absorbed by round-off, where everyone
    # begins and answers at the very instant the iteration ends) had its first chunk done by then
    took = (begin < end) | (ends[:, 0] <= end)
    if one_each:
        done, free, sent = _one_chunk(late, begin, compute, ends[:, 0], times, took, end)
        table = None        # worker i's one message after its one chunk: emit_table's, made again where needed
    else:
        done, free = _chunks_done(late, begin, ends, started, took, end)
        out = (chunks <= done[worker]) & ((late == "finish") | (ends[worker, chunks - 1] <= end))
        sent = np.bincount(worker[out], minlength=n)
        if late == "finish":    # a worker is free once its last message is out, too
            last = chunks == done[worker]
            np.maximum.at(free, worker[last], times[last])
        table = (worker, chunks)
    return Iteration(start, end, begin, ends, received, times[order[:m]], took, done, free, sent, table, times,
                     leave)


def _one_chunk(late: str, begin, compute, chunk_end, arrive, took, end: float):
    """``(done, free, sent)`` of an unchunked plan, one chunk and one message a worker: under ``finish`` the
    worker completes it and is free once its message is out; under ``abandon`` it drops it at the end, the share of
    its compute done by then counted as done, and sends nothing unless it had finished."""
    if late == "finish":
        done = took.astype(np.intp)
        return done, np.where(took, arrive, begin), done
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(compute > 0, np.clip((end - begin) / compute, 0.0, 1.0), 1.0)
    finished = chunk_end <= end
    share[finished] = 1.0    # (exactly: not 1 - 1e-16 from the subtraction's round-off)
    return (np.where(took, share, 0.0), np.where(took, np.minimum(chunk_end, end), begin),
            (took & finished).astype(np.intp))


def _chunks_done(late: str, begin, ends, started, took, end: float):
    """``(done, free)`` of a chunked plan: the chunks each worker computes (under ``finish`` all it started; under
    ``abandon`` the chunk in progress is finished, then the rest dropped) and when it can take the next plan."""
    if late == "finish":
        done = np.where(took, started, 0)
    else:
        # a chunk that starts at the very instant the iteration ends is started: the worker cannot know yet
        chunk_start = np.concatenate([begin[:, None], ends[:, :-1]], axis=1)
        done = np.where(took, np.minimum(started, (chunk_start <= end).sum(axis=1)), 0)
    return done, np.where(took, ends[np.arange(len(ends)), np.maximum(done - 1, 0)], begin)


KEYED_SORT_MIN = 8192   # workers: below, numpy's stable argsort of a row is the faster


def arrival_order(arrive: np.ndarray) -> np.ndarray:
    """Workers by arrival time along the last axis, ties by worker number: ``np.argsort(arrive, axis=-1,
    kind="stable")``, bit for bit, in about half its time (the sort is most of a timing-only run at large ``n``).

    Each time's bits (as an integer: monotone for times >= 0) get the worker number in their lowest bits, and the
    integers are sorted (numpy's SIMD sort). That orders by the time with its last ``log2(n)`` mantissa bits
    dropped, then by worker: the stable order, unless two times differ only in the dropped bits. Rows where two
    neighbours share the kept bits are checked (their times must not decrease) and sorted again the slow way if
    not; negative, NaN or non-float64 times, huge ``n`` and fewer than :data:`KEYED_SORT_MIN` workers take the
    slow way.
    """
    arrive = np.asarray(arrive)
    n = arrive.shape[-1] if arrive.ndim else 0
    bits = max(1, (n - 1).bit_length())
    if (arrive.dtype != np.float64 or arrive.ndim not in (1, 2) or n < KEYED_SORT_MIN or bits > 24
            or not np.all(arrive >= 0)):
        return np.argsort(arrive, axis=-1, kind="stable")
    low = np.uint64((1 << bits) - 1)
    keys = (arrive + 0.0).view(np.uint64) & ~low       # + 0.0: -0.0 as 0.0 (its sign bit would sort it last)
    keys |= np.arange(n, dtype=np.uint64)
    keys.sort(axis=-1)
    order = (keys & low).view(np.int64)                # < 2^24: the same numbers (astype copied at 20 ns each)
    keys &= ~low
    shared = keys[..., 1:] == keys[..., :-1]            # neighbours whose order the dropped bits might decide
    if shared.any():
        rows = np.atleast_2d(shared).any(axis=-1)
        order2 = np.atleast_2d(order)
        for r in np.flatnonzero(rows):
            _mend_runs(order2[r], np.atleast_2d(arrive)[r], np.atleast_2d(shared)[r])
    return order


def _mend_runs(order: np.ndarray, arrive: np.ndarray, shared: np.ndarray) -> None:
    """Put right, in place, the runs of ``order`` whose keys shared their kept bits (``shared[j]``: positions ``j``
    and ``j + 1``). Such a run is in worker order; a stable sort of its times gives the order by time, then worker.
    Runs of different kept bits are already in order. Only the runs are sorted, not the row: late in a long run the
    clock's absolute times are large, the dropped bits span more, and many rows have such runs."""
    times = arrive[order]
    if not np.any(times[1:] < times[:-1]):
        return
    edges = np.diff(np.concatenate(([0], shared.view(np.int8), [0])))
    for a, b in zip(np.flatnonzero(edges == 1).tolist(), (np.flatnonzero(edges == -1) + 1).tolist(), strict=True):
        run = order[a:b]
        order[a:b] = run[np.argsort(arrive[run], kind="stable")]


def emit_table(scheme: Scheme, plan: Plan, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every message a worker may send on ``plan``, as ``(worker, chunks)`` arrays: the workers' (increasing)
    ``scheme.emits``, worker by worker."""
    if type(scheme).emits is Scheme.emits:     # once, after the last chunk: no call per worker
        return np.arange(n), plan.chunk_counts
    emits = [scheme.emits(i, plan) for i in range(n)]
    worker = np.repeat(np.arange(n), [len(e) for e in emits])
    return worker, np.fromiter(itertools.chain.from_iterable(emits), dtype=np.intp, count=len(worker))


def _chunk_load(plan: Plan, n: int) -> np.ndarray:
    load = np.broadcast_to(np.asarray(plan.load, dtype=float), (n,))
    return load / plan.chunk_counts if plan.chunked else load


def chunk_ends(plan: Plan, begin: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(chunk_end, started)``: when each worker's chunks end (``inf`` past its last) and how many it starts before
    its local deadline ``plan.tau``."""
    counts = plan.chunk_counts
    j = np.arange(1, counts.max() + 1)[None, :]
    ends = np.where(j <= counts[:, None], begin[:, None] + compute[:, None] * j / counts[:, None], np.inf)
    # chunk j (0-based) starts at the end of chunk j - 1; it is started only before the local deadline
    starts = np.concatenate([begin[:, None], ends[:, :-1]], axis=1)
    with np.errstate(invalid="ignore"):      # a dead worker's begin is inf (inf - inf: it starts no chunk)
        may = (starts - begin[:, None] < plan.tau) | (j == 1)
    started = np.minimum(counts, np.cumprod(may, axis=1).sum(axis=1))
    return ends, started
