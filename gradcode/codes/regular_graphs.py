"""Seeded random simple regular graphs (no networkx): the supports of the expander and graph codes.

A circulant graph of the wanted degree, randomised by double-edge swaps (each keeps every degree and is rejected if
it would create a loop or a multi-edge), then relabelled: reproducible from the generator, simple and regular
whatever happens.
"""

from __future__ import annotations

import numpy as np


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


def random_regular_edges(v: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """``(v*d/2, 2)`` edges of a random simple ``d``-regular graph on ``v`` vertices, reproducible from rng.

    Circulant start, ``10 m`` swap attempts (enough to mix in practice), then a random relabelling of the
    vertices and a random edge order, so that no structure of the start is tied to the indices.
    """
    edges = _circulant_edges(v, d)
    _double_edge_swaps(edges, rng, attempts=max(100, 10 * len(edges)))
    relabel = rng.permutation(v)
    arr = relabel[np.array(edges, dtype=np.int64).reshape(-1, 2)]
    return arr[rng.permutation(len(arr))]


def random_cycle_edges(v: int, rng: np.random.Generator) -> np.ndarray:
    """One random Hamiltonian cycle on ``v >= 3`` vertices (swaps on a cycle may split it into several)."""
    order = rng.permutation(v)
    return np.stack([order, np.roll(order, -1)], axis=1)
