"""Adaptive fastest-k, and adaptive k together with an adaptive computation load.

Both start by waiting for few workers (fast, noisy iterations) and wait for more once training stalls. Stalling is
detected by a Pflug-type stationarity test (``docs/references.md#uncoded-schemes``, [recalled]; the project's
reading): after a burn-in, accumulate the inner products ``<g_t, g_{t-1}>`` of consecutive gradient estimates.
While the iterate still travels they are positive on average; near the noise floor consecutive noisy gradients point
in opposing directions and the running sum turns negative. When it does, the test fires and resets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError, check_float, check_int
from ._base import Combined, Plan, check_k
from .uncoded import _Averaging


@dataclass
class PflugState:
    """Running state of the stationarity test."""

    count: int = 0
    total: float = 0.0
    previous: np.ndarray | None = None


@dataclass(frozen=True)
class PflugTest:
    """Fires when ``sum_{t > burn_in} <g_t, g_{t-1}>`` drops below ``-threshold`` (then the caller resets)."""

    burn_in: int = 10
    threshold: float = 0.0

    def update(self, state: PflugState, g: np.ndarray) -> bool:
        if state.previous is not None:
            state.count += 1
            if state.count > self.burn_in:
                state.total += float(np.dot(g, state.previous))
        state.previous = np.array(g, copy=True)
        return state.count > self.burn_in and state.total < -self.threshold


@dataclass
class AdaptiveKState:
    k: int
    test: PflugState = field(default_factory=PflugState)
    switches: list[int] = field(default_factory=list)


class AdaptiveK(_Averaging):
    """Adaptive fastest-k (Kas Hanna, Bitar, Parag, Dasari, El Rouayheb, arXiv 2002.11005): wait for the first ``k``
    responses; start at ``k0`` and raise ``k`` by ``step`` (up to ``k_max``) each time the stationarity test fires.
    """

    name = "adaptive_k"
    description = "fastest-k whose k grows when a Pflug stationarity test fires"
    adapts = ("k",)
    timeline_rank = 5

    def __init__(self, n: int, *, k0: int = 1, step: int = 1, k_max: int | None = None, burn_in: int = 10,
                 threshold: float = 0.0, batch: int | None = None):
        super().__init__(n, batch=batch)
        self.k0 = check_k(k0, self.n, "k0")
        self.step = check_int("step", step, low=1)
        self.k_max = check_k(k_max if k_max is not None else self.n, self.n, "k_max")
        if self.k_max < self.k0:
            raise ConfigError(f"adaptive_k: k_max = {self.k_max} must be >= k0 = {self.k0}")
        self.test = PflugTest(check_int("burn_in", burn_in, low=0), check_float("threshold", threshold, low=0.0))
        self.reset()

    def _initial_state(self) -> AdaptiveKState:
        return AdaptiveKState(k=self.k0)

    def stop_count(self) -> int:
        return self.state.k

    def adapt(self, t: int, combined: Combined, *, elapsed: float) -> None:
        if self.test.update(self.state.test, combined.gradient) and self.state.k < self.k_max:
            self.state.k = min(self.state.k + self.step, self.k_max)
            self.state.switches.append(t)
            self.state.test = PflugState()

    def record(self) -> dict:
        return {"k": self.state.k}


@dataclass
class AdaptiveKLoadState:
    stage: int
    k: int
    b: int
    test: PflugState = field(default_factory=PflugState)


class AdaptiveKLoad(_Averaging):
    """Adaptive ``k`` and per-worker load ``b`` (Egger, Kas Hanna, Bitar, arXiv 2304.08589); the project's reading
    [derived]: the noise floor depends on the effective batch ``k*b`` while the work per iteration is ``n*b``.

    Stages ``B_1 < B_2 < ...`` of effective batch; in stage ``s`` the pair ``(k, b)`` with ``k*b >= B_s`` that
    minimises the expected iteration time ``E[T_(k:n)]`` at load ``b`` (from the delay model's order statistics) is
    used; the stationarity test moves to the next stage. ``max_batch`` is the largest per-worker batch (the load unit
    of the delay model is one partition at ``max_batch`` samples, so a worker computing a mini-batch of ``b`` samples
    has load ``b/max_batch``); the record's ``batch`` is the current ``b``. Default stages: ``n*max_batch/16,
    n*max_batch/8, ..., n*max_batch``.
    """

    name = "adaptive_k_load"
    description = "adapts k and the per-worker batch together, staged by effective batch k*b"
    param_hints = {"batch": "adaptive_k_load chooses the mini-batch itself; its largest per-worker batch is max_batch"}
    adapts = ("k", "load")
    timeline_rank = 3

    def __init__(self, n: int, *, max_batch: int = 16, stages: list[int] | None = None, burn_in: int = 10,
                 threshold: float = 0.0, delay=None):
        super().__init__(n)
        self.max_batch = check_int("max_batch", max_batch, low=1)
        full = self.n * self.max_batch
        if stages is None:
            stages = sorted({max(1, full // 2**e) for e in range(4, -1, -1)})
        if isinstance(stages, (str, bytes, dict)) or not isinstance(stages, (list, tuple)) or not stages:
            raise ConfigError("adaptive_k_load: stages must be a non-empty list of increasing effective batches "
                              f"(integers in 1..n*max_batch = {full}), got {stages!r}")
        self.stages = [check_int("stages[]", x, low=1, high=full) for x in stages]
        if self.stages != sorted(set(self.stages)):
            raise ConfigError(f"adaptive_k_load: stages must be strictly increasing effective batches, got {stages}")
        self.test = PflugTest(check_int("burn_in", burn_in, low=0), check_float("threshold", threshold, low=0.0))
        self.delay = None
        self._choices: dict[int, tuple[int, int]] = {}
        if delay is not None:
            self.bind(delay=delay)
        self.reset()

    @property
    def samples_per_unit(self) -> int:
        """One unit of load is one partition at ``max_batch`` samples."""
        return self.max_batch

    def bind(self, *, delay=None) -> None:
        if delay is None:
            return
        from ..delays import make_delay

        self.delay = make_delay(delay)
        self._choices = {B: self._choose(B) for B in self.stages}

    def _choose(self, B: int) -> tuple[int, int]:
        """``argmin_{k*b >= B} E[T_(k:n)](load b/max_batch)`` over per-worker batches ``b = 1..max_batch``.

        Only ``b = ceil(B / k)``, ``k = 1..n``, can win (smallest b first on a tie): the time grows with the load, so
        of the batches that need the same ``k`` the smallest is best. ``n`` candidates, not ``max_batch``."""
        best = None
        for b in sorted({-(-B // k) for k in range(1, self.n + 1)}):      # ceil(B / k), exact for big ints
            if b > self.max_batch:
                continue
            k = math.ceil(B / b)
            if k > self.n:
                continue
            cost = self.delay.expected_order_statistic(k, self.n, load=b / self.max_batch)
            if best is None or cost < best[0] - 1e-12:
                best = (cost, k, b)
        assert best is not None  # b = max_batch always gives k <= n since B <= n * max_batch
        return best[1], best[2]

    def _initial_state(self) -> AdaptiveKLoadState:
        k, b = self._choices.get(self.stages[0], (self.n, self.max_batch))
        return AdaptiveKLoadState(stage=0, k=k, b=b)

    def plan(self, t: int) -> Plan:
        if self.delay is None:
            raise ConfigError("adaptive_k_load needs the delay model to choose (k, b): pass delay=... or bind() it")
        load = np.full(self.n, self.state.b / self.max_batch)
        return Plan(t=t, parts=self._own_parts, n_parts=self.n, load=load, batch=self.state.b)

    def stop_count(self) -> int:
        return self.state.k

    def effective_batch(self) -> int:
        """``k * b`` samples: its default step is the workload's for that batch (the full batch's step is too
        large for its first stages' few samples, and the loss blows up before it comes back)."""
        return self.state.k * self.state.b

    def adapt(self, t: int, combined: Combined, *, elapsed: float) -> None:
        st = self.state
        if self.test.update(st.test, combined.gradient) and st.stage + 1 < len(self.stages):
            st.stage += 1
            st.k, st.b = self._choices[self.stages[st.stage]]
            st.test = PflugState()

    def record(self) -> dict:
        return {"k": self.state.k, "batch": self.state.b, "stage": self.state.stage,
                "effective_batch": self.state.k * self.state.b}
