"""The order in which each worker of a cyclic assignment computes its chunks (``partial_coded``'s ``order``).

Cyclic assignment: ``n`` chunks, worker ``i`` holds chunks ``i, i+1, ..., i+s (mod n)``. A worker that sends
after every chunk delivers its chunks in its order, so once worker ``w`` has computed for ``x`` chunk-times its
first ``x`` chunks are in; the gradient is exact once every chunk has come in from some worker. With ``tau_w`` the
time worker ``w`` takes per chunk, the exact gradient is ready at (communication aside)

    T(order) = max_c  min_{w holds c}  tau_w * (pos_w(c) + 1)

where ``pos_w(c)`` is chunk ``c``'s place (0-based) in worker ``w``'s order. :func:`optimal_order` minimises
``T``: for a candidate time ``T`` worker ``w`` gets through ``k_w(T) = min(s + 1, floor(T / tau_w))`` chunks, and
``T`` is achievable iff every chunk can be given to one of its holders with no worker given more than ``k_w(T)``
chunks (a bipartite b-matching: the chunks against ``k_w`` copies of each worker, solved by Hopcroft-Karp,
``scipy.sparse.csgraph.maximum_bipartite_matching``). The least achievable ``T`` is among the ``n (s+1)`` values
``tau_w * j``, found by bisection; each worker then puts the chunks given to it first and the others after, each
group in the natural cyclic order. Cost: ``O(log(n s))`` matchings of ``n`` chunks against ``n (s+1)`` slots.

Equal ``tau`` give every worker its own chunk first: the natural order ``i, i+1, ..., i+s``, which puts each chunk
in every position once.

**``l`` copies** (``partial_coded``'s ``l > 1``: a chunk's gradient is rebuilt from ``l`` workers' messages). The
time becomes ``max_c`` of the ``l``-th smallest ``tau_w (pos_w(c) + 1)`` over the holders of ``c``, and the
feasibility test a maximum flow (each chunk ``l`` distinct holders, worker ``w`` at most ``k_w(T)`` chunks,
``scipy.sparse.csgraph.maximum_flow``); the rest is unchanged. Checked against brute force for ``n <= 6``.

**The paper's criterion** ``Q_max`` (:func:`worst_case_chunks`, ``docs/references.md#partial-stragglers``) is
speed-free; under the cyclic assignment the natural order attains its least value (for ``l = 1`` each chunk is once
in every position [derived]; for every ``l <= s + 1`` by brute force, ``n <= 6``, ``s <= 2``), and so does
:func:`optimal_order` with equal speeds. The speed-aware order is ours, for workers whose speeds differ persistently.

>>> optimal_order([1.0, 1.0, 1.0, 1.0], s=1)
((0, 1), (1, 2), (2, 3), (3, 0))
>>> tau = [1.0, 1.0, 10.0, 10.0]                 # workers 2 and 3 are slow
>>> completion_time(natural_order(4, 2), tau), completion_time(optimal_order(tau, 2), tau)
(3.0, 2.0)
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

__all__ = ["brute_force_order", "completion_time", "natural_order", "optimal_order", "timed_optimal_order",
           "worst_case_chunks"]


def holders(n: int, s: int) -> list[tuple[int, ...]]:
    """``holders[c]``: the workers holding chunk ``c`` under the cyclic assignment (``c - s, ..., c``)."""
    return [tuple((c - j) % n for j in range(s + 1)) for c in range(n)]


@functools.lru_cache(maxsize=256)    # a tuple, never mutated; asked every iteration of an ordering scheme
def natural_order(n: int, s: int) -> tuple[tuple[int, ...], ...]:
    """Worker ``i`` computes ``i, i+1, ..., i+s (mod n)``."""
    return tuple(tuple((i + j) % n for j in range(s + 1)) for i in range(n))


def completion_time(order, tau, l: int = 1) -> float:
    """``max_c`` of the ``l``-th smallest ``tau_w (pos_w(c) + 1)`` over the holders ``w`` of ``c``: the time at which
    every chunk has been computed by ``l`` workers (``l = 1``: by one), for the orders ``order[w]`` (any
    assignment)."""
    ends: dict[int, list[float]] = {}
    for w, chunks in enumerate(order):
        for p, c in enumerate(chunks):
            ends.setdefault(c, []).append(tau[w] * (p + 1))
    return max(sorted(e)[l - 1] if len(e) >= l else np.inf for e in ends.values())


def worst_case_chunks(order, l: int = 1) -> int:
    """``Q_max``: the least total number of chunks processed (over all workers, each in its ``order[w]``) that
    guarantees every chunk has been processed ``l`` times, whatever the split between workers.

    A state in which chunk ``c`` has fewer than ``l`` copies has at most ``l - 1`` of its holders past it (those may
    have finished everything), the other holders at most ``pos_w(c)`` chunks in, the non-holders anything; so
    ``Q_max = 1 + max_c [sum_w L_w - sum_{w holds c} (L_w - pos_w(c)) + (sum of the l - 1 largest L_w - pos_w(c)
    over the holders of c)]``."""
    pos: dict[int, dict[int, int]] = {}
    for w, chunks in enumerate(order):
        for p, c in enumerate(chunks):
            pos.setdefault(c, {})[w] = p
    full = [len(chunks) for chunks in order]
    total = sum(full)
    worst = 0
    for where in pos.values():
        left = sorted((full[w] - p for w, p in where.items()), reverse=True)   # chunks from c to the end, per holder
        worst = max(worst, total - sum(left[l - 1:]))
    return 1 + worst


def load_graph_routines():
    """scipy's ``csr_matrix``, ``maximum_bipartite_matching`` and ``maximum_flow``, imported on first use (not with
    this module: most runs never order chunks). A scheme that will order chunks calls this when it is built, so
    that the slow import is not paid inside its first iteration (on the MPI master's clock)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_bipartite_matching, maximum_flow

    return csr_matrix, maximum_bipartite_matching, maximum_flow


# The tests below depend only on (n, s, caps[, l]), and caps take few values (each in 0..s+1), which repeat from one
# iteration to the next as the per-chunk times drift: cached, an ordering costs tens of microseconds instead of
# milliseconds of scipy set-up (on the MPI master, while the workers compute). Results are tuples: never mutated.
@functools.lru_cache(maxsize=4096)
def _feasible(n: int, s: int, caps: tuple[int, ...]) -> tuple[int, ...] | None:
    """An assignment chunk -> holder with at most ``caps[w]`` chunks per worker, or None if there is none."""
    csr_matrix, maximum_bipartite_matching, _ = load_graph_routines()
    caps = np.asarray(caps, dtype=int)
    slot_worker = np.repeat(np.arange(n), caps)
    first = np.concatenate(([0], np.cumsum(caps)))
    # an edge from chunk c to each of the caps[w] slots of each holder w (c - j mod n), in numpy: at n = 100
    # Python loops would cost more than the matching itself
    pair_worker = ((np.arange(n)[:, None] - np.arange(s + 1)[None, :]) % n).ravel()     # (chunk, holder) pairs
    count = caps[pair_worker]
    if not count.sum():
        return None
    cols = np.repeat(first[pair_worker], count) + np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    indptr = np.concatenate(([0], np.cumsum(count.reshape(n, s + 1).sum(axis=1))))       # chunk c's edges, in order
    graph = csr_matrix((np.ones(len(cols)), cols, indptr), shape=(n, int(first[-1])))
    graph.sort_indices()     # the canonical form a (rows, cols) build gives, so the same matching
    match = maximum_bipartite_matching(graph, perm_type="column")   # slot matched to each chunk, -1: none
    if np.any(match < 0):
        return None
    return tuple(slot_worker[match].tolist())


@functools.lru_cache(maxsize=4096)
def _feasible_multi(n: int, s: int, caps: tuple[int, ...], l: int) -> tuple[frozenset[int], ...] | None:
    """For each chunk ``l`` distinct holders, with at most ``caps[w]`` chunks per worker, or None if impossible
    (a maximum flow: source -> chunk, capacity ``l``; chunk -> each holder, 1; worker -> sink, ``caps[w]``)."""
    csr_matrix, _, maximum_flow = load_graph_routines()
    src, sink = 2 * n, 2 * n + 1     # chunks are nodes 0..n-1, workers n..2n-1
    rows, cols, cap = [], [], []
    for c, hs in enumerate(holders(n, s)):
        rows.append(src), cols.append(c), cap.append(l)
        for w in hs:
            rows.append(c), cols.append(n + w), cap.append(1)
    for w in range(n):
        rows.append(n + w), cols.append(sink), cap.append(int(caps[w]))
    graph = csr_matrix((np.array(cap, dtype=np.int32), (rows, cols)), shape=(2 * n + 2, 2 * n + 2))
    result = maximum_flow(graph, src, sink)
    if result.flow_value < n * l:
        return None
    flow = result.flow.tocoo()
    chosen: list[set[int]] = [set() for _ in range(n)]
    for a, b, f in zip(flow.row, flow.col, flow.data, strict=True):
        if a < n and n <= b < 2 * n and f > 0:
            chosen[a].add(int(b - n))
    return tuple(frozenset(c) for c in chosen)


def optimal_order(tau, s: int, l: int = 1) -> tuple[tuple[int, ...], ...]:
    """Orders minimising :func:`completion_time` (every chunk computed by ``l`` of its holders) for per-chunk times
    ``tau`` (one per worker), cyclic assignment. ``l = 1``: a bipartite matching per candidate time; ``l > 1``: a
    maximum flow per candidate time (each chunk needs ``l`` distinct holders)."""
    return timed_optimal_order(tau, s, l)[0]


def timed_optimal_order(tau, s: int, l: int = 1, near: float | None = None):
    """``(optimal_order(tau, s, l), its completion time)``. The least feasible candidate time is searched outward
    from ``near`` (e.g. the last iteration's time: the per-chunk times drift slowly, so a few tests instead of a
    bisection's ~9 at n = 100); the result does not depend on ``near``."""
    tau = np.asarray(tau, dtype=float)
    n = len(tau)
    ell = s + 1
    candidates = np.unique((tau[:, None] * np.arange(1, ell + 1)[None, :]).ravel())
    found: dict[int, object] = {}

    def feasible(i: int) -> bool:    # may every chunk be covered (l times) by the candidate time i?
        caps = tuple(np.minimum(ell, np.floor(candidates[i] / tau + 1e-12)).astype(int).tolist())
        found[i] = _feasible(n, s, caps) if l == 1 else _feasible_multi(n, s, caps, l)
        return found[i] is not None

    guess = len(candidates) - 1 if near is None else int(np.searchsorted(candidates, near))
    least = _least_true(feasible, len(candidates), guess)
    best = found.get(least)
    natural = natural_order(n, s)
    if best is None:    # cannot happen (at the largest candidate every worker does all its chunks); be safe
        return natural, completion_time(natural, tau, l)
    if l == 1:
        best = [{int(w)} for w in best]
    orders = []
    for w in range(n):
        mine = [c for c in natural[w] if w in best[c]]
        orders.append(tuple(mine + [c for c in natural[w] if w not in best[c]]))
    return tuple(orders), float(candidates[least])


def _least_true(ok, size: int, guess: int) -> int:
    """The least ``i`` in ``range(size)`` with ``ok(i)`` for ``ok`` false then true (``size - 1`` if none is):
    steps doubling outward from ``guess``, then a bisection; ``ok`` is called once per index at most."""
    seen: dict[int, bool] = {}

    def test(i: int) -> bool:
        if i not in seen:
            seen[i] = ok(i)
        return seen[i]

    guess = min(max(guess, 0), size - 1)
    if test(guess):
        lo, hi, step = guess - 1, guess, 1          # test(hi); find a false lo, or -1
        while lo >= 0 and test(lo):
            hi, step = lo, step * 2
            lo = hi - step
        lo = max(lo, -1)
    else:
        lo, hi, step = guess, guess + 1, 1          # not test(lo); find a true hi
        while hi < size - 1 and not test(hi):
            lo, step = hi, step * 2
            hi = lo + step
        hi = min(hi, size - 1)
        if not test(hi):
            return hi                               # none is (the caller checks)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if test(mid):
            hi = mid
        else:
            lo = mid
    return hi


def brute_force_order(tau, s: int, l: int = 1) -> tuple[float, tuple[tuple[int, ...], ...]]:
    """The least :func:`completion_time` over every combination of orders, and one order achieving it (for tests,
    ``n <= 6``: ``((s+1)!)^n`` combinations)."""
    tau = np.asarray(tau, dtype=float)
    n = len(tau)
    perms = [list(itertools.permutations(chunks)) for chunks in natural_order(n, s)]
    best_t, best_o = np.inf, None
    for combo in itertools.product(*perms):
        t = completion_time(combo, tau, l)
        if t < best_t:
            best_t, best_o = t, combo
    return best_t, best_o
