"""Approximate gradient codes: less redundancy, or stop before a decodable set arrives (REFERENCES section 5).

None of these codes promises the exact sum of the partial gradients; every decoding reports its residual
``||B_F^T a - 1||_2 / sqrt(k)``. ``optimal`` decoding minimises that residual (least squares, or a closed form
where the code has one); ``one_step`` decoding applies one fixed, cheap rule.

- :class:`Expander`: ``B = A(G)/d`` for a random ``d``-regular graph, ``d = s + 1`` (Raviv et al.; Glasgow and
  Wootters).
- :class:`GraphCode`: workers are the edges of a random ``(s+1)``-regular graph on the partitions, with an
  ``O(n + m)`` optimal decoder (Glasgow and Wootters, 2006.09638).
- :class:`Bernoulli`: random support with density ``(s+1)/k`` (Charles, Papailiopoulos, Ellenberg,
  1711.06771).
- :class:`Stochastic`: each partition on ``s + 1`` random workers, scaled to be unbiased (Bitar, Wootters,
  El Rouayheb).
- :class:`ErasureHead`: fractional repetition, one message per covered group (Wang, Charles, Papailiopoulos,
  1901.09671).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, check_float
from ._base import Code

# --- random regular graphs (no networkx) --------------------------------------------------------------------


def _circulant_edges(v: int, d: int) -> list[tuple[int, int]]:
    """Simple ``d``-regular circulant graph on ``v`` vertices (``v d`` even, ``d < v``): the swaps' start."""
    edges = [(i, (i + o) % v) for o in range(1, d // 2 + 1) for i in range(v)]
    if d % 2:  # v is even: the "diameter" chords i -- i + v/2, each listed once
        edges += [(i, i + v // 2) for i in range(v // 2)]
    return edges


def _double_edge_swaps(edges: list[tuple[int, int]], rng: np.random.Generator, attempts: int) -> None:
    """Randomise ``edges`` in place by seeded double-edge swaps ``(a,b),(c,d) -> (a,d),(c,b)``.

    A swap keeps every degree; it is rejected when it would create a loop or a multi-edge, so the graph stays
    simple and regular whatever happens (on a complete graph every swap is rejected, which is correct: it is
    the only simple graph of its degree).
    """
    present = {(min(e), max(e)) for e in edges}
    picks = rng.integers(0, len(edges), size=(attempts, 2)).tolist()
    flips = (rng.random(attempts) < 0.5).tolist()
    for (i, j), flip in zip(picks, flips, strict=True):
        if i == j:
            continue
        a, b = edges[i]
        c, d = edges[j] if not flip else edges[j][::-1]
        if a == d or c == b:
            continue
        e1, e2 = (min(a, d), max(a, d)), (min(c, b), max(c, b))
        if e1 in present or e2 in present:
            continue
        present -= {(min(a, b), max(a, b)), (min(c, d), max(c, d))}
        present |= {e1, e2}
        edges[i], edges[j] = (a, d), (c, b)


def _random_regular_edges(v: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """``(v*d/2, 2)`` edges of a random simple ``d``-regular graph on ``v`` vertices, reproducible from rng.

    Circulant start, ``10 m`` swap attempts (enough to mix in practice), then a random relabelling of the
    vertices and a random edge order, so that no structure of the start is tied to the indices.
    """
    edges = _circulant_edges(v, d)
    _double_edge_swaps(edges, rng, attempts=max(100, 10 * len(edges)))
    relabel = rng.permutation(v)
    arr = relabel[np.array(edges, dtype=np.int64).reshape(-1, 2)]
    return arr[rng.permutation(len(arr))]


def _random_cycle_edges(v: int, rng: np.random.Generator) -> np.ndarray:
    """One random Hamiltonian cycle on ``v >= 3`` vertices (swaps on a cycle may split it into several)."""
    order = rng.permutation(v)
    return np.stack([order, np.roll(order, -1)], axis=1)


# --- the codes ----------------------------------------------------------------------------------------------


class Expander(Code):
    """Expander code: ``B = A(G) / d``, ``G`` a random ``d``-regular graph on ``k = n`` vertices, d = s + 1.

    Worker ``i`` holds the partitions of its ``d`` neighbours in ``G``, so every partition is held by
    ``d = s + 1`` workers. Optimal decoding is least squares on ``B_F^T a = 1``; one-step decoding scales
    every responder by ``k / sum(B_F) = n / |F|``. Needs ``n * (s + 1)`` even and ``s + 1 < n``. The graph is
    a seeded random regular graph (circulant start plus double-edge swaps). Sources: Raviv, Tamo, Tandon,
    Dimakis; Glasgow and Wootters, "Approximate Gradient Coding with Optimal Decoding" (2006.09638).

        >>> import numpy as np
        >>> from gradcode import make_code
        >>> code = make_code("expander", n=10, s=2, seed=1)
        >>> sorted(set((code.B > 0).sum(axis=0).tolist()))   # every partition on s + 1 workers
        [3]
        >>> code.residual(list(range(10)), "optimal") < 1e-8  # no stragglers: exact
        True
        >>> F = [0, 1, 2, 3, 5, 6, 8]                          # workers 4, 7, 9 straggle
        >>> bool(code.residual(F, "optimal") <= code.residual(F, "one_step"))
        True
    """

    name = "expander"
    description = "B = A(G)/d for a random d-regular graph, d = s + 1"
    exact = False

    def _check(self) -> None:
        d = self.s + 1
        if d >= self.n:
            raise ConfigError(
                f"expander: degree d = s + 1 = {d} must be smaller than n = {self.n} (no simple {d}-regular "
                f"graph on {self.n} vertices); accepted: 0 <= s <= {self.n - 2}"
            )
        if self.n * d % 2:
            odd_s = self.s - 1 if self.s else 1
            raise ConfigError(
                f"expander: n * (s + 1) must be even for a {d}-regular graph on n vertices, got "
                f"n = {self.n}, s = {self.s}; accepted: an even n (e.g. n = {self.n + 1}) or an odd s "
                f"(e.g. s = {odd_s})"
            )

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        d = self.s + 1
        edges = _random_regular_edges(self.n, d, rng)
        A = np.zeros((self.n, self.n))
        A[edges[:, 0], edges[:, 1]] = 1.0
        A[edges[:, 1], edges[:, 0]] = 1.0
        return A / d


def _graph_code_sizes(s: int, lo: int) -> int:
    """Smallest ``n >= lo`` accepted by :class:`GraphCode` for ``s``: ``(s+1) | 2n`` and ``2n > (s+1)^2``."""
    n = max(lo, 1)
    while (2 * n) % (s + 1) or 2 * n <= (s + 1) ** 2:
        n += 1
    return n


class GraphCode(Code):
    """Graph code: workers are the ``n`` edges of a random (s+1)-regular graph on ``k = 2n/(s+1)`` partitions.

    Worker ``e = (u, v)`` sends ``g_u + g_v`` (``B[e, u] = B[e, v] = 1``), so each partition is held by its
    ``s + 1`` incident edges and each worker computes two partitions. ``s = 1`` gives one random cycle. Needs
    ``(s+1) | 2n`` and ``k > s + 1``.

    The optimal decoder is the closed form of Glasgow and Wootters, "Approximate Gradient Coding with Optimal
    Decoding" (2006.09638), per connected component of the surviving graph (vertices = partitions, edges =
    responders): ``B_F^T a`` is 1 on a non-bipartite component; on a bipartite one with sides ``L >= R`` it is
    ``1 + (L-R)/(L+R)`` on ``R`` and ``1 - (L-R)/(L+R)`` on ``L``; 0 on an isolated vertex. Edge weights
    achieving it come from a BFS spanning tree (peel the leaves), plus one odd-cycle edge to fix the root of a
    non-bipartite component: ``O(n + m)`` and equal to least squares.

        >>> from gradcode import make_code
        >>> code = make_code("graph", n=12, s=2, seed=0)
        >>> code.k, sorted(set((code.B > 0).sum(axis=0).tolist())), sorted(set(code.B.sum(axis=1).tolist()))
        (8, [3], [2.0])
        >>> code.residual(list(range(12)), "optimal") < 1e-12
        True
    """

    name = "graph"
    description = "workers are the edges of a random (s+1)-regular graph on the partitions"
    exact = False

    def _check(self) -> None:
        d = self.s + 1
        if (2 * self.n) % d or 2 * self.n <= d * d:
            down = [n for n in range(self.n - 1, 0, -1) if (2 * n) % d == 0 and 2 * n > d * d][:1]
            near = sorted(set(down + [_graph_code_sizes(self.s, self.n)]))
            raise ConfigError(
                f"graph: needs (s + 1) | 2n (an (s+1)-regular graph with n edges) and k = 2n/(s+1) > s + 1 "
                f"vertices, got n = {self.n}, s = {self.s}; accepted for s = {self.s}: n in {near} (or any n "
                f"with 2n divisible by {d} and 2n > {d * d})"
            )

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        d, k = self.s + 1, 2 * self.n // (self.s + 1)
        edges = _random_cycle_edges(k, rng) if d == 2 else _random_regular_edges(k, d, rng)
        self._ends = [(int(u), int(v)) for u, v in edges]
        B = np.zeros((self.n, k))
        B[np.arange(self.n), edges[:, 0]] = 1.0
        B[np.arange(self.n), edges[:, 1]] = 1.0
        return B

    def _optimal_weights(self, F: np.ndarray) -> np.ndarray:
        """Closed-form least squares per component of the surviving graph (see the class docstring)."""
        adj: dict[int, list[tuple[int, int]]] = {}
        for idx, e in enumerate(F.tolist()):
            u, v = self._ends[e]
            adj.setdefault(u, []).append((v, idx))
            adj.setdefault(v, []).append((u, idx))
        weights = [0.0] * len(F)
        depth: dict[int, int] = {}
        for root in adj:  # vertices without a responding edge are isolated: coefficient 0, nothing to do
            if root not in depth:
                self._solve_component(adj, root, depth, weights)
        return np.array(weights)

    @staticmethod
    def _solve_component(adj, root: int, depth: dict, weights: list) -> None:
        """Edge weights on ``root``'s component making its vertex coefficients the least-squares optimum."""
        # BFS spanning tree; a non-tree edge between two vertices of equal depth parity closes an odd cycle.
        depth[root] = 0
        order, parent, odd = [root], {root: (root, -1)}, None
        for x in order:  # appending while iterating: plain BFS
            for y, idx in adj[x]:
                if y not in depth:
                    depth[y] = depth[x] + 1
                    parent[y] = (x, idx)
                    order.append(y)
                elif odd is None and (depth[y] - depth[x]) % 2 == 0:
                    odd = (x, y, idx)
        demand = dict.fromkeys(order, 1.0)
        if odd is None:  # bipartite: project 1 onto {sum over L = sum over R}, the span of the edge columns
            even = sum(1 for x in order if depth[x] % 2 == 0)
            big, small = max(even, len(order) - even), min(even, len(order) - even)
            delta = (big - small) / (big + small)
            big_parity = 0 if even >= len(order) - even else 1
            for x in order:
                demand[x] = 1.0 - delta if depth[x] % 2 == big_parity else 1.0 + delta
            _peel(order, parent, demand, weights)
            return
        # Non-bipartite: the tree alone leaves a residual r at the root; weight t on the odd edge (x, y)
        # changes it by -2t(-1)^depth(x), so t = r (-1)^depth(x) / 2 makes every vertex equation hold.
        r = _peel(order, parent, dict(demand), weights)
        x, y, idx = odd
        t = r * (-1) ** depth[x] / 2.0
        demand[x] -= t
        demand[y] -= t
        weights[idx] = t
        _peel(order, parent, demand, weights)


def _peel(order: list, parent: dict, demand: dict, weights: list) -> float:
    """Tree edge weights meeting ``demand`` at each non-root vertex, leaves first; returns the root's rest."""
    for y in reversed(order[1:]):
        x, idx = parent[y]
        weights[idx] = demand[y]
        demand[x] -= demand[y]
    return demand[order[0]]


class Bernoulli(Code):
    """Bernoulli code: ``B[i, j] ~ Bernoulli((s+1)/k)`` independently, coefficient 1, ``k = n``, seeded.

    Each partition is held by ``s + 1`` workers on average (possibly none). Optimal decoding is least squares;
    one-step decoding scales every responder by ``k / sum(B_F)``. Source: Charles, Papailiopoulos, Ellenberg,
    "Approximate gradient coding via sparse random graphs" (1711.06771).

        >>> from gradcode import make_code
        >>> code = make_code("bernoulli", n=16, s=3, seed=0)
        >>> round(float(code.B.sum()) / code.k, 1)      # about s + 1 workers per partition
        3.6
        >>> F = [0, 1, 2, 4, 5, 6, 8, 9, 11, 12, 14, 15]
        >>> bool(code.residual(F, "optimal") <= code.residual(F, "one_step"))
        True
    """

    name = "bernoulli"
    description = "each worker takes each partition with probability (s+1)/k"
    exact = False

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        return (rng.random((self.n, self.n)) < (self.s + 1) / self.n).astype(float)


class Stochastic(Code):
    """Stochastic gradient coding: each partition on ``s + 1`` distinct random workers, B = 1/((s+1)(1-p)).

    ``k = n``; ``p`` is the probability that a worker straggles (``0 <= p < 1``). If each worker responds
    independently with probability ``1 - p``, the plain sum of what arrives is unbiased:
    ``E[sum_{i in F} y_i] = sum_j (s+1)(1-p) g_j / ((s+1)(1-p)) = sum_j g_j``. So one-step decoding is all
    ones (the master just sums); optimal decoding is least squares. Source: Bitar, Wootters, El Rouayheb,
    "Stochastic gradient coding for straggler mitigation in distributed learning".

        >>> from gradcode import make_code
        >>> code = make_code("stochastic", n=8, s=1, p=0.5, seed=0)
        >>> sorted(set((code.B > 0).sum(axis=0).tolist())), float(code.B.max())
        ([2], 1.0)
        >>> code.decode([0, 3, 4], "one_step").tolist()
        [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    """

    name = "stochastic"
    description = "each partition on s + 1 random workers, scaled 1/((s+1)(1-p)): unbiased"
    exact = False

    def __init__(self, n: int, s: int, *, p: float = 0.0, **kwargs):
        self.p = check_float("p", p)
        if not 0.0 <= self.p < 1.0:
            raise ConfigError(f"stochastic: straggling probability p must satisfy 0 <= p < 1, got {self.p}")
        super().__init__(n, s, **kwargs)

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        B = np.zeros((self.n, self.n))
        for j in range(self.n):
            B[rng.choice(self.n, size=self.s + 1, replace=False), j] = 1.0
        return B / ((self.s + 1) * (1.0 - self.p))

    def _one_step_weights(self, F: np.ndarray) -> np.ndarray:
        return np.ones(len(F))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, s={self.s}, k={self.k}, p={self.p}, seed={self.seed})"


class ErasureHead(Code):
    """ErasureHead: the fractional-repetition layout, decoded by summing one message per covered group.

    Needs ``(s+1) | n``; ``k = n``. Workers ``g(s+1) .. g(s+1)+s`` form group ``g`` and all send
    ``sum_{j = g(s+1)}^{g(s+1)+s} g_j``. The master stops early (a deadline or a count, decided by the scheme)
    and sums the first responder of every covered group with weight 1; uncovered groups are simply missing
    (biased, a small noise floor). This is also the optimal decoder for the layout: a group's partitions
    appear only in that group's identical rows, so a covered group's coefficients can be made exactly 1 and an
    uncovered group's are 0 whatever the weights. Source: Wang, Charles, Papailiopoulos, "ErasureHead:
    Distributed gradient descent without delays using approximate gradient coding" (1901.09671).

        >>> from gradcode import make_code
        >>> code = make_code("erasurehead", n=6, s=1)
        >>> code.decode([1, 2, 3], "one_step").tolist()      # groups {0,1}, {2,3} covered, {4,5} missing
        [0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
        >>> round(code.residual([1, 2, 3]) ** 2 * code.k, 6)  # two partitions missing
        2.0
    """

    name = "erasurehead"
    description = "fractional repetition, stop early and sum one message per covered group"
    exact = False

    def _check(self) -> None:
        g = self.s + 1
        if self.n % g:
            lower, upper = self.n - self.n % g, self.n - self.n % g + g
            raise ConfigError(
                f"erasurehead: n must be a multiple of s + 1 = {g} (groups of s + 1 workers), got "
                f"n = {self.n}; accepted: n = {lower} or n = {upper} (or s + 1 dividing {self.n})"
            )

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        group = np.arange(self.n) // (self.s + 1)
        return (group[:, None] == group[None, :]).astype(float)

    def _first_per_group(self, F: np.ndarray) -> np.ndarray:
        # F is sorted, so np.unique's first index is the lowest-numbered responder of each covered group; the
        # messages of a group are identical, so which member is used does not matter.
        a = np.zeros(len(F))
        _, first = np.unique(F // (self.s + 1), return_index=True)
        a[first] = 1.0
        return a

    _optimal_weights = _first_per_group
    _one_step_weights = _first_per_group
