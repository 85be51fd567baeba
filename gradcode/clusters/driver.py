"""What every cluster does the same way: the loop, the stop policy, the record of an iteration, evaluation.

A cluster is "how time passes and how messages move": the simulated cluster (:mod:`gradcode.clusters.sim`) advances
a virtual clock, the MPI cluster (:mod:`mpi_runtime`) reads the wall clock and moves bytes. Both subclass
:class:`Driver`, which runs one loop (``docs/design.md#clusters``)::

    plan -> the cluster executes it (gather / all_reduce) -> stop policy -> combine -> w -= lr * g -> adapt ->
    evaluate -> record -> write -> run finished? -> summary

so a stop rule changes here, once, and a record field in :mod:`.records` (``docs/design.md#records``). The virtual
clock's arithmetic of one iteration (:func:`gradcode.clusters.iteration.iteration`, :func:`all_reduce_schedule`) is
public: the MPI cluster computes its ideal, zero-overhead times with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ..deaths import deaths_summary, unmet_text
from ..errors import GradcodeError
from ..network import Links, bind
from ..optim import Optimizer
from ..schemes._base import Combined, Plan, Received, Schedule, Scheme, as_received
from ..spec import RunOptions
from .iteration import Iteration, emit_table
from .records import HELDOUT_KEYS, build_record, summarize, work_fields


class SimulationError(GradcodeError):
    """A run that cannot go on (for example, a scheme that waits for a worker that never answers)."""


# --- run rules ------------------------------------------------------------------------------------------------
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

    def can_hold(self, plan: Plan, able: np.ndarray) -> bool:
        """Can the stop rule still hold if only the workers ``able`` (a boolean mask) send, each every message its
        plan lets it send? A plan with a deadline ends with any one message; an exact code must decode (its
        fallback, all that arrive, is for messages late for ever, not for the dead)."""
        worker, chunks = emit_table(self.scheme, plan, self.scheme.n)
        keep = able[worker]
        received = Received(worker[keep], None if not plan.chunked else chunks[keep])
        if not len(received):
            return False
        return math.isfinite(plan.deadline) or self.scheme.done(received, plan)

    @staticmethod
    def out_of_time(received, elapsed: float, plan: Plan) -> bool:
        """Has the plan's deadline passed, ``elapsed`` after the start, with at least one message?"""
        return bool(len(received)) and elapsed >= plan.deadline


# --- a decentralized step on the virtual clock ---------------------------------------------------------------
def all_reduce_schedule(scheme, delay, seed: int, t: int, plan: Plan,
                        links: Links | None = None) -> tuple[np.ndarray, Schedule]:
    """Step ``t``'s chunk times and the scheme's schedule for them; an error if the All-Reduce can never end. With
    ``links`` the schedule's ``exchange`` is the All-Reduce's time on them (:meth:`Links.all_reduce`)."""
    micro, comm = scheme.micro_times(delay, seed, t)
    schedule = scheme.schedule(micro, comm, plan.tau)
    if not np.all(np.isfinite(schedule.ready)):
        silent = np.flatnonzero(~np.isfinite(schedule.ready)).tolist()
        raise SimulationError(f"{scheme.name}: All-Reduce cannot finish; workers {silent} never answer")
    if links is not None:
        schedule = replace(schedule, exchange=links.all_reduce(scheme.message_bytes(links.d)))
    return micro, schedule


def gather_record(scheme: Scheme, plan: Plan, it: Iteration, start: float, end: float, *, ideal_end: float,
                  combined: Combined | None, loss: float | None, grad_error: float | None, measured: dict[str, Any],
                  state: dict[str, Any] | None, metrics: dict[str, Any], d: int | None,
                  unit: float | None = None) -> dict[str, Any]:
    """A master iteration's record: the work each worker computed and delivered (``wasted``: what no combine
    used), per worker where the run trains (``d``, the model size; a timing-only run may have a huge ``n``).
    ``unit``: the whole load every worker carries, when the caller knows it (:func:`whole_unit`, found once for many
    iterations), else found here.
    ``messages`` counts the plans taken up, a streaming scheme's the messages sent, whose list (``received``) and
    count per worker (``worker_messages``, ``floats``) it adds."""
    if d is not None or plan.chunked or it.done.dtype.kind == "f":
        unit = None
    elif unit is None:
        unit = whole_unit(plan.load)
    if unit is not None:   # whole units add up exactly in any order: counts times the unit, without the arrays
        computed, used = unit * int(np.count_nonzero(it.done)), unit * len(it.received)
    else:
        computed_w, used_w = it.computed(plan), it.used(scheme, plan)
        computed, used = float(computed_w.sum()), float(used_w.sum())
    fields = {}
    if d is not None:
        fields = work_fields(computed_w, used_w, it.sent if scheme.streams else None, scheme.message_size(d))
    if scheme.streams:
        messages = int(it.sent.sum())
        measured = {"received": np.stack([it.senders, it.counts], axis=1), **fields, **measured}
    else:
        messages = int(it.started.sum())
        measured = {**measured, **fields}
    return build_record(scheme, plan.t, start, end, ideal_end=ideal_end, responders=it.responders, load=plan.load,
                        messages=messages, computed=computed, wasted=computed - used, combined=combined, loss=loss,
                        grad_error=grad_error, measured={"used": used, **measured}, state=state, metrics=metrics)


def whole_unit(loads) -> float | None:
    """The load every worker carries when all carry the same whole number of units (uncoded schemes: 1), else None.
    Sums of such loads are exact in any order while they stay below 2^53, so a count times the unit is the array
    sum, to the bit."""
    loads = np.asarray(loads, dtype=float)
    first = float(loads.flat[0]) if loads.size else math.nan
    if not (first.is_integer() and abs(first) * loads.shape[-1] < 2.0 ** 53 and np.all(loads == first)):
        return None
    return first


# --- the driver -----------------------------------------------------------------------------------------------
class Driver:
    """The loop of every cluster. A subclass says how time passes and how messages move: :meth:`gather` runs a
    master/worker iteration and :meth:`all_reduce` a decentralized step, each ending with :meth:`conclude_gather` /
    :meth:`conclude_all_reduce` (update, adapt, evaluate, record); it may override :meth:`emit` (where records go),
    :meth:`finished` and :meth:`summary_extras`.

    ``options`` are the run's (:class:`gradcode.spec.RunOptions`, the same object on both clusters); ``w`` is the
    model (``None`` for a timing-only run); ``recording`` is False in a process that takes part but keeps no records
    (an All-Reduce peer other than rank 0): it updates its model but evaluates nothing.
    """

    recording = True
    resolution = 0.0    # ideal times up to this (record time units) have no overhead ratio (overhead_ratios)

    def __init__(self, scheme: Scheme, workload, options: RunOptions):
        self.scheme, self.workload, self.options = scheme, workload, options
        self.n = scheme.n
        self.iterations, self.loss_every = options.iterations, options.loss_every
        self.eval_every = options.loss_every if options.eval_every is None else options.eval_every
        self.target_loss, self.time_budget = options.target_loss, options.time_budget
        self.target_accuracy = options.target_accuracy
        self.lr = default_lr(options.lr, workload)
        self.lr_given = options.lr is not None     # else a scheme with small batches steps by them (_update)
        self.optimizer = Optimizer(options.optimizer, options.momentum)
        self.w = None if workload is None else np.array(workload.init_params(), dtype=float)
        self.heldout = workload is not None and getattr(workload, "X_test", None) is not None
        self.policy = StopPolicy(scheme)
        self.records: list[dict[str, Any]] = []
        # the [network]'s links (None: none), bound to this run's workers, model size and time unit
        self.links = bind(options.network, self.n, None if self.w is None else self.w.size, options.time_scale)
        # the dead workers, each with the iteration it was found dead in, and what the cluster knows of each death
        self.dead: dict[int, int] = {}
        self.dead_notes: dict[int, dict[str, Any]] = {}

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
        summary.update(deaths_summary(self.dead, self.dead_notes))
        return summary

    def deaths_unmet(self, t: int, plan: Plan, heard=()) -> str | None:
        """Why iteration ``t`` cannot end now that workers died (:func:`gradcode.deaths.unmet_text`), or None while
        the stop rule can still hold with the living and the workers ``heard`` from already."""
        if not self.dead:
            return None
        able = np.ones(self.n, dtype=bool)
        able[list(self.dead)] = False
        able[list(heard)] = True
        if self.policy.can_hold(plan, able):
            return None
        return unmet_text(self.scheme, t, self.dead, self.dead_notes)

    def summary_extras(self) -> dict[str, Any]:
        """What the cluster adds to the summary (counts of what it measured)."""
        return {}

    # --- what the cluster does ------------------------------------------------------------------------------------
    def gather(self, t: int, plan: Plan) -> dict[str, Any] | None:
        raise NotImplementedError(f"{type(self).__name__} runs no master/worker scheme")

    def all_reduce(self, t: int, plan: Plan) -> dict[str, Any] | None:
        raise NotImplementedError(f"{type(self).__name__} runs no decentralized scheme")

    # --- the common tail of an iteration --------------------------------------------------------------------------
    def conclude_gather(self, t: int, plan: Plan, start: float, end: float, *, ideal_end: float, it: Iteration,
                        combined: Combined | None, truth: np.ndarray | None = None,
                        **measured) -> dict[str, Any] | None:
        """After a master iteration ``it`` (its messages received, the work counted chunk by chunk): update, adapt,
        evaluate, and the record (:func:`gather_record`)."""
        head = self._update_and_adapt(t, plan, start, end, combined, truth)
        if head is None:
            return None
        loss, grad_error, metrics, state = head

        def fill() -> dict[str, Any]:
            return gather_record(self.scheme, plan, it, start, end, ideal_end=ideal_end, combined=combined,
                                 loss=loss, grad_error=grad_error, measured=measured, state=state, metrics=metrics,
                                 d=None if self.w is None else self.w.size)
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
