"""Graph code: workers are the edges of a random regular graph on the partitions, with its optimal peeling decoder.

Worker ``e = (u, v)`` sends ``g_u + g_v``. Least squares on the surviving graph has a closed form per connected
component (Glasgow and Wootters, "Approximate Gradient Coding with Optimal Decoding", 2006.09638), computed here in
``O(n + m)`` by peeling a spanning tree. See ``docs/references.md#gradient-codes``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ._base import Code
from .regular_graphs import random_cycle_edges, random_regular_edges


def _graph_code_sizes(s: int, lo: int) -> int:
    """Smallest ``n >= lo`` accepted by :class:`GraphCode` for ``s``: ``(s+1) | 2n`` and ``2n > (s+1)^2``."""
    n = max(lo, 1)
    while (2 * n) % (s + 1) or 2 * n <= (s + 1) ** 2:
        n += 1
    return n


class GraphCode(Code):
    """Graph code: workers are the ``n`` edges of a random (s+1)-regular graph on ``2n/(s+1)`` partitions.

    Worker ``e = (u, v)`` sends ``g_u + g_v`` (``B[e, u] = B[e, v] = 1``), so each partition is held by its
    ``s + 1`` incident edges and each worker computes two partitions. ``s = 1`` gives one random cycle. Needs
    ``(s+1) | 2n`` and ``n_parts = 2n/(s+1) > s + 1``.

    The optimal decoder is the closed form of Glasgow and Wootters, "Approximate Gradient Coding with Optimal
    Decoding" (2006.09638), on the surviving graph (vertices = partitions, edges = responders), computed by
    :func:`peeling_weights` in ``O(n + m)``; it equals least squares.

        >>> from gradcode import make_code
        >>> code = make_code("graph", n=12, s=2, seed=0)
        >>> code.n_parts, sorted(set((code.B > 0).sum(axis=0).tolist())), sorted(set(code.B.sum(axis=1).tolist()))
        (8, [3], [2.0])
        >>> code.residual(list(range(12)), "optimal") < 1e-12
        True
    """

    name = "graph"
    description = ("workers are edges of a random (s+1)-regular graph on the partitions; O(n + m) optimal decoder "
                   "(approximate)")
    exact = False

    def _check(self) -> None:
        d = self.s + 1
        if (2 * self.n) % d or 2 * self.n <= d * d:
            down = [n for n in range(self.n - 1, 0, -1) if (2 * n) % d == 0 and 2 * n > d * d][:1]
            near = sorted(set(down + [_graph_code_sizes(self.s, self.n)]))
            raise ConfigError(
                "graph: needs (s + 1) | 2n (an (s+1)-regular graph with n edges) and n_parts = 2n/(s+1) > s + 1 "
                f"vertices, got n = {self.n}, s = {self.s}; accepted for s = {self.s}: n in {near} (or any n "
                f"with 2n divisible by {d} and 2n > {d * d})"
            )

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        d, n_parts = self.s + 1, 2 * self.n // (self.s + 1)
        edges = random_cycle_edges(n_parts, rng) if d == 2 else random_regular_edges(n_parts, d, rng)
        self._ends = [(int(u), int(v)) for u, v in edges]
        B = np.zeros((self.n, n_parts))
        B[np.arange(self.n), edges[:, 0]] = 1.0
        B[np.arange(self.n), edges[:, 1]] = 1.0
        return B

    def _optimal_weights(self, F: np.ndarray) -> np.ndarray:
        """Closed-form least squares on the surviving graph: :func:`peeling_weights`."""
        return peeling_weights([self._ends[e] for e in F.tolist()])


def peeling_weights(edges) -> np.ndarray:
    r"""Least-squares weights ``a`` (one per edge) for ``B_F^T a ~ 1``, where row ``e`` of ``B_F`` is ``1`` on both
    ends of ``edges[e]``: ``O(vertices + edges)``, per connected component (Glasgow and Wootters, 2006.09638).

    The optimal ``B_F^T a`` is 1 on a non-bipartite component; on a bipartite one with sides ``L >= R`` it is
    ``1 + (L-R)/(L+R)`` on ``R`` and ``1 - (L-R)/(L+R)`` on ``L``; 0 on a vertex without edges. A BFS spanning tree,
    peeled from the leaves, meets it at every vertex but the root; one edge closing an odd cycle fixes the root.

    >>> peeling_weights([(0, 1), (1, 2), (2, 0)]).tolist()       # a triangle: every vertex exactly 1
    [0.5, 0.5, 0.5]
    >>> (peeling_weights([(0, 1), (1, 2)]) * 3).round(9).tolist()  # a path: sides {0, 2} and {1}, 2/3 and 4/3
    [2.0, 2.0]
    """
    adj: dict[int, list[tuple[int, int]]] = {}
    for idx, (u, v) in enumerate(edges):
        adj.setdefault(u, []).append((v, idx))
        adj.setdefault(v, []).append((u, idx))
    weights = [0.0] * len(edges)
    depth: dict[int, int] = {}
    for root in adj:  # vertices without an edge are isolated: coefficient 0, nothing to do
        if root not in depth:
            _solve_component(adj, root, depth, weights)
    return np.array(weights)


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
