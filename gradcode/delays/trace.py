"""Replay of measured straggler traces (``gradcode/data/traces``). See ``docs/references.md#delay-models``."""

from __future__ import annotations

import functools
import importlib.resources
import os
import warnings

import numpy as np

from ..errors import ConfigError, check_int
from ._base import DelayModel
from ._crn import STREAM_TRACE, check_seed, check_t, per_worker_uniforms


def shipped_traces() -> list[str]:
    """Names of the traces shipped in ``gradcode/data/traces``."""
    root = importlib.resources.files("gradcode") / "data" / "traces"
    return sorted(p.name[:-4] for p in root.iterdir() if p.name.endswith(".csv"))


COLUMNS = ("step", "dp_rank", "stage", "microbatch", "compute_s")
_EXPECTED = (f"a CSV file whose first line is the header {','.join(COLUMNS)} and whose every other line holds "
             "those 5 numbers")


@functools.lru_cache(maxsize=16)
def _parse_trace(path: str, mtime: float) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """``(times[pair, step, microbatch], pairs)`` from a CSV ``step, dp_rank, stage, microbatch, compute_s``.

    A file that is not such a trace is refused without quoting it: the path may name any file (a trace path is
    user input), and an error message must not echo its content.
    """
    _check_header(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # numpy's "input contained no data": the check below says it
            raw = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    except (OSError, ValueError):   # numpy's message quotes the offending line: not repeated here
        raise ConfigError(f"trace {path!r} is not a trace: expected {_EXPECTED}") from None
    if raw.shape[1] != 5 or raw.shape[0] == 0:
        raise ConfigError(f"trace {path!r} must have the 5 columns step,dp_rank,stage,microbatch,compute_s "
                          "and at least one row")
    ints = raw[:, :4].astype(np.int64)
    if np.any(ints != raw[:, :4]):
        raise ConfigError(f"trace {path!r}: step, dp_rank, stage and microbatch must be integers")
    steps, s_idx = np.unique(ints[:, 0], return_inverse=True)
    pairs, p_idx = np.unique(ints[:, 1:3], axis=0, return_inverse=True)
    mbs, m_idx = np.unique(ints[:, 3], return_inverse=True)
    P, S, Mt = len(pairs), len(steps), len(mbs)
    times = np.full((P, S, Mt), np.nan)
    times[p_idx.ravel(), s_idx.ravel(), m_idx.ravel()] = raw[:, 4]
    if raw.shape[0] != P * S * Mt or np.isnan(times).any():
        raise ConfigError(f"trace {path!r} is not a complete grid: every (step, dp_rank, stage, microbatch) must "
                          f"appear exactly once ({P} rank pairs x {S} steps x {Mt} micro-batches expected)")
    if not np.all(np.isfinite(times)) or np.any(times <= 0):
        raise ConfigError(f"trace {path!r}: compute_s must be finite and > 0")
    times.setflags(write=False)
    return times, [(int(a), int(b)) for a, b in pairs]


def _check_header(path: str) -> None:
    """The first line names the 5 columns (compared, never echoed)."""
    try:
        with open(path, "rb") as fh:
            head = fh.readline(4096).decode("utf-8")
    except OSError as err:
        raise ConfigError(f"trace {path!r} cannot be read: {err.strerror or type(err).__name__}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"trace {path!r} is not a trace (not UTF-8 text): expected {_EXPECTED}") from None
    names = tuple(x.strip().lower() for x in head.strip().lstrip("\ufeff").split(","))
    if names != COLUMNS:
        raise ConfigError(f"trace {path!r} is not a trace (its first line is not the header): expected {_EXPECTED}")


class TraceDelay(DelayModel):
    """Replay of a measured trace (``gradcode/data/traces``, ``docs/references.md#delay-models``).
    [paper: 2505.05713, data]

    ``trace`` is a shipped name (``bytedance-SE`` default, ``bytedance-AR``, ``bytedance-ST``) or a CSV path
    with columns ``step, dp_rank, stage, microbatch, compute_s``. With ``P`` (dp_rank, stage) pairs
    (lexicographic order), ``S`` steps and ``M_tr`` micro-batches per step, worker ``i`` at iteration ``t``
    reads pair ``i mod P`` at step ``s = (t + offset(seed) + i // P) mod S`` (workers beyond ``P`` see other
    steps; ``offset`` is drawn from the seed). ``sample(load)`` is ``load * (mean micro-batch time of that
    pair at step s)``; ``sample_micro(M)`` gives micro-batch ``j`` the time of micro-batch ``j mod M_tr`` at
    step ``(s + j // M_tr) mod S`` (it continues into the next steps when ``M > M_tr``). ``normalize=True``
    divides every time by the trace's mean micro-batch time (one unit of work = one mean micro-batch). The
    i.i.d. view is the empirical distribution of the ``P*S`` (pair, step) means; replayed workers are not
    independent (shared steps, persistent ranks).

    >>> d = make_delay("trace", trace="bytedance-ST")
    >>> d.sample_micro(0, 0, n=8, M=4)[0].shape
    (1, 8, 4)
    """

    name = "trace"
    description = "replay of a measured straggler trace (ByteDance SE/AR/ST or a CSV path)"
    source = "[paper: 2505.05713]"

    def __init__(self, trace: str = "bytedance-SE", normalize: bool = True, *, comm: float = 0.0,
                 comm_dist: str = "constant"):
        super().__init__(comm=comm, comm_dist=comm_dist)
        if not isinstance(normalize, (bool, np.bool_)):
            raise ConfigError(f"normalize must be true or false, got {normalize!r}")
        if not isinstance(trace, (str, os.PathLike)):
            raise ConfigError(f"trace must be a shipped name ({', '.join(shipped_traces())}) or a CSV path, "
                              f"got {trace!r}")
        shipped = shipped_traces()
        if str(trace) in shipped:
            ref = importlib.resources.files("gradcode") / "data" / "traces" / f"{trace}.csv"
            with importlib.resources.as_file(ref) as p:
                path = str(p)
        elif os.path.isfile(trace):
            path = os.path.abspath(trace)
        else:
            raise ConfigError(f"trace {str(trace)!r} is neither a shipped trace ({', '.join(shipped)}) nor an "
                              "existing CSV file")
        times, pairs = _parse_trace(path, os.path.getmtime(path))
        self.source_stamp = [path, os.path.getmtime(path)]   # part of the key of cached order statistics
        self.trace, self.normalize = str(trace), bool(normalize)
        self.scale = float(times.mean()) if normalize else 1.0
        self.times = times / self.scale  # (P, S, M_tr)
        self.pairs = pairs
        self.P, self.S, self.M_tr = self.times.shape
        self.step_means = self.times.mean(axis=2)  # (P, S)
        self._params = {"trace": self.trace, "normalize": self.normalize}

    def offset(self, seed: int) -> int:
        """The trace step that worker 0 reads at iteration 0 under ``seed``."""
        return self._offset(check_seed(seed), ())

    def _offset(self, seed, path):
        return int(per_worker_uniforms(seed, STREAM_TRACE, path, 1, 1)[0, 0] * self.S)

    def mapping(self, seed: int, t, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``(pair, step)`` index arrays, each ``(T, n)``, read by each worker (``pairs[pair]`` is (dp_rank,
        stage))."""
        t_arr = check_t(t)
        n = check_int("n", n, low=1)
        return self._map(check_seed(seed), t_arr, n, ())

    def _map(self, seed, t_arr, n, path):
        i = np.arange(n)
        pair = np.broadcast_to(i % self.P, (len(t_arr), n))
        step = (t_arr[:, None] + self._offset(seed, path) + (i // self.P)[None, :]) % self.S
        return pair, step

    def _unit(self, seed, t_arr, n, path):
        pair, step = self._map(seed, t_arr, n, path)
        return self.step_means[pair, step]

    def _micro(self, seed, t_arr, n, M, path):
        pair, step = self._map(seed, t_arr, n, path)
        j = np.arange(M)
        steps = (step[:, :, None] + (j // self.M_tr)[None, None, :]) % self.S
        return self.times[pair[:, :, None], steps, (j % self.M_tr)[None, None, :]]

    @property
    def _discrete(self):
        return True

    def _atoms(self):
        v = self.step_means.ravel()
        return v, np.full(v.shape, 1.0 / v.size)

    def _unit_cdf(self, x):
        v = np.sort(self.step_means.ravel())
        return np.searchsorted(v, x, side="right") / v.size

    def _unit_mean(self):
        return float(self.step_means.mean())

    def _lower(self):
        return float(self.step_means.min())
