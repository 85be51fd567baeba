"""Gradient coding as a scheme: any code of :func:`gradcode.make_code` driven by the master.

Worker ``i`` computes the partitions in ``code.support(i)`` and sends ``y_i = sum_j B[i, j] g_j``
(:meth:`gradcode.codes._base.Code.encode_row`). The stop rule:

- an exact code stops at the first arrival after which the responders are decodable (for MDS-like codes that is
  the ``(n - s)``-th arrival, later only if the decode is ill-conditioned; fractional repetition often earlier);
- an approximate code stops at ``wait`` responders (default ``n - s``) or at ``deadline`` after the start.

The combine decodes with the code's decoder (cached per responder set) and reports the residual
``||B_F^T a - 1|| / sqrt(n_parts)`` in the record. A decode never returns a wrong gradient silently: with
``method='auto'`` an ill-conditioned or incomplete set falls back to optimal weights and the record says
``method = 'optimal'``.
"""

from __future__ import annotations

import numpy as np

from ..codes import Code, make_code
from ..errors import ConfigError, check_float, check_workers
from ._base import Combined, Plan, Scheme, check_k


class Coded(Scheme):
    """Gradient coding with the code ``code`` (a registry name or a code object whose ``n`` equals ``n``)."""

    name = "coded"
    description = "a gradient code: stop when the responders decode (exact) or at `wait` / a deadline (approximate)"
    forwards_params = True
    timeline_rank = 2

    def __init__(self, n: int, *, code, s: int | None = None, wait: int | None = None, deadline: float | None = None,
                 method: str = "auto", seed: int = 0, batch: int | None = None, **code_params):
        super().__init__(n, batch=batch)
        if isinstance(code, Code):
            if code.n != self.n:
                raise ConfigError(f"coded: the code has n = {code.n} workers but the cluster has n = {self.n}")
            if s is not None and s != code.s:
                raise ConfigError(f"coded: s = {s} given but the code object has s = {code.s}")
            self.code = code
        else:
            if s is None:
                raise ConfigError(f"coded: give s, the number of stragglers the code {code!r} tolerates")
            self.code = make_code(code, n=self.n, s=s, seed=seed, **code_params)
        if method not in ("auto", "exact", "optimal", "one_step"):
            raise ConfigError(f"coded: unknown decoding method {method!r}; accepted: auto, exact, optimal, one_step")
        self.method = method
        s = self.code.s
        self.wait = check_k(wait, self.n, "wait") if wait is not None else self.n - s
        self.deadline = float("inf") if deadline is None else check_float("deadline", deadline, low=0.0,
                                                                           low_open=True)
        supports = tuple(self.code.support(i) for i in range(self.n))
        self._plan_parts = supports
        self._plan_load = np.array([len(p) for p in supports], dtype=float)
        self.reset()

    @property
    def exact(self) -> bool:
        return self.code.exact and self.method != "one_step" and self.method != "optimal"

    def plan(self, t: int) -> Plan:
        return Plan(t=t, parts=self._plan_parts, n_parts=self.code.n_parts, load=self._plan_load, batch=self.batch,
                    deadline=self.deadline)

    def message(self, i: int, partials, plan: Plan) -> np.ndarray:
        return self.code.encode_row(i, partials)

    def messages(self, partials, responders, plan: Plan) -> np.ndarray:
        return self.code.encode(partials)[np.asarray(responders)]

    def stop_count(self) -> int | None:
        """``wait`` for approximate codes; ``n - s`` for MDS-like exact codes (the theoretical stop, used by the
        timing-only simulator, where nothing is decoded; :meth:`stop_index` also verifies the decode)."""
        if not self.exact:
            return self.wait
        return None if self.code.early_decoding else self.n - self.code.s

    def done(self, responders) -> bool:
        if not self.exact:
            return len(responders) >= self.wait
        return self.code.is_decodable(list(responders))

    def stop_index(self, order) -> int | None:
        if not self.exact or self.code.early_decoding:
            return super().stop_index(order)
        # MDS-like: fewer than n - s never decode; more are only needed when the decode is ill-conditioned.
        for m in range(self.n - self.code.s, len(order) + 1):
            if self.code.is_decodable(list(order[:m])):
                return m
        return None

    def combine(self, messages, responders, plan: Plan) -> Combined:
        responders = check_workers(responders, self.n).tolist()
        dec = self.code.decoding(responders, self.method)
        estimate = self.code.combine(messages, responders, self.method)
        return Combined(estimate, residual=dec.residual, method=dec.method)

    def message_size(self, d: int) -> int:
        """Real numbers per message: complex codes send two per entry."""
        return 2 * d if self.code.is_complex else d

    def record(self) -> dict:
        return {"k": self.wait if not self.exact else self.n - self.code.s, "code": self.code.name, "s": self.code.s}

    def __repr__(self) -> str:
        return f"Coded({self.code!r}, method={self.method!r})"
