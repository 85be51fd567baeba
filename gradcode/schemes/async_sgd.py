"""Asynchronous SGD: the master applies each worker's gradient as it arrives and sends that worker the new model.

No worker waits for another. Update ``u`` (0-based) takes the model ``w_u`` to ``w_{u+1} = w_u - eta_u g_i``, with
``g_i`` the gradient worker ``i`` computed on the model it was last sent, ``w_{v_i}``; its **staleness** is
``tau_u = u - v_i``, the updates applied since that model (``docs/references.md#asynchronous-sgd``). With every
worker always in flight the mean staleness is ``n - 1``: ``n`` gradients are computed at once, one is applied per
update.

- ``step = "constant"``: ``eta_u = lr`` (Downpour / Hogwild-style asynchronous SGD);
- ``step = "staleness"``: ``eta_u = lr / max(tau_u, 1)``, the staleness-dependent learning rate of Zhang, Gupta,
  Lian, Liu, "Staleness-aware Async-SGD for Distributed Deep Learning", IJCAI 2016 (applied to the gradient, so the
  optimizer sees ``g_i / max(tau_u, 1)``);
- ``max_staleness = s``: bounded staleness, stale-synchronous style: no gradient is applied more than ``s`` updates
  late. A gradient that has arrived is applied only if the others still in flight can all be applied within the
  bound afterwards (earliest deadline first: the ``k``-th oldest, on model ``v_(k)``, needs ``u + k <= v_(k) + s``);
  otherwise its worker waits for the new model until the oldest gradients have come and been applied. All ``n``
  workers start on the same model, so ``s >= n - 1``; ``s = n - 1`` lets no worker lap another.

Each worker holds partition ``i`` (as sync does) and each gradient is rescaled to the full gradient, ``n_parts g_i``
(fastest-k's estimate at ``k = 1``). The cluster asks the scheme when a gradient may be applied (the stop rule over
the messages in arrival order: the first applicable one) and tells it which worker it applied
(:meth:`AsyncSGD.accept`) and who got which model (:meth:`AsyncSGD.hand_out`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ConfigError, check_int
from ._base import Combined, Plan, Scheme, as_received

STEPS = ("constant", "staleness")


class AsyncSGD(Scheme):
    """Asynchronous SGD (see the module's docstring): one update per gradient, in arrival order."""

    name = "async_sgd"
    description = "apply each worker's gradient as it arrives, send that worker the new model (no waiting)"
    asynchronous = True
    sums_messages = True
    timeline_rank = 5
    param_hints = {"staleness": "max_staleness bounds the staleness; step = \"staleness\" divides the step by it"}

    def __init__(self, n: int, *, max_staleness: int | None = None, step: str = "constant",
                 batch: int | None = None):
        super().__init__(n, batch=batch)
        if max_staleness is not None:
            max_staleness = check_int("max_staleness", max_staleness, low=0)
            if max_staleness < self.n - 1:
                raise ConfigError(f"async_sgd: max_staleness must be at least n - 1 = {self.n - 1} (all n workers "
                                  "start on the same model, so the last of the first n gradients is n - 1 "
                                  f"updates stale), got {max_staleness}")
        if step not in STEPS:
            raise ConfigError(f"async_sgd: step must be one of {', '.join(STEPS)}, got {step!r}")
        self.max_staleness, self.step = max_staleness, step
        self.reset()

    def _initial_state(self) -> dict[str, Any]:
        # version[i]: the update number of the model worker i computes on (all start on w_0)
        return {"version": np.zeros(self.n, dtype=np.int64), "worker": None, "staleness": None}

    def effective_batch(self) -> int | None:
        return self.batch       # one worker's mini-batch per update

    # --- the stop rule: the first gradient that may be applied ---------------------------------------------------
    def applicable(self, i: int, u: int) -> bool:
        """May worker ``i``'s gradient be update ``u``? Always without a bound; with ``max_staleness = s`` only if
        the others in flight can all follow within it: sorted by model, ``u + k <= v_(k) + s`` for ``k = 1, ...``."""
        if self.max_staleness is None:
            return True
        others = np.sort(np.delete(self.state["version"], i))
        return bool(np.all(u + np.arange(1, self.n) <= others + self.max_staleness))

    def stop_index(self, received, plan: Plan) -> int | None:
        workers = as_received(received).workers
        for m, i in enumerate(workers.tolist(), start=1):
            if self.applicable(i, plan.t):
                return m
        return None

    def done(self, received, plan: Plan) -> bool:
        return self.stop_index(received, plan) is not None

    # --- what the cluster tells the scheme ----------------------------------------------------------------------
    def accept(self, i: int, u: int) -> int:
        """Worker ``i``'s gradient is update ``u``: its staleness ``u - v_i`` (recorded, and the step's divisor)."""
        staleness = u - int(self.state["version"][i])
        self.state.update(worker=i, staleness=staleness)
        return staleness

    def hand_out(self, i: int, version: int) -> None:
        """Worker ``i`` now computes on the model ``w_version``."""
        self.state["version"][i] = version

    # --- combine ------------------------------------------------------------------------------------------------
    def messages(self, partials, received, plan: Plan) -> np.ndarray:
        return partials[as_received(received).workers]   # worker i holds partition i alone

    def combine_sum(self, total: np.ndarray, parts: int, plan: Plan) -> Combined:
        """``n_parts / parts * total``, divided by ``max(staleness, 1)`` under ``step = "staleness"``."""
        scale = plan.n_parts / parts
        if self.step == "staleness":
            scale /= max(self.state["staleness"] or 0, 1)
        return Combined(total * scale, method="average" if self.step == "constant" else "staleness")

    def record(self) -> dict[str, Any]:
        return {"worker": self.state["worker"], "staleness": self.state["staleness"]}
