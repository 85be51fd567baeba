"""The scheme interface: the four answers every straggler-mitigation method gives
(``docs/design.md#the-scheme-interface``).

1. **plan** (:meth:`Scheme.plan`): what each worker computes at iteration ``t`` - its partitions, its load, and for
   a decentralized scheme the chunks (micro-batches) and the local time limit;
2. **encode** (:meth:`Scheme.emits`, :meth:`Scheme.message`): after which chunks worker ``i`` sends, and how it
   turns its partial gradients into a message;
3. **stop** (:meth:`Scheme.done` / :meth:`Scheme.stop_index`): may the iteration end with these messages?
4. **combine and adapt** (:meth:`Scheme.combine`, :meth:`Scheme.adapt`): the gradient estimate from the received
   messages, and what the scheme learns for the next iteration.

One message model: every plan is a list of chunks per worker (all-or-nothing work is one chunk), and what arrives is
a message ``(worker, chunks)`` (:class:`Received`); a scheme that sends once per plan answers on the workers of its
messages.

A scheme keeps its hyper-parameters (``self.params``, fixed and validated on construction) apart from the state that
changes during a run (``self.state``, restored by :meth:`Scheme.reset`), and reports that state in every record
(:meth:`Scheme.record`). Schemes know nothing of clocks or MPI: the simulated cluster (``gradcode.clusters.sim``) and
the MPI cluster (``mpi_runtime``) drive the same objects.

A :class:`DecentralizedScheme` (DropCompute) has no master: each worker runs its chunks under a local rule, which the
scheme returns as a :class:`Schedule` for the clusters to execute, and an All-Reduce sums what the workers kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError, check_int, check_numeric


@dataclass(frozen=True)
class Plan:
    """What every worker computes in one iteration.

    ``parts[i]`` are the data partitions worker ``i`` computes, out of ``n_parts`` partitions of the data, each on a
    mini-batch of ``batch`` samples (``None``: the whole partition). ``load[i]`` is worker ``i``'s computation in
    units of the delay model (one unit = one partition's mini-batch at the run's reference batch size).
    ``micro_batches`` > 0 marks a decentralized plan: worker ``i`` computes the chunks ``parts[i]`` in order, one
    partition each, and ``tau`` is its local time limit (``inf``: no limit).

    ``chunked`` marks a master plan of interruptible workers (``docs/design.md#chunked-workers``): worker ``i``
    computes ``parts[i]`` one partition (chunk) at a time, in the listed order, each chunk ``load[i] /
    len(parts[i])`` units; between two chunks it drops the rest if a newer plan has come
    (``late_workers = "abandon"``), starts no further chunk once ``tau`` has passed since it began (its local
    deadline), and sends a message when the scheme asks for one (:meth:`Scheme.emits`).
    """

    t: int
    parts: Sequence[tuple[int, ...]]     # a tuple of tuples, or OwnParts
    n_parts: int
    load: np.ndarray
    batch: int | None = None
    micro_batches: int = 0
    tau: float = float("inf")
    deadline: float = float("inf")
    chunked: bool = False

    def chunks(self, i: int) -> int:
        """Chunks worker ``i`` computes: ``len(parts[i])`` in a chunked plan, else 1 (its whole load at once)."""
        return len(self.parts[i]) if self.chunked else 1

    def chunk_parts(self, i: int, c: int) -> tuple[int, ...]:
        """The partitions of worker ``i``'s first ``c`` chunks (an unchunked plan's one chunk: all its partitions)."""
        return tuple(self.parts[i][:c]) if self.chunked else tuple(self.parts[i])

    @cached_property
    def chunk_counts(self) -> np.ndarray:
        """Every worker's :meth:`chunks`, an int array made once per plan (a streamed iteration asks for it four
        times). Only chunked plans need it: an unchunked plan's is ``n`` ones."""
        if not self.chunked:
            return np.ones(len(self.parts), dtype=np.intp)
        return np.fromiter((self.chunks(i) for i in range(len(self.parts))), dtype=np.intp, count=len(self.parts))


class OwnParts(Sequence):
    """``((0,), (1,), ..., (n-1,))`` without building it: worker ``i`` computes partition ``i``. At ``n = 10^8`` the
    tuple of tuples would take 8 GB; this takes nothing, and reads, compares and iterates like the tuple."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple((j,) for j in range(self.n)[i])
        j = range(self.n)[i]   # negative indices and IndexError as a tuple's
        return (j,)

    def __eq__(self, other) -> bool:
        if isinstance(other, OwnParts):
            return self.n == other.n
        return isinstance(other, (tuple, list, Sequence)) and len(other) == self.n and tuple(self) == tuple(other)

    __hash__ = None   # like a list: equal to a tuple, so not hashable consistently with it

    def __repr__(self) -> str:
        return f"OwnParts(n={self.n})"


class Received(Sequence):
    """Messages in arrival order: message ``k`` came from worker ``workers[k]`` after its first ``chunks[k]`` chunks.
    A sequence of ``(worker, chunks)`` pairs (iterating, indexing, ``set``), with the two columns as arrays for the
    schemes and clusters that work on them at once; a slice is a :class:`Received`. ``chunks`` left out: one message
    per worker, sent after its one chunk (an unchunked plan)."""

    __slots__ = ("workers", "_chunks")

    def __init__(self, workers, chunks=None):
        self.workers = np.asarray(workers, dtype=np.intp)
        self._chunks = None if chunks is None else np.asarray(chunks, dtype=np.intp)

    @property
    def chunks(self) -> np.ndarray:
        return np.ones(len(self.workers), dtype=np.intp) if self._chunks is None else self._chunks

    @property
    def one_each(self) -> bool:
        """True when every message is its worker's one message (``chunks`` left out): workers and messages agree."""
        return self._chunks is None

    def __len__(self) -> int:
        return len(self.workers)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return Received(self.workers[k], None if self._chunks is None else self._chunks[k])
        return int(self.workers[k]), int(self.chunks[k])

    def __iter__(self):
        return zip(self.workers.tolist(), self.chunks.tolist(), strict=True)

    def __repr__(self) -> str:
        return f"Received({list(self)})"


def senders(received):
    """The worker of each message ``received``: a :class:`Received`'s ``workers``, the first of each pair of a list
    of ``(worker, chunks)``, or a list of workers as given (so that ``check_workers`` can say what is wrong with
    it)."""
    if isinstance(received, Received):
        return received.workers
    if isinstance(received, (list, tuple, np.ndarray)) and len(received) and np.ndim(received[0]) == 1:
        return as_received(received).workers
    return received


def as_received(received) -> Received:
    """``received`` as :class:`Received`: messages ``(worker, chunks)``, or workers of one message each."""
    if isinstance(received, Received):
        return received
    if isinstance(received, np.ndarray) and received.ndim in (1, 2):
        return Received(received) if received.ndim == 1 else Received(received[:, 0], received[:, 1])
    items = list(received)
    if items and np.ndim(items[0]) == 1:
        workers, chunks = zip(*items, strict=True)
        return Received(workers, chunks)
    return Received(np.asarray(items, dtype=np.intp).reshape(-1))


@dataclass
class Combined:
    """A gradient estimate and what decoding it cost: residual (0 for uncoded averaging) and method (both go into the
    iteration's record)."""

    gradient: np.ndarray
    residual: float = 0.0
    method: str = ""


def shortest_prefix(holds, order, lo: int, hi: int) -> int:
    """The least ``m`` in ``[lo, hi]`` with ``holds(order[:m])``, by bisection: ``holds`` is monotone (a longer prefix
    holds if a shorter one does) and holds at ``hi``."""
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(order[:mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo


class Scheme:
    """Base class. Subclasses set ``name`` and implement ``plan``, ``done`` (or ``stop_count``) and ``combine`` (or
    ``combine_sum``). ``received`` everywhere is the messages ``(worker, chunks)`` in arrival order (:class:`Received`,
    or a list of pairs; a list of workers means one message each)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    # --- what the spec, the report and the plots need to know about a scheme: class attributes, never name checks -
    #: Why a parameter this scheme does not take is refused, by name (a name that means something else here):
    #: added to the unknown-parameter error.
    param_hints: ClassVar[dict[str, str]] = {}
    #: The reference of the report's speedups (sync): a speedup is its time divided by another scheme's.
    baseline: ClassVar[bool] = False
    #: Record fields this scheme changes during a run (``"k"``, ``"load"``, ``"tau"``): ``adaptive.png`` draws them.
    adapts: ClassVar[tuple[str, ...]] = ()
    #: Place in ``timeline.png``, which draws a few schemes (lower first): the most telling ones come first.
    timeline_rank: ClassVar[int] = 100
    # ----------------------------------------------------------------------------------------------------------
    #: True if the constructor passes parameters it does not name on to something it builds (a coded scheme's code,
    #: which checks them), so a spec's unknown keys are not rejected here.
    forwards_params: ClassVar[bool] = False

    # --- what a cluster asks of a scheme (declared here, so no cluster probes with getattr) --------------------
    #: True for a scheme without a master (a :class:`DecentralizedScheme`): the cluster runs its :class:`Schedule`
    #: and an All-Reduce instead of handing plans out and waiting for messages.
    decentralized: ClassVar[bool] = False
    #: True if ``combine(messages, R, plan)`` equals ``combine_sum(messages.sum(axis=0), len(R), plan)``: a cluster
    #: may then add the messages up as they arrive (the MPI master does, to keep the sum off the critical path).
    sums_messages: ClassVar[bool] = False
    #: True if the stop rule waits for a decodable set: when the workers that ever answer cannot decode, a cluster
    #: takes them all and the decoder falls back (the record's ``method`` says so) instead of failing.
    exact: bool = False
    #: True if a worker may send several messages per plan (after chunks, :meth:`emits`), so that messages and
    #: workers differ. Its plans are ``chunked``.
    streams: ClassVar[bool] = False

    def __init__(self, n: int, *, batch: int | None = None):
        self.n = check_int("n", n, low=1)
        self.batch = None if batch is None else check_int("batch", batch, low=1)
        self.state: Any = None

    # --- lifecycle ------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Restore the initial state, so that running the same scheme twice gives the same run."""
        self.state = self._initial_state()

    def _initial_state(self) -> Any:
        """A fresh state object (schemes that adapt override this)."""
        return None

    @property
    def samples_per_unit(self) -> int | float | None:
        """Samples in one unit of load (the reference mini-batch); ``None`` when partitions are used whole."""
        return self.batch

    @property
    def work_note(self) -> str | None:
        """Why one worker-step of this scheme is not the same work as sync's (one unit of load), when the user set it
        so (the report prints it next to the scheme); ``None`` when it is, or when it differs by design (a code's
        load ``s + 1``, adaptive_k_load's chosen batch), which is the method and not a setting."""
        return None

    def bind(self, *, delay=None) -> None:
        """Give the scheme what it may need from the cluster (the delay model, for schemes that plan with it)."""

    # --- 1. plan --------------------------------------------------------------------------------------------
    def plan(self, t: int) -> Plan:
        """One partition per worker, load 1: the plan of every uncoded master scheme."""
        return Plan(t=t, parts=self._own_parts, n_parts=self.n, load=self._unit_load, batch=self.batch)

    @cached_property
    def _own_parts(self) -> OwnParts:
        """``((0,), (1,), ...)``: worker ``i`` computes partition ``i`` (built once: plans are made every iteration)."""
        return OwnParts(self.n)

    @cached_property
    def _unit_load(self) -> np.ndarray:
        # a read-only view of one number: no n-long array (n may be 10^8), and the delay model sees a unit load
        return np.broadcast_to(np.float64(1.0), (self.n,))

    # --- 2. encode ------------------------------------------------------------------------------------------
    def emits(self, i: int, plan: Plan) -> tuple[int, ...]:
        """After how many of its chunks worker ``i`` sends a message (increasing); by default once, after its last
        (an unchunked plan is one chunk: one message)."""
        return (plan.chunks(i),)

    def message(self, i: int, c: int, partials: np.ndarray, plan: Plan) -> np.ndarray:
        """Worker ``i``'s message after its first ``c`` chunks, from the gradients ``partials`` of their partitions
        (:meth:`Plan.chunk_parts`, in chunk order): by default the sum of the chunks done since its previous
        message (an unchunked plan: of all its partitions)."""
        partials = np.asarray(partials)
        if not plan.chunked:
            return partials.sum(axis=0)
        prev = max((e for e in self.emits(i, plan) if e < c), default=0)
        return partials[prev:c].sum(axis=0)

    def messages(self, partials: np.ndarray, received, plan: Plan) -> np.ndarray:
        """The messages ``received`` (``(worker, chunks)`` pairs, or workers of one message each) from the
        ``(n_parts, d)`` gradients of every partition, as a ``(len(received), d)`` array (what the simulator, which
        computes each partition once, needs)."""
        return np.stack([self.message(i, c, partials[list(plan.chunk_parts(i, c))], plan)
                         for i, c in as_received(received)])

    def message_parts(self, i: int, c: int, plan: Plan) -> tuple[int, ...]:
        """The partitions whose gradients message ``(i, c)`` carries (what it *uses* of the worker's work): the
        chunks since the worker's previous message (all its partitions in an unchunked plan)."""
        if not plan.chunked:
            return tuple(plan.parts[i])
        prev = max((e for e in self.emits(i, plan) if e < c), default=0)
        return tuple(plan.parts[i][prev:c])

    def message_weights(self, received, plan: Plan) -> np.ndarray | None:
        """The messages ``received`` added up, as weights on the partitions' gradients: ``c`` (``(n_parts,)``) with
        ``messages(partials, received, plan).sum(axis=0) == c @ partials``; None (the default) where a message is
        not such a sum. With :attr:`sums_messages` it lets a simulator combine from one pass over the partials."""
        return None

    def message_size(self, d: int) -> int:
        """Real numbers per message for a model of ``d`` parameters."""
        return d

    def message_bytes(self, d: int) -> int:
        """Bytes of one message on the wire for a model of ``d`` parameters: ``8 message_size(d)`` (float64; a
        complex code's two reals an entry, a chunk's share, are in :meth:`message_size`). A network
        (``gradcode.network``) moves this many bytes a message."""
        return 8 * self.message_size(d)

    def effective_batch(self) -> int | None:
        """Samples behind this iteration's gradient, if the default step must follow them (the cluster then steps
        by ``workload.batch_lr(effective_batch)`` unless ``[run] lr`` is given); None: the workload's ``lr``. A
        scheme whose first mini-batches are small (adaptive_k_load) diverges at the full batch's step."""
        return None

    # --- 3. stop --------------------------------------------------------------------------------------------
    def stop_count(self) -> int | None:
        """If the stop rule is "the first m messages", that ``m``; ``None`` if it depends on who sent them."""
        return None

    def done(self, received, plan: Plan) -> bool:
        """May the iteration end, given the messages ``received`` so far (in arrival order)?"""
        m = self.stop_count()
        return m is not None and len(received) >= m

    def stop_index(self, received, plan: Plan) -> int | None:
        """Number of first messages of ``received`` after which the iteration ends; ``None`` if never.

        The default uses :meth:`stop_count` or a binary search over prefixes, valid because every stop rule here is
        monotone: a superset of a sufficient set of messages is sufficient.
        """
        m = self.stop_count()
        if m is not None:
            return m if m <= len(received) else None
        if not len(received) or not self.done(received, plan):
            return None
        return shortest_prefix(lambda prefix: self.done(prefix, plan), received, 1, len(received))

    # --- 4. combine and adapt -------------------------------------------------------------------------------
    def combine(self, messages: np.ndarray, received, plan: Plan) -> Combined:
        """The estimate from the ``(len(received), d)`` messages; by default from their plain sum
        (:meth:`combine_sum`). A scheme that decodes overrides this."""
        # (received is not indexed here: in a decentralized step it lists the kept chunks, not messages)
        messages = check_numeric("messages", messages)
        if messages.ndim not in (1, 2) or messages.shape[0] != len(received):
            raise ConfigError("messages must have one row per message received: expected shape "
                              f"({len(received)}, d), got {messages.shape}")
        return self.combine_sum(messages.sum(axis=0), len(received), plan)

    def combine_sum(self, total: np.ndarray, parts: int, plan: Plan) -> Combined:
        """The estimate from ``total``, the plain sum of the gradients of ``parts`` partitions (one per message of an
        averaging scheme, one per kept chunk of a decentralized one)."""
        raise NotImplementedError(f"{self.name} combines its messages one by one, not their sum")

    def combine_partials(self, partials: np.ndarray, received, plan: Plan) -> Combined | None:
        """:meth:`combine` of the messages ``received`` from every partition's ``(n_parts, d)`` gradients, what a
        simulator has, without making the messages; None (the default) where the scheme needs them."""
        return None

    def adapt(self, t: int, combined: Combined, *, elapsed: float) -> None:
        """Learn from iteration ``t`` (its estimate and its duration). Most schemes learn nothing."""

    def record(self) -> dict[str, Any]:
        """The state to report in this iteration's record (``k``, ``tau``, ``stage``, ... where relevant)."""
        return {}

    # --- adding the messages up as they arrive (the MPI master keeps the sum off the critical path) ---------------
    @property
    def sums_on_arrival(self) -> bool:
        """True if the estimate is ``combine_weighted(sum_k a_k m_k, received, plan)`` where each weight ``a_k`` is
        fixed when message ``k`` arrives (:meth:`arrival_weight`; no later message changes it), so that a cluster
        may add the messages up while it waits instead of keeping them all. By default an averaging scheme's
        messages (``sums_messages``), one per worker."""
        return self.sums_messages and not self.streams

    def arrival_weight(self, received, plan: Plan) -> float:
        """The weight of the last of the messages ``received`` (in arrival order) in the sum; 1 by default."""
        return 1.0

    def combine_weighted(self, total: np.ndarray, received, plan: Plan) -> Combined:
        """The estimate from ``total``, the sum of the ``received`` messages weighted by :meth:`arrival_weight`; by
        default :meth:`combine_sum` of their plain sum."""
        return self.combine_sum(total, len(received), plan)

    def observe_chunks(self, t: int, chunk_time: np.ndarray) -> None:
        """Learn from iteration ``t``'s seconds per chunk of every worker (``nan`` where unknown); streaming schemes
        that plan by worker speed use it (a cluster calls it whether or not there is a workload)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n})"


@dataclass(frozen=True)
class Schedule:
    """What every worker does in one decentralized step, vectorised over the ``n`` workers (``M`` chunks each).

    Worker ``i`` computes its chunks in order from the step's start; it starts ``started[i]`` of them, chunk ``m``
    ending at ``chunk_end[i, m]`` (model time since the start; a chunk the local rule interrupts ends at the stop),
    keeps the gradients of the first ``kept[i]`` (an interrupted chunk's work is wasted), stops computing at
    ``stop[i]`` and is ready for the All-Reduce ``comm_time[i]`` later. The step lasts ``max_i(stop_i +
    comm_time_i)``. A cluster executes this and never re-derives the rule.
    """

    chunk_end: np.ndarray
    started: np.ndarray
    kept: np.ndarray
    stop: np.ndarray
    comm_time: np.ndarray
    exchange: float = 0.0     # the All-Reduce's own time on a network (gradcode.network), after the last

    @property
    def ready(self) -> np.ndarray:
        """When each worker's contribution is ready: ``stop + comm_time``."""
        return self.stop + self.comm_time

    @property
    def duration(self) -> float:
        """The step's length with zero overhead, ``max_i(stop_i + comm_time_i) + exchange`` (the All-Reduce waits
        for all, then moves its bytes)."""
        last = float(np.max(self.ready))
        return last + self.exchange if self.exchange else last

    @property
    def drop_rate(self) -> float:
        """The fraction of chunks whose gradient was not kept: ``1 - sum(kept) / (n * M)``."""
        return 1.0 - float(self.kept.sum()) / self.chunk_end.size

    def units(self, load: np.ndarray) -> np.ndarray:
        """Load units each worker kept, from the plan's ``load`` of all ``M`` chunks."""
        return self.kept * (load / self.chunk_end.shape[1])

    @classmethod
    def of_stops(cls, micro: np.ndarray, kept: np.ndarray, stop: np.ndarray, comm_time: np.ndarray,
                 limit: int) -> Schedule:
        """The schedule of workers that computed the chunk times ``micro`` (``(..., n, M)``) in order, kept the first
        ``kept`` and stopped at ``stop``, ``limit`` chunks being the most they would start: a chunk in progress at the
        stop was started (its work dropped) and ends there."""
        end = np.cumsum(micro, axis=-1)
        with np.errstate(invalid="ignore"):   # inf - inf of a worker that never answers: the step fails anyway
            begin = end - micro
        at = np.take_along_axis(begin, np.minimum(kept, limit - 1)[..., None], axis=-1)[..., 0]   # the next chunk's
        started = kept + ((kept < limit) & (stop > at))
        return cls(chunk_end=np.minimum(end, stop[..., None]), started=started, kept=kept, stop=stop,
                   comm_time=comm_time)

    def kept_parts(self, plan: Plan) -> np.ndarray:
        """The partitions whose gradients are kept, worker by worker, in chunk order."""
        mask = np.arange(self.chunk_end.shape[1])[None, :] < self.kept[:, None]
        return np.asarray(plan.parts)[mask]


class DecentralizedScheme(Scheme):
    """A scheme with no master: every worker computes its chunks under a local rule (:meth:`schedule`), then one
    All-Reduce sums ``[gradients of the kept chunks, chunks kept]`` and every worker applies :meth:`combine_sum`.

    A subclass plans ``micro_batches`` chunks per worker (``plan.parts[i]``, one partition each) and implements
    :meth:`micro_times` and :meth:`schedule`; :meth:`observe` lets it learn from the step's times. Both clusters
    call these three alone, so a new decentralized scheme needs no change to either.
    """

    decentralized = True

    def micro_times(self, delay, seed: int, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Step ``t``'s chunk times ``(n, M)`` and communication times ``(n,)`` from the delay model."""
        raise NotImplementedError

    def schedule(self, micro: np.ndarray, comm_time: np.ndarray, tau: float) -> Schedule:
        """The local rule: what each worker does given its chunk times and the plan's limit ``tau``."""
        raise NotImplementedError

    def observe(self, t: int, micro: np.ndarray, comm_time: np.ndarray) -> None:
        """Learn from step ``t``'s times (every worker sees the same, so every worker learns the same)."""

    def stop_count(self) -> int:
        return self.n   # All-Reduce: every worker takes part

    def message_bytes(self, d: int) -> int:
        """Bytes each rank's All-Reduce vector carries: the kept gradients' sum and their count, ``d + 1`` floats."""
        return 8 * (d + 1)


CHUNK_BYTES = 64   # per worker and chunk of an iteration: its time, end, kept flag and the like (a few arrays)


def check_chunks(name: str, n: int, chunks: int, setting: str) -> None:
    """Refuse, before anything is built, ``chunks`` per worker whose per-iteration arrays (``n x chunks`` times,
    ends, flags) cannot fit in memory: ``M = 2^70`` made DropCompute build ``n x M`` tuples for ever."""
    from ..plumbing.memory import available_bytes, describe_bytes

    need, have = CHUNK_BYTES * n * chunks, available_bytes()
    if have is not None and need > have[0]:
        raise ConfigError(f"{name}: {chunks} chunks per worker (n = {n}) need about {describe_bytes(need)} per "
                          f"iteration, but only {describe_bytes(max(have[0], 0))} is available ({have[1]}); use a "
                          f"smaller {setting}")


def check_k(k, n: int, what: str = "k") -> int:
    """``1 <= k <= n``, with a message that says so."""
    k = check_int(what, k)
    if not 1 <= k <= n:
        raise ConfigError(f"{what} must satisfy 1 <= {what} <= n = {n}, got {what} = {k}")
    return k
