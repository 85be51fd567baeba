"""Counter-based random streams for mini-batches: a splitmix64 hash of ``(seed, t, j, n_parts, counter)``.

Every worker that holds partition ``j`` draws the same batch at iteration ``t``, whatever else it computes and in
whatever order (see the package docstring, "Mini-batch determinism"): :func:`_stream_keys` gives each requested
partition its key, :func:`_draws` the stream's words, :func:`_sample_local` the batch's positions (Floyd's algorithm
or the ``b`` smallest random keys).
"""

from __future__ import annotations

import numpy as np

_GAMMA = np.uint64(0x9E3779B97F4A7C15)   # the splitmix64 constants
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer, elementwise on a uint64 array (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _stream_keys(seed: int, t: int, parts: np.ndarray, n_parts: int) -> np.ndarray:
    """One 64-bit key per partition, a hash of ``(seed, t, j, n_parts)``."""
    x = np.full(parts.shape, seed & _MASK64, dtype=np.uint64)
    for v in (np.uint64(t & _MASK64), parts.astype(np.uint64), np.uint64(n_parts & _MASK64)):
        x = _mix(x + _GAMMA) ^ v
    return _mix(x + _GAMMA)


def _draws(keys: np.ndarray, count: int) -> np.ndarray:
    """``(len(keys), count)`` uint64 draws: the splitmix64 stream of each key."""
    ctr = (np.arange(1, count + 1, dtype=np.uint64) * _GAMMA)[None, :]
    return _mix(keys[:, None] + ctr)


def _uniform(bits: np.ndarray) -> np.ndarray:
    """Uniform doubles in [0, 1) from the top 53 bits."""
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def _sample_local(keys: np.ndarray, sizes: np.ndarray, b: int) -> np.ndarray:
    """``(m, b)`` local indices: row ``i`` a batch of ``b`` from ``range(sizes[i])``, drawn from ``keys[i]``."""
    m = len(keys)
    out = np.empty((m, b), dtype=np.int64)
    if m == 0:
        return out
    replace = sizes < b
    floyd = ~replace & (b * b <= sizes)
    bykeys = ~replace & ~floyd
    if replace.any() or floyd.any():
        rows = np.flatnonzero(replace | floyd)
        u = _uniform(_draws(keys[rows], b))
        n = sizes[rows]
        rep = replace[rows]
        # with replacement: b independent uniform indices
        if rep.any():
            out[rows[rep]] = np.minimum((u[rep] * n[rep, None]).astype(np.int64), n[rep, None] - 1)
        # Floyd's algorithm: for i = n-b .. n-1 draw r in [0, i]; take i instead if r is already taken.
        fl = ~rep
        if fl.any():
            uf, nf = u[fl], n[fl]
            chosen = np.empty((len(nf), b), dtype=np.int64)
            for step in range(b):
                i = nf - b + step
                r = np.minimum((uf[:, step] * (i + 1)).astype(np.int64), i)
                if step:
                    r = np.where((chosen[:, :step] == r[:, None]).any(axis=1), i, r)
                chosen[:, step] = r
            out[rows[fl]] = chosen
    if bykeys.any():
        rows = np.flatnonzero(bykeys)
        n = sizes[rows]
        width = int(n.max())
        bits = _draws(keys[rows], width)
        bits[np.arange(width)[None, :] >= n[:, None]] = np.uint64(_MASK64)   # padding never wins
        order = np.argpartition(bits, b - 1, axis=1) if b < width else np.argsort(bits, axis=1)
        out[rows] = order[:, :b]
    return out
