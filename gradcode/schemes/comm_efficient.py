"""The communication-efficient gradient code as a scheme (Ye and Abbe, ICML 2018;
:mod:`gradcode.codes.comm_efficient`): worker ``i`` computes ``s + m`` partitions and sends ``d / m`` numbers; the
master stops at the first ``n - s`` messages (any ``n - s`` decode) and interpolates. Against a code of load ``s + 1``
(``coded``) it computes ``m - 1`` partitions more a worker and sends ``m`` times fewer bytes: the code to try where
links, not workers, are slow (``docs/network.md``).
"""

from __future__ import annotations

import numpy as np

from ..codes.comm_efficient import CommEfficientCode
from ..errors import ConfigError, check_workers
from ._base import Combined, Plan, Scheme, as_received, senders


class CommEfficient(Scheme):
    """``s`` stragglers tolerated, messages of ``d / m`` (``m`` must divide ``d``), load ``s + m``."""

    name = "comm_efficient"
    description = "Ye-Abbe communication-efficient gradient code: load s + m, messages of d / m, any n - s decode"
    exact = True
    timeline_rank = 3

    def __init__(self, n: int, *, s: int, m: int = 2, batch: int | None = None):
        super().__init__(n, batch=batch)
        self.code = CommEfficientCode(n, s, m)
        self.s, self.m = self.code.s, self.code.m
        self._load = np.full(n, float(s + m))

    def plan(self, t: int) -> Plan:
        return Plan(t=t, parts=tuple(self.code.support), n_parts=self.n, load=self._load, batch=self.batch)

    def message(self, i: int, c: int, partials, plan: Plan) -> np.ndarray:
        return self.code.message(i, partials)

    def messages(self, partials, received, plan: Plan) -> np.ndarray:
        return np.stack([self.code.message(i, partials[list(self.code.support[i])])
                         for i in as_received(received).workers.tolist()])

    def stop_count(self) -> int:
        return self.n - self.s

    def combine(self, messages, received, plan: Plan) -> Combined:
        F = check_workers(senders(received), self.n).tolist()
        gradient, residual = self.code.decode(messages, F)
        return Combined(gradient, residual=residual, method="exact")

    def message_size(self, d: int) -> int:
        """Real numbers per message: ``d / m``."""
        if d % self.m:
            raise ConfigError(f"comm_efficient: m = {self.m} must divide the model size d = {d} (a message is d / m "
                              f"numbers); take an m that divides {d}")
        return d // self.m

    def record(self) -> dict:
        return {"k": self.n - self.s, "s": self.s, "m": self.m}
