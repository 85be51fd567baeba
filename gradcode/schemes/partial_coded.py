"""Gradient coding that uses the work of partial stragglers (``partial_coded``).

After Ramamoorthy, Meng and Girimaji, "Leveraging partial stragglers within gradient coding" (NeurIPS 2024, arXiv
2405.19509), ``docs/references.md#partial-stragglers``. A plain gradient code treats a worker as done or failed: a
worker that finished two of its three partitions contributes nothing. Here the workers stream.

**Assignment and protocol (``protocol = "stream"``).** ``n`` chunks (data partitions), worker ``i`` holds the
cyclic set ``i, i+1, ..., i+s (mod n)`` (load ``s + 1``, as ``coded`` with ``cyclic_repetition``) and computes it
chunk by chunk in the order :mod:`gradcode.schemes.chunk_order` chooses, sending a message after every ``group``
chunks (and after its last): the sum of the chunks done since its previous message. Message ``(i, c)`` thus carries
the indicator row ``v_(i,c)`` of the chunks ``c - group + 1 .. c`` of worker ``i``'s order.

**Decoder.** The master wants ``sum_j g_j = 1^T G``. From received messages with rows ``V`` it looks for weights
``a`` with ``V^T a = 1``:

- ``group = 1`` (the default): every message is one chunk's gradient, so ``a`` picks the first copy of each chunk;
  the weights are 0 and 1 (no cancellation: exact in floating point, residual 0). Exact once every chunk has come in
  from some worker (``exact`` mode's stop rule);
- ``group > 1``: ``a = argmin ||V^T a - 1||`` by least squares on the 0/1 matrix ``V`` (``numpy.linalg.lstsq``),
  residual ``||V^T a - 1|| / sqrt(n)``; decodable when ``16 x residual <= tol`` (1e-8), the codes' rule
  (``ERROR_MARGIN`` in :mod:`gradcode.codes._base`: the gradient's error may be several times the residual).

In ``mode = "approximate"`` the iteration ends at ``deadline`` after the start, or once ``wait`` distinct chunks
are in (default ``n``: every chunk), whichever comes first, and the estimate is the least-squares one (the sum of
the chunks that came in, residual ``sqrt(missing / n)``). In ``exact`` mode a set of messages that never decodes
(infinite delays) falls back audibly to least squares: ``method = "fallback"`` in the record and a
:class:`~gradcode.errors.DecodeFallbackWarning`.

**Chunk order.** ``order = "natural"``: worker ``i`` computes ``i, i+1, ..., i+s``. ``order = "optimized"``: the
order minimising the time to an exact gradient, ``max_c min_{w holds c} tau_w (pos_w(c) + 1)``, for the per-chunk
times ``tau_w`` the scheme has seen (an exponentially weighted mean with weight ``memory`` on the past, learnt
from every iteration: :meth:`observe_chunks`); exact and polynomial (:func:`~gradcode.schemes.chunk_order.
optimal_order`). With equal estimates it is the natural order, which also minimises the paper's ``Q_max`` here.

**Splitting the gradient in ``l`` parts (``l``, default 1; the paper's communication parameter).** With ``l > 1``
each chunk's gradient ``g_c`` is cut into ``l`` equal parts ``g_c^(1..l)`` of ``d / l`` numbers, and the message
after chunk ``c`` carries one combination of them, ``sum_k E[j, k] g_c^(k)`` (``d / l`` numbers), where ``j`` is the
worker's place among the chunk's ``s + 1`` holders and ``E`` is :func:`split_coefficients`. The master rebuilds
``g_c`` from ``l`` messages about ``c`` from distinct workers (an ``l x l`` solve per chunk); the gradient is exact
once every chunk has been computed ``l`` times (``exact`` mode's stop rule), so it survives ``s + 1 - l`` failed
workers instead of ``s``. With fewer than ``l`` copies (approximate mode) a chunk enters by its least-squares,
minimum-norm estimate; residual ``sqrt(sum_c ||X_c E_c - I||_F^2 / (n l))``. ``l`` must divide ``d``
(:class:`~gradcode.errors.ConfigError` otherwise) and goes with ``protocol = "stream"``, ``group = 1``.

**Communication.** A worker sends up to ``ceil((s + 1) / group)`` messages per iteration instead of one
(``coded``), each of ``d / l`` floats, fewer when it is interrupted (``late_workers = "abandon"``) or stopped by the
iteration's end. The records count them (``worker_messages``, ``floats``).

**The Tandon et al. code's partial scheme (``protocol = "tandon"``).** As in that code's ``partial_coded.py``:
each worker has ``partitions`` chunks; the first ``partitions - s - 1`` are its own (no other worker holds them)
and go uncoded in a first message as soon as they are done; the last ``s + 1`` are a cyclic-repetition code over
``n`` shared chunks, sent as one coded message (the code's row ``B_i``). The master needs every first message
(the own chunks have no redundancy) and ``n - s`` decodable second messages. All chunks are one data partition of
``n (partitions - s - 1) + n``, each worth ``n / n_parts`` load units (the data set is ``n`` units, as for sync).

What the paper says, what we read into it and where our protocol may differ from its:
``docs/references.md#partial-stragglers``.

>>> from gradcode import make_scheme
>>> sch = make_scheme("partial_coded", n=4, s=1, order="natural")
>>> plan = sch.plan(0)
>>> plan.parts, sch.emits(0, plan)
(((0, 1), (1, 2), (2, 3), (3, 0)), (1, 2))
>>> sch.done([(0, 1), (2, 1), (1, 1)], plan), sch.done([(0, 1), (2, 1), (0, 2), (3, 1)], plan)
(False, True)
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np

from ..codes import make_code
from ..codes._base import ERROR_MARGIN
from ..errors import ConfigError, DecodeFallbackWarning, check_float, check_int
from . import chunk_order
from ._base import Combined, Plan, Scheme

ORDERS = ("optimized", "natural")
MODES = ("exact", "approximate")
PROTOCOLS = ("stream", "tandon")


class PartialCoded(Scheme):
    """Gradient coding with streamed chunks: the work of slow workers counts (cyclic assignment, ``s``)."""

    name = "partial_coded"
    description = "cyclic gradient code whose workers send after each chunk, so partial stragglers' work counts"
    streams = True
    timeline_rank = 3

    def __init__(self, n: int, *, s: int, order: str = "optimized", mode: str = "exact", deadline: float | None = None,
                 wait: int | None = None, group: int = 1, protocol: str = "stream", partitions: int | None = None,
                 l: int = 1, memory: float = 0.9, tol: float = 1e-8, batch: int | None = None):
        super().__init__(n, batch=batch)
        self.s = check_int("s", s, low=0, high=self.n - 1)
        for key, value, accepted in (("order", order, ORDERS), ("mode", mode, MODES),
                                     ("protocol", protocol, PROTOCOLS)):
            if value not in accepted:
                raise ConfigError(f"partial_coded: {key} must be one of {', '.join(accepted)}, got {value!r}")
        self.order, self.mode, self.protocol = order, mode, protocol
        if mode == "exact" and (deadline is not None or wait is not None):
            raise ConfigError("partial_coded: deadline and wait belong to mode = 'approximate'; the exact mode "
                              "waits until every chunk is in")
        self.deadline = math.inf if deadline is None else check_float("deadline", deadline, low=0.0, low_open=True)
        self.wait = self.n if wait is None else check_int("wait", wait, low=1, high=self.n)
        self.group = check_int("group", group, low=1, high=self.s + 1)
        self.l = check_int("l", l, low=1, high=self.s + 1)
        if self.l > 1 and (protocol != "stream" or group != 1):
            raise ConfigError("partial_coded: l > 1 (messages of d / l numbers) works with protocol = 'stream' and "
                              f"group = 1 only, got protocol = {protocol!r}, group = {group}")
        self._E = split_coefficients(self.s + 1, self.l)
        self.memory = check_float("memory", memory, low=0.0, high=1.0)
        self.tol = check_float("tol", tol, low=0.0, low_open=True)
        if protocol == "tandon":
            if mode != "exact" or group != 1 or order != "optimized":
                raise ConfigError("partial_coded: protocol = 'tandon' is the Tandon et al. code's exact two-message "
                                  "scheme; it takes no mode, group or order")
            self.partitions = self.s + 2 if partitions is None else check_int("partitions", partitions,
                                                                             low=self.s + 2)
            self.code = make_code("cyclic_repetition", n=self.n, s=self.s)
            self._own = self.partitions - self.s - 1
            self._n_parts = self.n * self._own + self.n
        else:
            if partitions is not None:
                raise ConfigError("partial_coded: partitions is a parameter of protocol = 'tandon'")
            self._n_parts = self.n
        self._warned: set = set()
        self._order_time: float | None = None     # where the next ordering's search starts (observe_chunks)
        if self.protocol == "stream" and self.order == "optimized":
            chunk_order.load_graph_routines()    # now, not inside the first iteration (observe_chunks)
        self.reset()

    # --- state: the per-chunk times seen so far (order = "optimized") -----------------------------------------
    def _initial_state(self):
        return {"tau": np.ones(self.n), "orders": chunk_order.natural_order(self.n, self.s)}

    def observe_chunks(self, t: int, chunk_time: np.ndarray) -> None:
        if self.protocol != "stream" or self.order != "optimized":
            return
        seen = np.isfinite(chunk_time)
        tau = self.state["tau"]
        tau[seen] = self.memory * tau[seen] + (1 - self.memory) * chunk_time[seen]
        # searched from the last ordering's time (a few matchings, not a bisection's ~9; the same orders)
        self.state["orders"], self._order_time = chunk_order.timed_optimal_order(tau, self.s, self.l,
                                                                                 near=self._order_time)

    @property
    def exact(self) -> bool:
        return self.mode == "exact"

    @property
    def samples_per_unit(self):
        # a chunk is n / n_parts units of batch samples each (tandon: smaller chunks)
        return None if self.batch is None else self.batch * self._n_parts / self.n

    # --- 1. plan ------------------------------------------------------------------------------------------
    def plan(self, t: int) -> Plan:
        if self.protocol == "tandon":
            parts = tuple(tuple(range(i * self._own, (i + 1) * self._own))
                          + tuple(self.n * self._own + j for j in self.code.support(i)) for i in range(self.n))
        else:
            parts = self.state["orders"]
        load = np.array([len(p) * self.n / self._n_parts for p in parts])
        return Plan(t=t, parts=parts, n_parts=self._n_parts, load=load, batch=self.batch, deadline=self.deadline,
                    chunked=True)

    # --- 2. encode: after which chunks, and what ----------------------------------------------------------
    def emits(self, i: int, plan: Plan) -> tuple[int, ...]:
        L = plan.chunks(i)
        if self.protocol == "tandon":
            return (self._own, L)
        return _emits(L, self.group)

    def message_parts(self, i: int, c: int, plan: Plan) -> tuple[int, ...]:
        if self.protocol == "stream":    # the previous message went after the last multiple of group below c
            return tuple(plan.parts[i][(c - 1) // self.group * self.group:c])
        return super().message_parts(i, c, plan)

    def message_size(self, d: int) -> int:
        """Real numbers per message: ``d``, or ``d / l`` with ``l > 1`` (``l`` must divide ``d``)."""
        if d % self.l:
            raise ConfigError(f"partial_coded: l = {self.l} must divide the model size d = {d} (a message is one "
                              f"of l equal parts' worth: d / l numbers); take an l that divides {d}, or l = 1")
        return d // self.l

    def message(self, i: int, c: int, partials: np.ndarray, plan: Plan) -> np.ndarray:
        if self.protocol == "tandon" and c == plan.chunks(i):   # the coded message: B_i over the shared chunks
            return self.code.encode_row(i, np.asarray(partials)[self._own:])
        if self.l > 1:   # chunk c's gradient in l parts, combined with the row of worker i's place among its holders
            g = np.asarray(partials)[c - 1]
            j = (plan.parts[i][c - 1] - i) % self.n
            return self._E[j] @ g.reshape(self.l, self.message_size(g.shape[-1]))
        return super().message(i, c, partials, plan)

    # --- 3. stop ------------------------------------------------------------------------------------------
    def done(self, received, plan: Plan) -> bool:
        if self.protocol == "tandon":
            firsts = {i for i, c in received if c == self._own}
            seconds = [i for i, c in received if c == plan.chunks(i)]
            return len(firsts) == self.n and self.code.is_decodable(seconds)
        if self.mode == "approximate":
            return len(self._covered(received, plan)) >= self.wait
        if self.group == 1:
            return len(self._covered(received, plan)) == self.n
        return self._exact(self._weights(received, plan)[1])

    def stop_index(self, received, plan: Plan) -> int | None:
        if self.protocol == "stream" and (self.group == 1 or self.mode == "approximate"):
            need = self.n if self.mode == "exact" else self.wait
            if self.group == 1 and self.l == 1:     # a chunk a message: done at the need-th chunk first seen
                first = np.sort(np.unique(self._chunk_of_each(received, plan), return_index=True)[1])
                return int(first[need - 1]) + 1 if len(first) >= need else None
            copies: dict[int, set[int]] = {}
            done = 0
            for k, (i, c) in enumerate(received):   # one pass: the chunks in (l times) as the messages arrive
                for part in self.message_parts(i, c, plan):
                    holders = copies.setdefault(part, set())
                    if i not in holders:
                        holders.add(i)
                        done += len(holders) == self.l
                if done >= need:
                    return k + 1
            return None
        return super().stop_index(received, plan)

    @staticmethod
    def _chunk_of_each(received, plan: Plan) -> np.ndarray:
        """The chunk each message ``(worker, chunks)`` carries (protocol stream, group 1: one chunk a message)."""
        return np.fromiter((plan.parts[i][c - 1] for i, c in received), dtype=np.intp, count=len(received))

    def _copies(self, received, plan: Plan) -> dict[int, dict[int, int]]:
        """``{chunk: {worker: index of its message}}``, the first message of each worker per chunk, in arrival
        order (a duplicate delivery adds nothing)."""
        copies: dict[int, dict[int, int]] = {}
        for k, (i, c) in enumerate(received):
            for part in self.message_parts(i, c, plan):
                copies.setdefault(part, {}).setdefault(i, k)
        return copies

    def _covered(self, received, plan: Plan) -> set[int]:
        """The chunks whose gradient is in: computed by ``l`` distinct workers (``l = 1``: by one)."""
        return {part for part, by in self._copies(received, plan).items() if len(by) >= self.l}

    # --- 4. combine ---------------------------------------------------------------------------------------
    def _weights(self, received, plan: Plan) -> tuple[np.ndarray, float]:
        """Decoding weights of the received messages and the residual ``||V^T a - 1|| / sqrt(n_parts)``."""
        m = len(received)
        if self.group == 1:   # (protocol stream: tandon decodes its own way) first copy of each chunk: 0/1 weights
            a = np.zeros(m)
            a[np.unique(self._chunk_of_each(received, plan), return_index=True)[1]] = 1.0
            return a, _missing_residual(int(a.sum()), plan)
        V = np.zeros((m, plan.n_parts))
        for k, (i, c) in enumerate(received):
            V[k, list(self.message_parts(i, c, plan))] = 1.0
        a = np.linalg.lstsq(V.T, np.ones(plan.n_parts), rcond=None)[0]
        return a, float(np.linalg.norm(V.T @ a - 1.0) / math.sqrt(plan.n_parts))

    @property
    def sums_on_arrival(self) -> bool:
        # whole chunks, one per message: a message's weight is 1 if it brings a chunk not in yet, else 0, and stays so
        return self.protocol == "stream" and self.group == 1 and self.l == 1

    def arrival_weight(self, received, plan: Plan) -> float:
        return float(self._weights(received, plan)[0][-1])

    def combine_weighted(self, total: np.ndarray, received, plan: Plan) -> Combined:
        residual = self._weights(received, plan)[1]
        return Combined(total.copy(), residual=residual, method=self._method(residual, received))

    def combine(self, messages: np.ndarray, received, plan: Plan) -> Combined:
        messages = np.asarray(messages, dtype=float)
        if messages.shape[0] != len(received):
            raise ConfigError(f"partial_coded: {len(received)} messages named, {messages.shape[0]} given")
        if self.protocol == "tandon":
            return self._combine_tandon(messages, received, plan)
        if self.l > 1:
            return self._combine_split(messages, received, plan)
        a, residual = self._weights(received, plan)
        return Combined(a @ messages, residual=residual, method=self._method(residual, received))

    def combine_partials(self, partials: np.ndarray, received, plan: Plan) -> Combined | None:
        # whole chunks, one per message (sums_on_arrival): the chunks the weights keep, added up in one product
        if not self.sums_on_arrival:
            return None
        weights = np.zeros(plan.n_parts)
        weights[self._chunk_of_each(received, plan)] = 1.0      # each chunk in, once: the decoding weights' 1s
        residual = _missing_residual(int(weights.sum()), plan)
        return Combined(weights @ partials, residual=residual, method=self._method(residual, received))

    def _combine_split(self, messages: np.ndarray, received, plan: Plan) -> Combined:
        """``l > 1``: per chunk, its ``l`` parts from the first ``l`` distinct workers' messages (an ``l x l`` solve,
        :func:`split_coefficients`); with fewer copies (approximate mode) the least-squares, minimum-norm estimate.
        Residual ``sqrt(sum_c ||X_c E_c - I||_F^2 / (n l))``: 0 when every chunk is in, ``sqrt(missing / n)`` when
        whole chunks are missing, as for ``l = 1``."""
        parts = np.zeros((self.l, messages.shape[1]))
        err2 = 0.0
        copies = self._copies(received, plan)
        for chunk in range(self.n):
            by = list(copies.get(chunk, {}).items())[: self.l]   # (worker, message index), first arrivals
            if not by:
                err2 += self.l
                continue
            E = self._E[[(chunk - w) % self.n for w, _ in by]]      # rows of the workers' places among the holders
            X = np.linalg.inv(E) if len(by) == self.l else np.linalg.pinv(E)
            parts += X @ messages[[k for _, k in by]]
            err2 += float(np.sum((X @ E - np.eye(self.l)) ** 2))
        residual = math.sqrt(err2 / (self.n * self.l))
        return Combined(parts.reshape(-1), residual=residual, method=self._method(residual, received))

    def _combine_tandon(self, messages: np.ndarray, received, plan: Plan) -> Combined:
        """Sum of the first (uncoded) messages + the cyclic-repetition decode of the second ones."""
        first: dict[int, int] = {}
        second: dict[int, int] = {}
        for k, (i, c) in enumerate(received):
            (second if c == plan.chunks(i) else first).setdefault(i, k)
        a = np.zeros(len(messages))      # one weighted sum over the messages: a single pass, no copies
        a[list(first.values())] = 1.0
        workers = sorted(second)
        dec = None
        if workers:
            dec = self.code.decoding(workers, "auto")
            a[[second[i] for i in workers]] = dec.weights[workers]
        missing = self.n - len(first)   # own chunks of workers whose first message never came
        residual = math.sqrt(((dec.residual ** 2 * self.n) if dec else self.n) / plan.n_parts
                             + missing * self._own / plan.n_parts)
        return Combined(a @ messages, residual=residual, method=self._method(residual, received, approximate=False))

    def _exact(self, residual: float) -> bool:
        """An exact gradient: ``ERROR_MARGIN * residual <= tol``, the rule of the codes (``codes/_base.py``)."""
        return ERROR_MARGIN * residual <= self.tol

    def _method(self, residual: float, received, approximate: bool = True) -> str:
        """``exact``, ``approximate`` (approximate mode) or ``fallback`` (warned once per responder set)."""
        if self._exact(residual):
            return "exact"
        if approximate and self.mode == "approximate":
            return "approximate"
        self._warn(received, residual)
        return "fallback"

    def _warn(self, received, residual: float) -> None:
        key = frozenset(received)
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"partial_coded: the messages in ({len(received)}) do not give the exact gradient: "
                          f"least-squares weights with residual {residual:.3g}, the gradient is approximate",
                          DecodeFallbackWarning, stacklevel=3)

    def record(self) -> dict:
        rec = {"s": self.s, "mode": self.mode, "protocol": self.protocol, "l": self.l}
        if self.protocol == "stream" and self.order == "optimized":
            rec["order_changed"] = self.state["orders"] != chunk_order.natural_order(self.n, self.s)
        return rec

    def __repr__(self) -> str:
        return (f"PartialCoded(n={self.n}, s={self.s}, order={self.order!r}, mode={self.mode!r}, "
                f"protocol={self.protocol!r}, l={self.l})")


def split_coefficients(holders: int, l: int) -> np.ndarray:
    """The ``(holders, l)`` matrix ``E`` whose row ``j`` combines the ``l`` parts of a chunk's gradient in the message
    of the chunk's ``j``-th holder (``l = 1``: a column of ones, the chunk's gradient itself)::

        E[j, k] = T_k(x_j),   x_j = cos((2 j + 1) pi / (2 holders)),

    Chebyshev polynomials at the Chebyshev points: any ``l`` rows are invertible (a polynomial basis at distinct
    nodes) and all of them are orthogonal columns up to scale (a cosine transform), so the ``l x l`` solves stay well
    conditioned (ours; not necessarily the paper's coefficients).

    >>> np.round(split_coefficients(3, 2), 3).tolist()
    [[1.0, 0.866], [1.0, 0.0], [1.0, -0.866]]
    """
    x = np.cos((2 * np.arange(holders) + 1) * np.pi / (2 * holders))
    return np.cos(np.arange(l)[None, :] * np.arccos(x)[:, None])


def _missing_residual(covered: int, plan: Plan) -> float:
    """The decode's residual ``sqrt(missing / n_parts)`` when ``covered`` whole chunks are in, each once."""
    return math.sqrt((plan.n_parts - covered) / plan.n_parts)


@functools.lru_cache(maxsize=1024)
def _emits(chunks: int, group: int) -> tuple[int, ...]:
    """After every ``group`` chunks and after the last of ``chunks``; asked for every worker every iteration, so
    computed once per pair."""
    return tuple(sorted(set(range(group, chunks + 1, group)) | {chunks}))
