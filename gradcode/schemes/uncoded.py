"""Waiting for fewer workers, without coding: synchronous SGD, fastest-k, backup workers.

Each of the ``n`` workers computes one partition of the data (``n_parts = n``) and sends the plain sum of its
partial gradient. The master averages what it waits for, rescaled to the full gradient:
``g_hat = (n / m) * sum_{i in F} g_i`` for ``m = |F|`` responders (``docs/references.md#uncoded-schemes``).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, check_int
from ._base import Combined, Plan, Scheme, as_received, check_k


class _Averaging(Scheme):
    """Shared combine: the mean of the responders' gradients, scaled to the sum over all partitions; the stop rule
    of a fixed ``k``: the first ``k`` messages."""

    sums_messages = True
    k: int

    def stop_count(self) -> int:
        return self.k

    def record(self) -> dict:
        return {"k": self.k}

    def messages(self, partials, received, plan: Plan) -> np.ndarray:
        return partials[as_received(received).workers]   # worker i holds partition i alone

    def message_weights(self, received, plan: Plan) -> np.ndarray:
        """1 for each sender's own partition, 0 elsewhere."""
        weights = np.zeros(plan.n_parts)
        weights[as_received(received).workers] = 1.0
        return weights

    def combine_sum(self, total: np.ndarray, parts: int, plan: Plan) -> Combined:
        """The estimate from the plain sum of ``parts`` responders' messages: ``(n_parts / parts) * total``."""
        return Combined(total * (plan.n_parts / parts), method="average")


class Sync(_Averaging):
    """Synchronous SGD: wait for all ``n`` workers; iteration time ``T_(n:n)``."""

    name = "sync"
    description = "wait for all n workers (the baseline)"
    baseline = True
    timeline_rank = 0

    def __init__(self, n: int, *, batch: int | None = None):
        super().__init__(n, batch=batch)
        self.k = self.n
        self.reset()


class FastestK(_Averaging):
    """Fastest-k SGD ("ignore stragglers"): wait for the first ``k`` of ``n``, average them; iteration time
    ``T_(k:n)``, estimate from ``k`` partitions."""

    name = "fastest_k"
    description = "wait for the first k of n workers and average them"
    timeline_rank = 1

    def __init__(self, n: int, *, k: int, batch: int | None = None):
        super().__init__(n, batch=batch)
        self.k = check_k(k, self.n)
        self.reset()


class Backup(_Averaging):
    """Backup workers (Chen et al., "Revisiting Distributed Synchronous SGD") [paper]: ``n = k + b`` workers, update
    as soon as ``k`` gradients computed at the *current* step arrived; gradients of older steps are dropped by their
    iteration tag (the cluster never delivers them here), the update averages over ``k``.

    ``k`` is the number of fresh gradients awaited (the paper's ``N``), ``b`` the number of backups; give ``b`` or
    ``k`` (or both, with ``k + b = n``).
    """

    name = "backup"
    description = "k + b workers, update with the first k fresh gradients (stale ones dropped by tag)"
    timeline_rank = 4
    param_hints = {"N": "the paper's N (fresh gradients awaited) is k here, k = n - b"}

    def __init__(self, n: int, *, b: int | None = None, k: int | None = None, batch: int | None = None):
        super().__init__(n, batch=batch)
        if b is None and k is None:
            raise ConfigError("backup needs b, the number of backup workers (or k, the gradients to wait for)")
        if b is None:
            b = self.n - check_k(k, self.n)
        self.b = check_int("b", b, low=0, high=self.n - 1)
        self.k = self.n - self.b
        if k is not None and check_int("k", k) != self.k:
            raise ConfigError(f"backup: n = k + b must hold, got n = {self.n}, k = {k}, b = {self.b}")
        self.reset()

    def record(self) -> dict:
        return {"k": self.k, "b": self.b}
