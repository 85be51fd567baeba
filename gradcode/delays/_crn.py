"""Common random numbers: the uniforms every delay model turns into times, and the checks of ``(seed, t, load)``.

The time of worker ``i`` at iteration ``t`` depends only on ``(seed, t, i, load)``: never on ``n``, on the other
workers, on which other iterations are sampled, or on the scheme asking. So each iteration has its own generator
``default_rng(SeedSequence([seed, t, stream, *path]))``, which draws uniforms with ``rng.random`` in worker order
(shape ``(n,)``, or ``(n, M)`` row-major for micro-batches): worker ``i``'s draws are a prefix-stable slice. A
model turns them into times by its inverse CDF. ``path`` keeps the components of a mixture apart (component ``j``
gets ``path + (j+1,)``). See ``docs/references.md#delay-models``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, check_float, check_int, check_seed  # noqa: F401  (check_seed: re-exported)

# streams: the persistent stragglers and the trace offset are keyed by the seed alone (``t`` slot 0)
STREAM_COMPUTE = 1
STREAM_COMM = 2
STREAM_MICRO = 3
STREAM_MIXTURE = 4
STREAM_PERSISTENT = 5
STREAM_TRACE = 6
STREAM_SLOWDOWN = 10   # added.py holds 7-9


def uniforms(seed: int, t_arr: np.ndarray, stream: int, path: tuple, shape: tuple) -> np.ndarray:
    """Uniforms ``(T, *shape)``, row ``r`` drawn from ``SeedSequence([seed, t_arr[r], stream, *path])``."""
    out = np.empty((len(t_arr),) + shape)
    for r, t in enumerate(t_arr.tolist()):
        rng = np.random.default_rng(np.random.SeedSequence([seed, t, stream, *path]))
        rng.random(out=out[r])
    return out


def per_worker_uniforms(seed: int, stream: int, path: tuple, n: int, width: int) -> np.ndarray:
    """Uniforms ``(n, width)`` keyed by the seed and the worker only (no iteration)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0, stream, *path]))
    return rng.random((n, width))


def check_t(t) -> np.ndarray:
    """Iteration numbers as a 1-D int64 array (an int is one iteration)."""
    arr = np.asarray(t)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ConfigError(f"t must be an int or a 1-D array of iteration numbers, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not (np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr))):
            raise ConfigError(f"t must hold integers (iteration numbers), got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        raise ConfigError(f"t must be >= 0, got {int(arr.min())}")
    return arr


def check_load(load, T: int, n: int) -> np.ndarray:
    """Units of work per worker broadcast to ``(T, n)`` (a read-only view when given as a scalar or ``(n,)``)."""
    try:
        arr = np.asarray(load, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(f"load must be a number or an array of numbers, got {load!r}") from None
    if arr.ndim != 0 and arr.shape not in ((n,), (T, n)):
        raise ConfigError(f"load must be a scalar, an (n,) = ({n},) or a (T, n) = ({T}, {n}) array, "
                          f"got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ConfigError("load must be finite and >= 0 (units of work per worker)")
    return np.broadcast_to(arr, (T, n))


def check_scalar_load(load) -> float:
    return check_float("load", load, low=0.0)
