"""What every cluster does the same way: the loop, the stop policy, the arithmetic of an iteration, evaluation.

A cluster is "how time passes and how messages move": the simulated cluster (:mod:`gradcode.clusters.sim`) advances
a virtual clock, the MPI cluster (:mod:`mpi_runtime`) reads the wall clock and moves bytes. Both subclass
:class:`Driver`, which runs one loop (``docs/design.md#clusters``)::

    plan -> the cluster executes it (gather / all_reduce) -> stop policy -> combine -> w -= lr * g -> adapt ->
    evaluate -> record -> write -> run finished? -> summary

so a stop rule changes here, once, and a record field in :mod:`.records` (``docs/design.md#records``). The virtual
clock's arithmetic of one iteration (:func:`master_iteration`, :func:`stream_iteration`,
:func:`all_reduce_schedule`) is public: the MPI cluster computes its ideal, zero-overhead times with it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import GradcodeError
from ..optim import Optimizer
from ..schemes._base import Combined, Plan, Received, Schedule, Scheme, as_received
from .records import HELDOUT_KEYS, build_record, summarize, work_fields


class SimulationError(GradcodeError):
    """A run that cannot go on (for example, a scheme that waits for a worker that never answers)."""


# --- run rules ------------------------------------------------------------------------------------------------
# What a worker still busy with an older plan does when a newer one is issued (docs/design.md#chunked-workers):
# ``finish`` completes the work in hand; ``abandon`` drops it at once (a chunked plan: after the chunk in progress);
# ``between_chunks`` drops it where a real worker can look up from its work: between two chunks of a chunked plan,
# while an unchunked plan is one piece of work, finished.
LATE_WORKERS = ("finish", "abandon", "between_chunks")


def late_rule(late: str, plan: Plan) -> str:
    """The rule ``plan``'s late workers follow under ``late_workers = late``: ``finish`` or ``abandon``
    (``between_chunks`` is ``abandon`` for a chunked plan, ``finish`` for the others)."""
    if late == "between_chunks":
        return "abandon" if plan.chunked else "finish"
    return late


def default_lr(lr: float | None, workload) -> float:
    """The step size: ``lr`` if given, else the workload's own (0 for a timing-only run)."""
    if lr is not None:
        return lr
    return workload.lr if workload is not None else 0.0


def evaluates_loss(t: int, iterations: int, loss_every: int) -> bool:
    """Is the full loss evaluated after iteration ``t``? Every ``loss_every``-th iteration and the last (both
    clusters use this rule, so their records have losses at the same iterations)."""
    return t % loss_every == 0 or t == iterations - 1


def run_finished(rec: dict[str, Any] | None, target_loss: float | None, time_budget: float | None,
                 target_accuracy: float | None = None) -> bool:
    """Does the run stop after this record: time budget spent, target loss reached, or target held-out accuracy
    reached (on an iteration that evaluated it, ``eval_every``)?"""
    if rec is None:
        return False
    if time_budget is not None and rec["end"] >= time_budget:
        return True
    if (target_accuracy is not None and rec.get("test_accuracy") is not None
            and rec["test_accuracy"] >= target_accuracy):
        return True
    return target_loss is not None and rec["loss"] is not None and rec["loss"] <= target_loss


def relative_error(estimate: np.ndarray, truth: np.ndarray) -> float:
    """``||estimate - truth|| / ||truth||`` (0 when the truth is 0): the records' ``grad_error``."""
    norm = np.linalg.norm(truth)
    return float(np.linalg.norm(estimate - truth) / norm) if norm > 0 else 0.0


# --- the stop policy ------------------------------------------------------------------------------------------
class StopPolicy:
    """When a master iteration ends: when the scheme's stop rule holds (``done`` / ``stop_index``), or at the plan's
    deadline once a message has arrived. An exact scheme whose messages that ever arrive cannot decode takes them
    all (the decoder falls back and the record's ``method`` says so); any other unmeetable rule is an error.

    ``received`` are the messages ``(worker, chunks)`` in arrival order (:class:`~gradcode.schemes._base.Received`;
    a list of workers: one message each). :meth:`count` is the virtual clock's form (every arrival known in
    advance), :meth:`holds` and :meth:`out_of_time` the wall clock's (arrivals one at a time, with the fallback set
    the virtual clock found).
    """

    def __init__(self, scheme: Scheme):
        self.scheme = scheme

    def count(self, received, arrive: np.ndarray | None, start: float, plan: Plan) -> int:
        """How many first messages of ``received`` end the iteration; ``arrive`` their arrival times (in the same
        order; needed only when the plan has a deadline)."""
        m = self.scheme.stop_index(received, plan)
        if math.isfinite(plan.deadline):
            in_time = int(np.searchsorted(arrive, start + plan.deadline, side="right"))
            m = max(1, min(m, in_time)) if m is not None else max(1, in_time)
            m = min(m, len(received))
        if m is None or m == 0:
            if len(received) and self.scheme.exact:
                return len(received)  # everything that ever arrives: the decoder falls back and says so
            silent = sorted(set(range(self.scheme.n)) - set(as_received(received).workers.tolist()))
            if silent:
                raise SimulationError(f"{self.scheme.name}: the stop rule cannot be met; workers {silent} never "
                                      "answer (infinite delay)")
            raise SimulationError(f"{self.scheme.name}: the stop rule cannot be met; the messages that ever "
                                  f"arrive ({len(received)}) never suffice (infinite delays?)")
        return m

    def fallback(self, received, plan: Plan) -> set | None:
        """The messages the virtual clock ended with, if they are an exact scheme's fallback (not decodable)."""
        if self.scheme.exact and not self.scheme.done(received, plan):
            return set(as_received(received))
        return None

    def holds(self, received, plan: Plan, fallback: set | None) -> bool:
        """May the iteration end with these messages (in arrival order)?"""
        if self.scheme.done(received, plan):
            return True
        return fallback is not None and fallback <= set(as_received(received))

    @staticmethod
    def out_of_time(received, elapsed: float, plan: Plan) -> bool:
        """Has the plan's deadline passed, ``elapsed`` after the start, with at least one message?"""
        return bool(len(received)) and elapsed >= plan.deadline


# --- the virtual clock's arithmetic of one iteration ----------------------------------------------------------
@dataclass
class Arrivals:
    """One master iteration on the virtual clock: worker ``i`` begins at ``begin[i]``, its message arrives at
    ``arrive[i]``; the first ``responders`` end it at ``end``; ``started`` workers took up the plan before then."""

    start: float
    end: float
    begin: np.ndarray
    arrive: np.ndarray
    responders: np.ndarray
    started: np.ndarray


def master_iteration(policy: StopPolicy, plan: Plan, start: float, begin: np.ndarray, compute: np.ndarray,
                     comm: np.ndarray) -> Arrivals:
    """Arrivals ``begin + compute + comm`` (the delay model's draws), ended by the stop policy."""
    arrive = begin + compute + comm
    order = arrival_order(arrive)
    finite = np.isfinite(arrive)
    if not finite.all():      # (usually all are: then no gather of n times)
        order = order[finite[order]]
    deadline = arrive[order] if math.isfinite(plan.deadline) else None
    responders = order[:policy.count(Received(order), deadline, start, plan)]   # a view: build_record copies it
    end = float(arrive[responders[-1]])
    return Arrivals(start, end, begin, arrive, responders, took_up(begin, arrive, end))


KEYED_SORT_MIN = 8192   # workers: below, numpy's stable argsort of a row is faster (n = 100: 2 us against 10 us)


def arrival_order(arrive: np.ndarray) -> np.ndarray:
    """Workers by arrival time along the last axis, ties by worker number: ``np.argsort(arrive, axis=-1,
    kind="stable")``, bit for bit, in about half its time (profile of issue 30: the stable sort was 60-70% of a
    timing-only run at ``n = 10,000``).

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
    Runs of different kept bits are already in order. (Late in a long run the clock's absolute times are large, so
    the dropped bits span more: this used to re-sort the whole row, 55 rows of 1,000 at n = 10,000.)"""
    times = arrive[order]
    if not np.any(times[1:] < times[:-1]):
        return
    edges = np.diff(np.concatenate(([0], shared.view(np.int8), [0])))
    for a, b in zip(np.flatnonzero(edges == 1).tolist(), (np.flatnonzero(edges == -1) + 1).tolist(), strict=True):
        run = order[a:b]
        order[a:b] = run[np.argsort(arrive[run], kind="stable")]


def used_load(load, responders, n: int) -> np.ndarray:
    """Each worker's load that the combine used: its plan's load for a responder, 0 for the others."""
    responders = np.asarray(responders, dtype=int)
    used = np.zeros(n)
    used[responders] = np.broadcast_to(np.asarray(load, dtype=float), (n,))[responders]
    return used


def work_done(plan: Plan, begin: np.ndarray, compute: np.ndarray, end: float, started: np.ndarray,
              late: str) -> np.ndarray:
    """Load each worker computed on a one-message plan: all of it under ``finish`` (it completes the plan), what it
    did by ``end`` under ``abandon`` (it drops the rest at once: ``load * (end - begin) / compute``, capped at 1)."""
    load = np.broadcast_to(np.asarray(plan.load, dtype=float), begin.shape)
    if late == "finish":
        return np.where(started, load, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(compute > 0, np.clip((end - begin) / compute, 0.0, 1.0), 1.0)
    share[begin + compute <= end] = 1.0    # finished (exactly: not 1 - 1e-16 from the subtraction's round-off)
    return np.where(started, load * share, 0.0)


def took_up(begin: np.ndarray, arrive: np.ndarray, end: float) -> np.ndarray:
    """The workers that took up the plan before the iteration ended at ``end``: those that began before it, and
    those whose message had arrived by then. The second term matters at zero (or tiny, absorbed by round-off)
    delays, where everyone begins and answers at the very instant the iteration ends: ``begin < end`` alone would
    count no message and no work, and the responders' load as negative waste."""
    return (begin < end) | (arrive <= end)


# --- chunked, streaming workers on the virtual clock ------------------------------------------------------------
@dataclass
class Stream:
    """One iteration of a streaming scheme (``scheme.streams``) on the virtual clock.

    Worker ``i`` runs its ``L_i`` chunks at one speed through the iteration (the delay model's draw ``compute_i``
    for the whole plan, split in proportion to the chunks' loads), so chunk ``j`` ends at ``chunk_end[i, j] = begin_i
    + compute_i (j + 1) / L_i``; it starts chunk ``j >= 1`` only while ``chunk_end[i, j - 1] - begin_i < tau``
    (its local deadline). Its message after ``c`` chunks (``c`` in ``scheme.emits``) arrives ``comm_i`` after chunk
    ``c`` ends (sending overlaps the next chunk). ``received`` are the messages, in arrival order, that ended the
    iteration at ``end``; ``done[i]`` the chunks worker ``i`` computes on this plan (all it started under
    ``finish``; under ``abandon`` those begun by ``end``: the chunk in progress is finished, then the worker
    drops the rest), ``free[i]`` when it can take the next plan; ``table`` every message the plan lets a worker
    send (:func:`emit_table`), when the cluster has it at hand.
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
        return self.senders[np.sort(np.unique(self.senders, return_index=True)[1])]

    def computed(self, plan: Plan) -> np.ndarray:
        """Load units each worker computed on this plan."""
        return self.done * _chunk_load(plan, len(self.done))

    def used(self, scheme: Scheme, plan: Plan) -> np.ndarray:
        """Load units each worker delivered in the received messages (a chunk delivered twice counts twice)."""
        n = len(self.done)
        who, c = self.senders, self.counts
        if not len(who):
            return np.zeros(n)
        # a message after c chunks carries those since its worker's previous emit: looked up in the table of every
        # (worker, emit), sorted by worker then chunks, all messages at once
        worker, chunks = self.table if self.table is not None else emit_table(scheme, plan, n)
        span = int(max(chunks.max(initial=0), c.max())) + 1
        at = np.searchsorted(worker * span + chunks, who * span + c)
        previous = np.where((at > 0) & (worker[at - 1] == who), chunks[at - 1], 0)
        return np.bincount(who, weights=(c - previous) * _chunk_load(plan, n)[who], minlength=n)


def emit_table(scheme: Scheme, plan: Plan, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every message a worker may send on ``plan``, as ``(worker, chunks)`` arrays: the workers' (increasing)
    ``scheme.emits``, worker by worker."""
    emits = [scheme.emits(i, plan) for i in range(n)]
    worker = np.repeat(np.arange(n), [len(e) for e in emits])
    return worker, np.fromiter(itertools.chain.from_iterable(emits), dtype=np.intp, count=len(worker))


def _chunk_load(plan: Plan, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(plan.load, dtype=float), (n,)) / plan.chunk_counts


def chunk_ends(plan: Plan, begin: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(chunk_end, started)``: when each worker's chunks end (``inf`` past its last) and how many it starts before
    its local deadline ``plan.tau``."""
    counts = plan.chunk_counts
    j = np.arange(1, counts.max() + 1)[None, :]
    ends = np.where(j <= counts[:, None], begin[:, None] + compute[:, None] * j / counts[:, None], np.inf)
    # chunk j (0-based) starts at the end of chunk j - 1; it is started only before the local deadline
    starts = np.concatenate([begin[:, None], ends[:, :-1]], axis=1)
    may = (starts - begin[:, None] < plan.tau) | (j == 1)
    started = np.minimum(counts, np.cumprod(may, axis=1).sum(axis=1))
    return ends, started


def stream_iteration(policy: StopPolicy, plan: Plan, start: float, begin: np.ndarray, compute: np.ndarray,
                     comm: np.ndarray, late: str) -> Stream:
    """The messages of every worker's chunks, ended by the stop policy (see :class:`Stream`)."""
    scheme = policy.scheme
    ends, started = chunk_ends(plan, begin, compute)
    # every message (worker, chunks) a worker sends on the chunks it starts, and its arrival (in numpy: ~400
    # messages an iteration at n = 100)
    table = emit_table(scheme, plan, len(begin))
    worker, chunks = table
    keep = chunks <= started[worker]
    worker, chunks = worker[keep], chunks[keep]
    times = ends[worker, chunks - 1] + comm[worker]
    order = np.argsort(times, kind="stable")
    order = order[np.isfinite(times[order])]
    arrived = Received(worker[order], chunks[order])
    m = policy.count(arrived, times[order], start, plan)
    received, end = arrived[:m], float(times[order[m - 1]])
    chunk_start = np.concatenate([begin[:, None], ends[:, :-1]], axis=1)
    took = (begin < end) | (ends[:, 0] <= end)
    if late == "finish":
        done = np.where(took, started, 0)
        last = ends[np.arange(len(begin)), np.maximum(done - 1, 0)]
        free = np.where(took, last, begin)
    else:
        # a chunk that starts at the very instant the iteration ends is started: the worker cannot know yet
        done = np.where(took, np.minimum(started, (chunk_start <= end).sum(axis=1)), 0)
        free = np.where(took, ends[np.arange(len(begin)), np.maximum(done - 1, 0)], begin)
    out = (chunks <= done[worker]) & ((late == "finish") | (ends[worker, chunks - 1] <= end))
    sent = np.bincount(worker[out], minlength=len(begin))
    if late == "finish":    # a worker is free once its last message is out, too
        last = chunks == done[worker]
        np.maximum.at(free, worker[last], times[last])
    return Stream(start, end, begin, ends, received, times[order[:m]], took, done, free, sent, table)


def all_reduce_schedule(scheme, delay, seed: int, t: int, plan: Plan) -> tuple[np.ndarray, Schedule]:
    """Step ``t``'s chunk times and the scheme's schedule for them; an error if the All-Reduce can never end."""
    micro, comm = scheme.micro_times(delay, seed, t)
    schedule = scheme.schedule(micro, comm, plan.tau)
    if not np.all(np.isfinite(schedule.ready)):
        silent = np.flatnonzero(~np.isfinite(schedule.ready)).tolist()
        raise SimulationError(f"{scheme.name}: All-Reduce cannot finish; workers {silent} never answer")
    return micro, schedule


# --- the driver -----------------------------------------------------------------------------------------------
class Driver:
    """The loop of every cluster. A subclass says how time passes and how messages move: :meth:`gather` runs a
    master/worker iteration and :meth:`all_reduce` a decentralized step, each ending with :meth:`conclude_gather` /
    :meth:`conclude_all_reduce` (update, adapt, evaluate, record); it may override :meth:`emit` (where records go),
    :meth:`finished` and :meth:`summary_extras`.

    ``w`` is the model (``None`` for a timing-only run); ``recording`` is False in a process that takes part but
    keeps no records (an All-Reduce peer other than rank 0): it updates its model but evaluates nothing.
    """

    recording = True
    resolution = 0.0    # ideal times up to this (record time units) have no overhead ratio (overhead_ratios)

    def __init__(self, scheme: Scheme, workload, *, iterations: int, lr: float | None = None, loss_every: int = 1,
                 target_loss: float | None = None, time_budget: float | None = None, optimizer: str = "sgd",
                 momentum: float = 0.9, eval_every: int | None = None, target_accuracy: float | None = None):
        self.scheme, self.workload = scheme, workload
        self.n = scheme.n
        self.iterations, self.loss_every = iterations, loss_every
        self.eval_every = loss_every if eval_every is None else eval_every
        self.target_loss, self.time_budget = target_loss, time_budget
        self.target_accuracy = target_accuracy
        self.lr = default_lr(lr, workload)
        self.lr_given = lr is not None     # else a scheme with small batches steps by them (_update)
        self.optimizer = Optimizer(optimizer, momentum)
        self.w = None if workload is None else np.array(workload.init_params(), dtype=float)
        self.heldout = workload is not None and getattr(workload, "X_test", None) is not None
        self.policy = StopPolicy(scheme)
        self.records: list[dict[str, Any]] = []

    # --- the loop -----------------------------------------------------------------------------------------------
    def run(self) -> list[dict[str, Any]]:
        """Iterations until ``iterations`` are done, the time budget is spent or the target loss is reached."""
        for t in range(self.iterations):
            if self.finished(self.step(t)):
                break
        return self.records

    def step(self, t: int) -> dict[str, Any] | None:
        """One iteration: the plan, executed by the cluster; its record (None where nothing is recorded)."""
        plan = self.scheme.plan(t)
        rec = self.all_reduce(t, plan) if self.scheme.decentralized else self.gather(t, plan)
        if rec is not None:
            self.records.append(rec)
            self.emit(rec)
        return rec

    def finished(self, rec: dict[str, Any] | None) -> bool:
        return run_finished(rec, self.target_loss, self.time_budget, self.target_accuracy)

    def emit(self, rec: dict[str, Any]) -> None:
        """A finished record leaves the loop (to a file, a callback, ...)."""

    def summary(self) -> dict[str, Any]:
        summary = summarize(self.records, target_loss=self.target_loss, target_accuracy=self.target_accuracy,
                            resolution=self.resolution)
        if self.records:
            summary.update(self.summary_extras())
        return summary

    def summary_extras(self) -> dict[str, Any]:
        """What the cluster adds to the summary (counts of what it measured)."""
        return {}

    # --- what the cluster does ------------------------------------------------------------------------------------
    def gather(self, t: int, plan: Plan) -> dict[str, Any] | None:
        raise NotImplementedError(f"{type(self).__name__} runs no master/worker scheme")

    def all_reduce(self, t: int, plan: Plan) -> dict[str, Any] | None:
        raise NotImplementedError(f"{type(self).__name__} runs no decentralized scheme")

    # --- the common tail of an iteration --------------------------------------------------------------------------
    def conclude_gather(self, t: int, plan: Plan, start: float, end: float, *, ideal_end: float, responders,
                        messages: int, computed: float, combined: Combined | None, truth: np.ndarray | None = None,
                        worker_computed: np.ndarray | None = None, **measured) -> dict[str, Any] | None:
        """After a master iteration: update, adapt, evaluate, and the record. ``computed`` is the load the workers
        took up (``messages`` plans); what the responders did not carry was ``wasted``."""
        head = self._update_and_adapt(t, plan, start, end, combined, truth)
        if head is None:
            return None
        loss, grad_error, metrics, state = head

        def fill() -> dict[str, Any]:
            used_w = used_load(plan.load, responders, self.n)
            total = computed if worker_computed is None else float(np.sum(worker_computed))
            if self.w is not None:   # per worker only where n is small enough to list (a training run)
                measured.update(work_fields(worker_computed, used_w, None, self.scheme.message_size(self.w.size)))
            used = float(used_w.sum())
            return build_record(self.scheme, t, start, end, ideal_end=ideal_end, responders=responders,
                                load=plan.load, messages=messages, computed=total, wasted=total - used,
                                combined=combined, loss=loss, grad_error=grad_error,
                                measured={"used": used, **measured}, state=state, metrics=metrics)
        return self.record_later({"end": end, "loss": loss, **metrics}, fill)

    def conclude_stream(self, t: int, plan: Plan, start: float, end: float, *, ideal_end: float, stream: Stream,
                        combined: Combined | None, truth: np.ndarray | None = None, **measured):
        """After a streamed master iteration: as :meth:`conclude_gather`, with the work counted chunk by chunk
        (``worker_computed``, ``worker_used``) and the messages each worker sent (``worker_messages``, ``floats``)."""
        head = self._update_and_adapt(t, plan, start, end, combined, truth)
        if head is None:
            return None
        loss, grad_error, metrics, state = head

        def fill() -> dict[str, Any]:
            computed_w, used_w = stream.computed(plan), stream.used(self.scheme, plan)
            fields = {}          # timing only: totals alone (n may be large; no model size, so no floats)
            if self.w is not None:
                fields = work_fields(computed_w, used_w, stream.sent, self.scheme.message_size(self.w.size))
            computed, used = float(computed_w.sum()), float(used_w.sum())
            return build_record(self.scheme, t, start, end, ideal_end=ideal_end, responders=stream.responders,
                                load=plan.load, messages=int(stream.sent.sum()), computed=computed,
                                wasted=computed - used, combined=combined, loss=loss, grad_error=grad_error,
                                measured={"used": used, "received": np.stack([stream.senders, stream.counts], axis=1),
                                          **fields, **measured}, state=state, metrics=metrics)
        return self.record_later({"end": end, "loss": loss, **metrics}, fill)

    def record_later(self, head: dict[str, Any], fill: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The record of a master iteration: ``fill()``. ``head`` holds what the loop needs at once (:meth:`finished`:
        ``end``, ``loss``, the held-out metrics); a cluster whose next iteration waits for this (the MPI master, whose
        next plans go out after it) may return ``head`` now and make it whole later with
        :func:`complete_record`. By default the whole record at once."""
        return fill()

    def _update_and_adapt(self, t: int, plan: Plan, start: float, end: float, combined: Combined | None,
                          truth: np.ndarray | None):
        """A master iteration's update and adapt; ``(loss, grad_error, metrics, the scheme's state)`` for its record,
        None when nothing is recorded."""
        loss, grad_error, metrics = self._update(t, plan, combined, truth)
        if combined is not None:
            self.scheme.adapt(t, combined, elapsed=end - start)
        if not self.recording:
            return None
        return loss, grad_error, metrics, self.scheme.record()

    def conclude_all_reduce(self, t: int, plan: Plan, start: float, end: float, *, ideal_end: float,
                            schedule: Schedule, micro: np.ndarray, combined: Combined | None,
                            truth: np.ndarray | None = None, **measured) -> dict[str, Any] | None:
        """After a decentralized step: update, observe, evaluate, and the record (every worker responds; its load
        is what it kept, ``drop_rate`` the share of chunks dropped)."""
        loss, grad_error, metrics = self._update(t, plan, combined, truth)
        self.scheme.observe(t, micro, schedule.comm_time)
        if not self.recording:
            return None
        units = schedule.units(plan.load)
        if self.w is not None:
            measured.update(work_fields(units, units, None, 0))
        return build_record(self.scheme, t, start, end, ideal_end=ideal_end, responders=np.arange(self.n),
                            load=units, messages=self.n, computed=float(units.sum()), wasted=0.0, combined=combined,
                            loss=loss, grad_error=grad_error,
                            measured={"used": float(units.sum()), "drop_rate": schedule.drop_rate, **measured},
                            metrics=metrics)

    def _update(self, t: int, plan: Plan, combined: Combined | None, truth: np.ndarray | None):
        """The optimizer's step ``w -= lr * s`` (:mod:`gradcode.optim`; ``s = g`` for plain gradient descent);
        returns ``(loss, grad_error, held-out metrics)`` ((None, None, {}) in a timing-only run)."""
        if combined is None:
            return None, None, {}
        batch = None if self.lr_given else self.scheme.effective_batch()
        if batch is not None:      # the default step of this iteration's mini-batch (Workload.batch_lr)
            self.lr = self.workload.batch_lr(batch)
        g = combined.gradient
        step = self.optimizer.direction(g)
        result = self.evaluate(t, plan, g, truth, step)
        self.w -= self.lr * step     # in place: no new model-sized array per iteration
        return result

    def evaluate(self, t: int, plan: Plan, g: np.ndarray, truth: np.ndarray | None, step: np.ndarray | None = None):
        """``(loss after the update, relative error of g, held-out metrics)``: the loss on evaluation iterations
        (:func:`evaluates_loss`); the gradient error whenever the cluster had the full gradient ``truth`` for free,
        else on evaluation iterations (it costs a gradient over all partitions); the held-out metrics
        (``test_loss``, ``test_accuracy``, ``test_auc``: ``Workload.heldout``) every ``eval_every`` iterations and
        the last, None in between, absent if the workload holds out nothing. A cluster keeps this off its clock."""
        if not self.recording:
            return None, None, {}
        step = g if step is None else step
        with_loss = evaluates_loss(t, self.iterations, self.loss_every)
        if truth is None and with_loss:
            truth = self.workload.gradients(self.w, t, range(plan.n_parts), plan.n_parts, plan.batch).sum(axis=0)
        grad_error = None if truth is None else relative_error(g, truth)
        with_test = self.heldout and evaluates_loss(t, self.iterations, self.eval_every)
        after = self.w - self.lr * step if with_loss or with_test else None
        metrics = {}
        if self.heldout:
            metrics = dict.fromkeys(HELDOUT_KEYS)
            if with_test:
                metrics.update(self.workload.heldout(after))
        return (float(self.workload.loss(after)) if with_loss else None), grad_error, metrics
