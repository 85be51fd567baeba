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

import numpy as np

from .errors import ConfigError, check_float

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
