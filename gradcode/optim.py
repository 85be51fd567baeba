"""The optimizer step both clusters take with the combined gradient ``g`` (``[run] optimizer``, ``momentum``).

The driver (:class:`gradcode.clusters.driver.Driver`) keeps the optimizer's state, so the simulated and the MPI cluster
(whose master and All-Reduce ranks run the same driver) take the same steps. With step size ``eta`` and momentum
``mu`` (``v_0 = 0``):

- ``sgd`` (plain gradient descent on whatever ``g`` the scheme combined): ``w <- w - eta g``;
- ``momentum`` (heavy ball, in the form PyTorch uses): ``v <- mu v + g``, ``w <- w - eta v``;
- ``nesterov`` (Nesterov's accelerated gradient with constant ``mu``, in the same form):
  ``v <- mu v + g``, ``w <- w - eta (g + mu v)``. With ``y_t`` the stored parameters this is Sutskever et al.'s
  (2013) look-ahead form of ``x_{t+1} = y_t - eta grad F(y_t)``, ``y_{t+1} = x_{t+1} + mu (x_{t+1} - x_t)``:
  the gradient is taken at the extrapolated point, which is why it is "accelerated". (The Tandon et al. code uses
  accelerated gradient descent; it is this update with a constant ``mu``.)

``g`` is the gradient the scheme delivered: a decoded sum, a fastest-k estimate, a mini-batch estimate.

    >>> import numpy as np
    >>> opt = Optimizer("momentum", momentum=0.5)
    >>> w = np.zeros(1)
    >>> for _ in range(2):
    ...     w -= 0.1 * opt.direction(np.ones(1))
    >>> w.tolist()            # steps 0.1 * 1 and 0.1 * (0.5 + 1)
    [-0.25]
"""

from __future__ import annotations

import math

import numpy as np

from .errors import ConfigError, check_float, check_int

OPTIMIZERS = {"sgd": "w -= lr * g", "momentum": "v = mu v + g; w -= lr * v",
              "nesterov": "v = mu v + g; w -= lr * (g + mu v)"}


class Optimizer:
    """One of :data:`OPTIMIZERS` and its state (the velocity ``v``); :meth:`direction` gives the vector ``s`` of
    the step ``w <- w - lr * s`` for the gradient ``g`` and advances the state."""

    def __init__(self, name: str = "sgd", momentum: float = 0.9):
        if not isinstance(name, str) or name not in OPTIMIZERS:
            raise ConfigError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")
        momentum = check_float("momentum", momentum, low=0.0)
        if momentum >= 1.0:
            raise ConfigError(f"momentum must be in [0, 1), got {momentum}")
        self.name, self.momentum = name, momentum
        self.velocity: np.ndarray | None = None

    def direction(self, g: np.ndarray) -> np.ndarray:
        """The step direction ``s`` for gradient ``g`` (the parameters move by ``-lr * s``)."""
        if self.name == "sgd":
            return g
        if self.velocity is None:
            self.velocity = np.zeros_like(g, dtype=float)
        self.velocity *= self.momentum
        self.velocity += g
        return self.velocity.copy() if self.name == "momentum" else g + self.momentum * self.velocity


# --- learning-rate schedules ([run] lr_schedule) -------------------------------------------------------------
LR_SCHEDULES = {"constant": "lr", "step": "lr * factor^floor(t / every)",
                "cosine": "lr * (1 + cos(pi t / iterations)) / 2", "1/t": "lr / (1 + t / t0)"}
_SCHEDULE_PARAMS = {"constant": {}, "step": {"factor": 0.5, "every": None}, "cosine": {}, "1/t": {"t0": None}}


class LRSchedule:
    """The step size at iteration ``t`` (from 0) of a run of ``iterations``: ``lr * multiplier(t)``, one of
    :data:`LR_SCHEDULES`. ``every`` defaults to ``iterations // 3`` (at least 1), ``t0`` to ``iterations / 10``,
    ``factor`` to 0.5. Given as a name (``lr_schedule = "cosine"``) or an inline table with its parameters
    (``lr_schedule = {name = "step", factor = 0.1, every = 50}``); checked when made.

        >>> [LRSchedule({"name": "step", "factor": 0.5, "every": 2}).multiplier(t, 10) for t in range(5)]
        [1.0, 1.0, 0.5, 0.5, 0.25]
        >>> LRSchedule("1/t").multiplier(10, 100)
        0.5
    """

    def __init__(self, spec="constant"):
        table = {"name": spec} if isinstance(spec, str) else dict(spec) if isinstance(spec, dict) else None
        accepted = ", ".join(map(repr, LR_SCHEDULES))
        if table is None or table.get("name") not in LR_SCHEDULES:
            raise ConfigError(f"lr_schedule = {spec!r}: accepted: {accepted}, or an inline table "
                              "{name = \"step\", factor = 0.5, every = 100} / {name = \"1/t\", t0 = 10}")
        self.name = table.pop("name")
        known = _SCHEDULE_PARAMS[self.name]
        unknown = sorted(set(table) - set(known))
        if unknown:
            raise ConfigError(f"lr_schedule {self.name!r}: unknown parameter(s) {', '.join(unknown)}; accepted: "
                              f"{', '.join(known) or 'none'}")
        self.factor = check_float("lr_schedule factor", table.get("factor", 0.5), low=0.0, low_open=True)
        every, t0 = table.get("every"), table.get("t0")
        self.every = None if every is None else check_int("lr_schedule every", every, low=1)
        self.t0 = None if t0 is None else check_float("lr_schedule t0", t0, low=0.0, low_open=True)
        self.spec = {"name": self.name, **table}

    def multiplier(self, t: int, iterations: int) -> float:
        """``lr(t) / lr`` (the formula of :data:`LR_SCHEDULES`)."""
        if self.name == "step":
            every = self.every if self.every is not None else max(1, iterations // 3)
            return self.factor ** (t // every)
        if self.name == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * t / iterations))
        if self.name == "1/t":
            t0 = self.t0 if self.t0 is not None else iterations / 10
            return 1.0 / (1.0 + t / t0)
        return 1.0

    def __eq__(self, other):
        return isinstance(other, LRSchedule) and other.spec == self.spec

    def __hash__(self):
        return hash(repr(sorted(self.spec.items())))

    def __repr__(self):
        return f"LRSchedule({self.spec!r})"
