"""DropCompute (Giladi et al., arXiv 2306.10598, NeurIPS 2023): each worker drops the rest of its compute once a
local timer passes ``tau``, then the usual All-Reduce follows. Decentralized: no master decides anything.

Every worker runs ``M`` micro-batches per step (gradient accumulation); worker ``i``'s micro-batch ``m`` is data
partition ``i*M + m`` of ``n*M``. *When* the worker looks at its timer matters (``docs/references.md#dropcompute``):

- ``official`` (the official code): before each micro-batch and again between its forward and backward pass
  (forward = ``forward_share`` of the micro-batch); a micro-batch interrupted after its forward is wasted;
- ``before_microbatch``: only before each micro-batch;
- ``idealized``: stops exactly at ``tau``, mid micro-batch (the reference table's upper bound);
- ``predictive`` (ours, not in the paper): at the official code's two checks the worker compares the *predicted end*
  of the micro-batch with ``tau`` instead of the present time: before it, ``now + mu_hat`` (``mu_hat`` the running
  mean of the micro-batch times it has measured this run; none yet: it starts); after its forward pass, which took
  ``f``, ``begin + f / forward_share`` (exact in the delay model, where a micro-batch splits by that constant share).
  It starts, or finishes, a micro-batch only if the prediction is ``<= tau``. A micro-batch it abandons after the
  forward counts in the mean with that predicted time: leaving the long ones out would bias the mean low (survivors
  only). Why the mean, and how this rule compares: ``docs/references.md#dropcompute``.

The summed gradient is divided by ``n*M`` (dropped micro-batches act as zeros) or, with ``normalize='computed'``,
by the number computed. No dropping in the first ``warmup`` steps. Each micro-batch is ``micro_load`` units of work
of the delay model, by default ``1/M``: a full step is one unit, the work of a sync worker's step, so a comparison
with sync, fastest-k or the codes is at equal work unless asked otherwise. Another ``micro_load`` (e.g. 1, ``M``
units a step, as in the DropCompute paper's own setting) is allowed, and the report says the work is unequal next
to the scheme (:attr:`DropCompute.work_note`).

``tau='auto'`` records every micro-batch time for
``record_steps`` steps after the warm-up, then picks, among ``candidates`` thresholds from the smallest to the largest
cumulative time, the one that maximises throughput ``(1 - drop rate) * (T_old / T_new)``. The official rule predicts
``T_new`` as if the micro-batch crossing ``tau`` were dropped for free (optimistic); ``auto_rule='replay'`` (the
default) instead replays the recorded times through this scheme's own timer checks, so the prediction is what the
workers will do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError, check_float, check_int
from ._base import Combined, DecentralizedScheme, Plan, Schedule, check_chunks

CHECKS = ("official", "before_microbatch", "idealized", "predictive")


def local_stop(micro: np.ndarray, tau: float, check: str = "official", forward_share: float = 1 / 3,
               history: tuple | None = None):
    """Micro-batches completed and the compute time of each worker under a local limit ``tau``.

    ``micro`` is ``(..., M)`` micro-batch times; returns ``(counts, times)`` of shape ``micro.shape[:-1]``.
    ``history`` (``predictive`` only) is ``(sum, count)`` of the micro-batch times each worker completed before this
    step, broadcastable to ``micro.shape[:-1]`` (``None``: no history).
    """
    micro = np.asarray(micro, dtype=float)
    M = micro.shape[-1]
    end = np.cumsum(micro, axis=-1)
    total = end[..., -1]
    if not np.isfinite(tau):
        return np.full(total.shape, M), total
    if check == "predictive":
        return predictive_stop(micro, tau, forward_share, history)
    begin = end - micro
    if check == "idealized":
        return (end <= tau).sum(axis=-1), np.minimum(total, tau)
    if check == "before_microbatch":
        crossed = begin >= tau
        stop_at = begin
    else:  # official: check before the micro-batch and after its forward pass
        crossed = begin + forward_share * micro >= tau
        stop_at = np.where(begin >= tau, begin, begin + forward_share * micro)
    # index of the first micro-batch at which the worker stops (M if never)
    first = np.where(crossed.any(axis=-1), crossed.argmax(axis=-1), M)
    idx = np.minimum(first, M - 1)[..., None]
    times = np.where(first < M, np.take_along_axis(stop_at, idx, axis=-1)[..., 0], total)
    return first, times


def predictive_stop(micro: np.ndarray, tau: float, forward_share: float, history: tuple | None = None):
    """The ``predictive`` rule (module docstring): ``(counts, times)`` as :func:`local_stop`'s.

    Micro-batch ``m`` begins at ``b`` (the previous one's end). The worker starts it only if
    ``b + mu_hat <= tau`` (``mu_hat``: the mean of its measured micro-batch times, ``history`` and this step's so
    far; none yet: it starts), and, after its forward pass, finishes it only if ``b + micro[m] <= tau`` (the end
    predicted from the forward, ``b + f / forward_share``); otherwise it stops at ``b`` or at ``b + f``.

    >>> counts, times = predictive_stop(np.array([[1.0, 1.0, 3.0, 1.0]]), 4.5, 1 / 3)
    >>> int(counts[0]), float(times[0])   # the third would end at 5 > 4.5: dropped after its forward, at 2 + 1
    (2, 3.0)
    """
    micro = np.asarray(micro, dtype=float)
    shape, M = micro.shape[:-1], micro.shape[-1]
    total, count = (np.zeros(shape), np.zeros(shape)) if history is None else (
        np.broadcast_to(np.asarray(history[0], dtype=float), shape).copy(),
        np.broadcast_to(np.asarray(history[1], dtype=float), shape).copy())
    end = np.cumsum(micro, axis=-1)
    begin = end - micro      # as the schedule computes it, so a stop at a chunk's start compares equal to it
    stop, kept = end[..., -1].copy(), np.zeros(shape, dtype=int)
    active = np.ones(shape, dtype=bool)
    for m in range(M):
        x, at = micro[..., m], begin[..., m]
        with np.errstate(invalid="ignore", divide="ignore"):
            guess = np.where(count > 0, total / np.maximum(count, 1), 0.0)
        start = active & (at + guess <= tau)             # start it?
        finish = start & (end[..., m] <= tau)             # after the forward: will it end in time?
        stop = np.where(active & ~start, at, np.where(start & ~finish, at + forward_share * x, stop))
        total += np.where(finish, x, 0.0)
        count += finish
        kept += finish
        active = finish
    return kept, stop


def measured_times(micro: np.ndarray, started: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(sum, count)`` of the first ``started`` micro-batch times of each worker: what each worker has measured (a
    micro-batch abandoned after its forward pass included, its time being ``f / forward_share``)."""
    mask = np.arange(micro.shape[-1]) < np.asarray(started)[..., None]
    return np.where(mask, micro, 0.0).sum(axis=-1), mask.sum(axis=-1)


def choose_tau(micro: np.ndarray, comm: np.ndarray, *, check: str, forward_share: float, candidates: int,
               rule: str, history: tuple | None = None) -> float:
    """The throughput-maximising ``tau`` from recorded micro-batch times ``micro`` (steps, n, M) and per-worker
    communication ``comm`` (steps, n). ``history``: the predictive rule's ``(sum, count)`` per worker, held fixed
    over the replayed steps."""
    steps, n, M = micro.shape
    end = np.cumsum(micro, axis=-1)
    old = np.mean(np.max(end[..., -1] + comm, axis=1))
    grid = np.linspace(end.min(), end.max(), candidates)
    best_tau, best_gain = float("inf"), 1.0
    for tau in grid:
        if rule == "official":
            kept = np.where(end < tau, end, 0.0)
            new_times, done = kept.max(axis=-1), (end < tau).sum(axis=-1)
        else:
            done, new_times = local_stop(micro, tau, check, forward_share, history)
        new = np.mean(np.max(new_times + comm, axis=1))
        gain = done.sum() / (steps * n * M) * old / new if new > 0 else 0.0
        if gain > best_gain:
            best_tau, best_gain = float(tau), gain
    return best_tau


@dataclass
class DropComputeState:
    tau: float
    recorded: list = field(default_factory=list)   # (micro (n, M), comm (n,)) of the recording window
    history: tuple | None = None     # predictive: (sum, count) of each worker's completed micro-batch times


class DropCompute(DecentralizedScheme):
    """DropCompute: ``M`` micro-batches per worker, local threshold ``tau`` (a number, ``"auto"`` or ``None`` for
    no limit), each micro-batch ``micro_load`` units of work (``None``: ``1/M``, so a step is a sync worker's one
    unit). See the module docstring for the timer semantics and the automatic threshold."""

    name = "dropcompute"
    description = "each worker stops computing at a local time threshold tau; All-Reduce, no master"
    adapts = ("tau",)
    timeline_rank = 6

    def __init__(self, n: int, *, M: int = 12, tau="auto", normalize: str = "total", warmup: int = 5,
                 record_steps: int = 40, candidates: int = 200, check: str = "official",
                 forward_share: float = 1 / 3, auto_rule: str = "replay", micro_load: float | None = None,
                 batch: int | None = None):
        super().__init__(n, batch=batch)
        self.M = check_int("M", M, low=1)
        check_chunks(self.name, self.n, self.M, "M")
        if tau == "auto" or tau is None:
            self.tau = tau
        else:
            self.tau = check_float("tau", tau, low=0.0, low_open=True)
        if normalize not in ("total", "computed"):
            raise ConfigError(f"dropcompute: normalize must be 'total' or 'computed', got {normalize!r}")
        if check not in CHECKS:
            raise ConfigError(f"dropcompute: check must be one of {', '.join(CHECKS)}, got {check!r}")
        if auto_rule not in ("replay", "official"):
            raise ConfigError(f"dropcompute: auto_rule must be 'replay' or 'official', got {auto_rule!r}")
        self.normalize, self.check, self.auto_rule = normalize, check, auto_rule
        self.warmup = check_int("warmup", warmup, low=0)
        self.record_steps = check_int("record_steps", record_steps, low=1)
        self.candidates = check_int("candidates", candidates, low=2)
        self.forward_share = check_float("forward_share", forward_share, low=0.0, high=1.0)
        if check == "predictive" and self.forward_share == 0:
            raise ConfigError("dropcompute: check = 'predictive' predicts the backward from the forward pass, so it "
                              "needs forward_share > 0 (accepted: 0 < forward_share <= 1)")
        # default: a full step is one unit of work, as a sync worker's (equal work)
        self.micro_load = 1.0 / self.M if micro_load is None else check_float("micro_load", micro_load, low=0.0,
                                                                                  low_open=True)
        self._parts = tuple(tuple(range(i * self.M, (i + 1) * self.M)) for i in range(self.n))
        self.reset()

    def _initial_state(self) -> DropComputeState:
        return DropComputeState(tau=self.tau if isinstance(self.tau, float) else float("inf"))

    def current_tau(self, t: int) -> float:
        return float("inf") if t < self.warmup else self.state.tau

    def plan(self, t: int) -> Plan:
        return Plan(t=t, parts=self._parts, n_parts=self.n * self.M, load=np.full(self.n, self.M * self.micro_load),
                    batch=self.batch, micro_batches=self.M, tau=self.current_tau(t))

    @property
    def work_note(self) -> str | None:
        """``M x micro_load`` units a step, said when it is not sync's one unit."""
        step = self.M * self.micro_load
        if math.isclose(step, 1.0, rel_tol=1e-9):
            return None
        return (f"unequal work: a step is M x micro_load = {self.M} x {self.micro_load:g} = {step:g} units of load "
                f"per worker, sync's is 1 (micro_load = 1/M = {1 / self.M:g} gives equal work)")

    @property
    def samples_per_unit(self) -> float | None:
        return None if self.batch is None else self.batch / self.micro_load

    def micro_times(self, delay, seed: int, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Iteration ``t``'s micro-batch times ``(n, M)`` and communication ``(n,)``: the delay model's draws, each
        micro-batch ``micro_load`` units of work. Both clusters call this, so they see the same times."""
        micro, comm_time = delay.sample_micro(seed, t, self.n, self.M)
        return micro[0] * self.micro_load, comm_time[0]

    def schedule(self, micro: np.ndarray, comm_time: np.ndarray, tau: float) -> Schedule:
        """The timer rule of ``check`` (:func:`local_stop`) as a schedule: a micro-batch the timer interrupts (after
        its forward pass, or at ``tau`` when idealized) was started, but its work is dropped. Leading axes of
        ``micro`` (..., n, M) and ``comm_time`` (..., n) are kept, so many steps can be scheduled at once."""
        kept, stop = local_stop(micro, tau, self.check, self.forward_share, self.state.history)
        return Schedule.of_stops(micro, kept, stop, comm_time, self.M)

    def combine_sum(self, total: np.ndarray, parts: int, plan: Plan) -> Combined:
        """The update direction from the All-Reduced gradient sum of ``parts`` micro-batches: ``'total'``, the sum as
        is (a dropped micro-batch counts as a zero gradient); ``'computed'``, rescaled by ``n*M / parts``."""
        scale = 1.0 if self.normalize == "total" else (plan.n_parts / parts if parts else 0.0)
        return Combined(np.asarray(total) * scale, method=self.normalize)

    def observe(self, t: int, micro: np.ndarray, comm_time: np.ndarray) -> None:
        """Record the step's micro-batch times (the automatic threshold's window), and choose ``tau`` after it.

        Every rank draws the same times (same seed) and calls this, so every rank chooses the same ``tau``. The
        predictive rule first adds the micro-batch times each worker measured this step to its history.
        """
        if self.check == "predictive":
            self.remember(micro, self.schedule(micro, comm_time, self.current_tau(t)).started)
        if self.tau != "auto" or not (self.warmup <= t < self.warmup + self.record_steps):
            return
        self.state.recorded.append((np.array(micro, dtype=float), np.array(comm_time, dtype=float)))
        if len(self.state.recorded) == self.record_steps:
            micro_all = np.stack([m for m, _ in self.state.recorded])
            comm_all = np.stack([c for _, c in self.state.recorded])
            self.state.tau = choose_tau(micro_all, comm_all, check=self.check, forward_share=self.forward_share,
                                        candidates=self.candidates, rule=self.auto_rule, history=self.state.history)
            self.state.recorded = []

    def replay(self, micro: np.ndarray, comm_time: np.ndarray, tau: float) -> Schedule:
        """The schedules of consecutive steps ``micro`` (steps, n, M) under one ``tau``, stacked: what a run with
        that fixed ``tau`` does. The predictive rule's history goes on from step to step (from the current state,
        restored afterwards); the other rules have none, so this is :meth:`schedule` of all steps at once."""
        if self.check != "predictive":
            return self.schedule(micro, comm_time, tau)
        saved, steps = self.state.history, []
        try:
            for m, c in zip(micro, comm_time, strict=True):
                steps.append(self.schedule(m, c, tau))
                self.remember(m, steps[-1].started)
        finally:
            self.state.history = saved
        return Schedule(*(np.stack([getattr(s, f) for s in steps])
                          for f in ("chunk_end", "started", "kept", "stop", "comm_time")))

    def remember(self, micro: np.ndarray, started: np.ndarray) -> None:
        """Add the first ``started`` micro-batch times of each worker (those it measured) to its history, the
        predictive rule's running mean. :meth:`observe` calls it; a replay of many steps calls it after each."""
        done, count = measured_times(micro, started)
        old = self.state.history or (0.0, 0)
        self.state.history = (old[0] + done, old[1] + count)

    def record(self) -> dict:
        return {"k": self.n, "tau": self.state.tau, "M": self.M}
