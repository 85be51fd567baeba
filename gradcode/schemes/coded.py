"""Gradient coding as a scheme: any code of :func:`gradcode.make_code` driven by the master.

Worker ``i`` computes the partitions in ``code.support(i)`` and sends ``y_i = sum_j B[i, j] g_j``
(:meth:`gradcode.codes._base.Code.encode_row`). The stop rule:

- an exact code stops at the first arrival after which the responders are decodable, on both clusters (the MPI
  master asks :meth:`Coded.done` after every arrival, the virtual clock :meth:`Coded.stop_index` on the whole
  order). That is the ``(n - s)``-th arrival for most orders, later when that decode is ill-conditioned, earlier
  when fewer responders already decode (fractional repetition often; cyclic MDS for some sets, e.g. workers
  ``{0, 2}`` at ``n = 4, s = 1``: ``code.early_decoding``);
- an approximate code stops at ``wait`` responders (default ``n - s``) or at ``deadline`` after the start.

The combine decodes with the code's decoder (cached per responder set) and reports the residual
``||B_F^T a - 1|| / sqrt(n_parts)`` in the record. For a code decoded by least squares the stop rule's own solve
(refined normal equations, to decide that the set decodes) is that decode, handed to the code's cache when the
solution is unique (:meth:`~gradcode.codes._base.Code.remember_exact`): one solve per iteration, not two. A
decode never returns a wrong gradient silently: with ``method='auto'`` an ill-conditioned or incomplete set falls
back to least-squares weights, with a warning, and the record says ``method = 'fallback'``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from ..codes import Code, Decoding, make_code
from ..errors import ConfigError, check_float, check_workers
from ._base import Combined, Plan, Scheme, as_received, check_k, senders, shortest_prefix


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
        self._holders = _holders(self.code)
        self._decodable: dict[frozenset, bool] = {}
        kind = type(self.code)
        self._least_squares = (kind._exact_weights is Code._exact_weights and kind._decode is Code._decode
                               and kind._residual_of is Code._residual_of)
        self.reset()

    @property
    def exact(self) -> bool:
        return self.code.exact and self.method != "one_step" and self.method != "optimal"

    def plan(self, t: int) -> Plan:
        return Plan(t=t, parts=self._plan_parts, n_parts=self.code.n_parts, load=self._plan_load, batch=self.batch,
                    deadline=self.deadline)

    def message(self, i: int, c: int, partials, plan: Plan) -> np.ndarray:
        return self.code.encode_row(i, partials)

    def messages(self, partials, received, plan: Plan) -> np.ndarray:
        return self.code.encode(partials)[as_received(received).workers]

    def stop_count(self) -> int | None:
        """``wait`` for approximate codes; ``None`` for exact ones, whose stop depends on who arrived (an
        ill-conditioned set of ``n - s`` waits for more, some smaller sets decode): :meth:`stop_index`."""
        if not self.exact:
            return self.wait
        return None

    def done(self, received, plan: Plan) -> bool:
        if not self.exact:
            return len(received) >= self.wait
        return self._decodes(as_received(received).workers)

    def _decodes(self, responders) -> bool:
        """``code.is_decodable``, remembered per responder set (a set costs one lookup the next time, in any order)."""
        key = frozenset(int(i) for i in responders)
        hit = self._decodable.get(key)
        if hit is None:
            if len(self._decodable) * self.n >= self._DECODABLE_CACHE:   # 2^20 workers held in all: ~60 MB
                self._decodable.clear()
            F = sorted(key)
            hit, decoding = _least_squares_verdict(self.code, F) if self._least_squares else (None, None)
            if decoding is not None:     # the combine's decode of this set, already solved
                self.code.remember_exact(np.array(F, dtype=np.int64), decoding)
            if hit is None:
                hit = self.code.is_decodable(F)
            self._decodable[key] = hit
        return hit

    _DECODABLE_CACHE = 1 << 20

    def stop_index(self, received, plan: Plan) -> int | None:
        """The first prefix of ``order`` that decodes: where the MPI master, asking :meth:`done` after every
        arrival, stops. Prefixes that leave a partition unheld are skipped (they cannot give the sum);
        a code without ``early_decoding`` needs ``n - s``; with it, the prefix of ``n - s - 1`` is tried first and,
        if it decodes, the first decodable one is found by bisection (the exact decode is a least-squares residual
        test or a coverage test, both monotone: a superset of a decodable set decodes). From ``n - s`` on every
        prefix is tried in turn (an ill-conditioned set of ``n - s`` may need one more)."""
        if not self.exact:
            return super().stop_index(received, plan)
        order = as_received(received).workers.tolist()
        lo = self._first_cover(order)
        if lo is None:
            return None
        need = self.n - self.code.s
        if self.code.early_decoding and lo < need and self._decodes(order[:need - 1]):
            return shortest_prefix(self._decodes, order, lo, need - 1)
        for m in range(max(lo, need), len(order) + 1):
            if self._decodes(order[:m]):
                return m
        return None

    def _first_cover(self, order: list[int]) -> int | None:
        """The length of the shortest prefix of ``order`` whose workers hold every partition (None: never)."""
        rank = np.full(self.n + 1, np.inf)      # index n: the padding of _holders, never arrives
        rank[order] = np.arange(len(order))
        first = rank[self._holders].min(axis=1)     # when each partition first reached the master
        last = float(first.max()) if first.size else 0.0
        return int(last) + 1 if np.isfinite(last) else None

    def combine(self, messages, received, plan: Plan) -> Combined:
        responders = check_workers(senders(received), self.n).tolist()
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


def _holders(code: Code) -> np.ndarray:
    """``(n_parts, h)`` workers holding each partition, padded with ``n`` (``h``: the most holders of one)."""
    held = [np.flatnonzero(col) for col in (code.B != 0).T]
    h = max((len(w) for w in held), default=0)
    out = np.full((len(held), max(h, 1)), code.n, dtype=np.int64)
    for j, w in enumerate(held):
        out[j, :len(w)] = w
    return out


def _least_squares_verdict(code: Code, F: list[int]) -> tuple[bool | None, Decoding | None]:
    """Is ``F`` decodable by a code whose exact decode is least squares (``B_F^T a = 1``, residual checked)? Normal
    equations with two steps of refinement (Cholesky: several times cheaper than ``lstsq`` at ``n = 100``): True when
    they reach a residual within ``tol`` (least squares reaches at most that), False when the refinement has settled on
    a residual 1000x over ``tol`` (the least residual), None when unsure (ill-conditioned: ask the decoder).

    With True comes the exact :class:`Decoding` itself when the Gram matrix ``B_F B_F^T`` is well conditioned (its
    Cholesky pivots within ``1e-5`` of each other: the rows independent, so the solution is unique and is the one
    ``lstsq`` finds, to rounding); else None, and the decoder solves it again if asked."""
    if not F:
        return None, None
    BF = code.B[F]
    ones = np.ones(code.n_parts, dtype=BF.dtype)
    try:
        factor = scipy.linalg.cho_factor(BF.conj() @ BF.T, check_finite=False)
    except np.linalg.LinAlgError:
        return None, None
    F = np.asarray(F)
    a = np.zeros(len(F), dtype=BF.dtype)
    residuals = []
    for _ in range(3):
        a = a + scipy.linalg.cho_solve(factor, BF.conj() @ (ones - BF.T @ a), check_finite=False)
        residuals.append(code._residual_of(F, a))
    if not np.all(np.isfinite(residuals)):
        return None, None
    if code._within_tol(residuals[-1]):
        pivots = np.abs(np.diagonal(factor[0]))
        if not (np.all(np.isfinite(a)) and pivots.min() > 1e-5 * pivots.max()):
            return True, None
        return True, Decoding(code.full_weights(F, a), residuals[-1], "exact")
    if code._within_tol(residuals[-1] / 1000) or residuals[-1] < 0.5 * residuals[-2]:
        return None, None
    return False, None
