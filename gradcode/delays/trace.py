"""Replay of measured straggler traces (``gradcode/data/traces``). See ``docs/references.md#delay-models``."""

from __future__ import annotations

import functools
import importlib.resources
import os
import warnings

import numpy as np

from ..errors import ConfigError, check_int
from ._base import DelayModel
from ._comm import Empirical, plus
from ._crn import STREAM_TRACE, check_seed, check_t, per_worker_uniforms


def shipped_traces() -> list[str]:
    """Names of the traces shipped in ``gradcode/data/traces``."""
    root = importlib.resources.files("gradcode") / "data" / "traces"
    return sorted(p.name[:-4] for p in root.iterdir() if p.name.endswith(".csv"))


COLUMNS = ("step", "dp_rank", "stage", "microbatch", "compute_s")
COMM_COLUMN = "comm_s"   # optional sixth column: communication time (what `gradcode trace export` writes)
_EXPECTED = (f"a CSV file whose first line is the header {','.join(COLUMNS)} (optionally ,{COMM_COLUMN}) and whose "
             "every other line holds those 5 (or 6) numbers")


def file_stamp(path: str) -> list:
    """``[path, size, mtime in ns]``: what identifies a trace file's content in the caches (a rewrite changes the
    size or the modification time)."""
    st = os.stat(path)
    return [path, st.st_size, st.st_mtime_ns]


@functools.lru_cache(maxsize=16)
def _parse_trace(path: str, size: int, mtime_ns: int) -> tuple[np.ndarray, list[tuple[int, int]], np.ndarray | None]:
    """``(times[pair, step, microbatch], pairs, comm[pair, step] or None)`` from a CSV ``step, dp_rank, stage,
    microbatch, compute_s[, comm_s]``. A pair's communication at a step is the mean of its micro-batches' ``comm_s``
    (an exported trace has one micro-batch per step).

    A file that is not such a trace is refused without quoting it: the path may name any file (a trace path is
    user input), and an error message must not echo its content.
    """
    ncol = _check_header(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # numpy's "input contained no data": the check below says it
            raw = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    except (OSError, ValueError):   # numpy's message quotes the offending line: not repeated here
        raise ConfigError(f"trace {path!r} is not a trace: expected {_EXPECTED}") from None
    if raw.shape[1] != ncol or raw.shape[0] == 0:
        raise ConfigError(f"trace {path!r} must have the {ncol} columns of its header on every line "
                          "and at least one row")
    ints = raw[:, :4].astype(np.int64)
    if np.any(ints != raw[:, :4]):
        raise ConfigError(f"trace {path!r}: step, dp_rank, stage and microbatch must be integers")
    steps, s_idx = np.unique(ints[:, 0], return_inverse=True)
    pairs, p_idx = np.unique(ints[:, 1:3], axis=0, return_inverse=True)
    mbs, m_idx = np.unique(ints[:, 3], return_inverse=True)
    P, S, Mt = len(pairs), len(steps), len(mbs)
    times = np.full((P, S, Mt), np.nan)
    where = (p_idx.ravel(), s_idx.ravel(), m_idx.ravel())
    times[where] = raw[:, 4]
    if raw.shape[0] != P * S * Mt or np.isnan(times).any():
        raise ConfigError(f"trace {path!r} is not a complete grid: every (step, dp_rank, stage, microbatch) must "
                          f"appear exactly once ({P} rank pairs x {S} steps x {Mt} micro-batches expected)")
    if not np.all(np.isfinite(times)) or np.any(times <= 0):
        raise ConfigError(f"trace {path!r}: compute_s must be finite and > 0")
    times.setflags(write=False)
    comm = None
    if ncol == 6:
        if not np.all(np.isfinite(raw[:, 5])) or np.any(raw[:, 5] < 0):
            raise ConfigError(f"trace {path!r}: {COMM_COLUMN} must be finite and >= 0")
        per_mb = np.zeros((P, S, Mt))
        per_mb[where] = raw[:, 5]
        comm = per_mb.mean(axis=2)
        comm.setflags(write=False)
    return times, [(int(a), int(b)) for a, b in pairs], comm


def _check_header(path: str) -> int:
    """The first line names the 5 columns, or those and ``comm_s`` (compared, never echoed); returns how many."""
    try:
        with open(path, "rb") as fh:
            head = fh.readline(4096).decode("utf-8")
    except OSError as err:
        raise ConfigError(f"trace {path!r} cannot be read: {err.strerror or type(err).__name__}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"trace {path!r} is not a trace (not UTF-8 text): expected {_EXPECTED}") from None
    names = tuple(x.strip().lower() for x in head.strip().lstrip("\ufeff").split(","))
    if names not in (COLUMNS, COLUMNS + (COMM_COLUMN,)):
        raise ConfigError(f"trace {path!r} is not a trace (its first line is not the header): expected {_EXPECTED}")
    return len(names)


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

    ``offset``: the step worker 0 reads at iteration 0 (default None: drawn from the seed, so that seeds see
    different stretches of the trace); ``offset = 0`` replays a captured run step for step (``gradcode trace
    export`` writes worker ``i`` as ``dp_rank = i``, iteration ``t`` as step ``t``).

    A trace with a sixth column ``comm_s`` (what ``gradcode trace export`` writes) also replays communication:
    worker ``i``'s load-independent time at iteration ``t`` is ``comm_s`` of the (pair, step) it reads (divided by
    the same ``scale`` when ``normalize``), plus the model's own ``comm`` term if one is given. In the i.i.d. view
    the trace's communication is the empirical distribution of its ``P*S`` values, taken as independent of the
    compute time (in the replay itself each worker keeps its step's pair of times). Such a captured trace holds one
    speed per worker and step, so ``sample_micro`` gives all ``M`` micro-batches of a step that step's time (instead
    of continuing into the next steps). A wrapper around this model (``straggle``, ``heterogeneous``, ``persistent``,
    ``unresponsive``, a ``mixture`` component) replays the column too, unless the wrapper is given a ``comm`` of its
    own: that replaces the wrapped model's communication, this column included.

    >>> from gradcode.delays import make_delay
    >>> d = make_delay("trace", trace="bytedance-ST")
    >>> d.sample_micro(0, 0, n=8, M=4)[0].shape
    (1, 8, 4)
    """

    name = "trace"
    description = "replay of a measured straggler trace (ByteDance SE/AR/ST, or a CSV path: gradcode trace export)"
    source = "[paper: 2505.05713]"

    def __init__(self, trace: str = "bytedance-SE", normalize: bool = True, offset: int | None = None, *,
                 comm: float = 0.0, comm_dist: str = "constant"):
        super().__init__(comm=comm, comm_dist=comm_dist)
        if not isinstance(normalize, (bool, np.bool_)):
            raise ConfigError(f"normalize must be true or false, got {normalize!r}")
        if offset is not None:
            offset = check_int("offset", offset, low=0)
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
        # the file's stamp: part of the key of the parsed file and of the cached order statistics
        self.source_stamp = file_stamp(path)
        times, pairs, trace_comm = _parse_trace(*self.source_stamp)
        self.trace, self.normalize, self.fixed_offset = str(trace), bool(normalize), offset
        self.scale = float(times.mean()) if normalize else 1.0
        self.times = times / self.scale  # (P, S, M_tr)
        self.pairs = pairs
        self.P, self.S, self.M_tr = self.times.shape
        self.step_means = self.times.mean(axis=2)  # (P, S)
        # the trace's own communication (P, S), or None: added to the model's comm term in the replay; in the
        # i.i.d. view its empirical distribution joins that term (_cd, which the shared order statistics read)
        self.trace_comm = None if trace_comm is None else trace_comm / self.scale
        self._own_cd = self._cd
        if self.trace_comm is not None:
            self._cd = plus(self._cd, Empirical(self.trace_comm.ravel()))
        self._params = {"trace": self.trace, "normalize": self.normalize, "offset": offset}

    def offset(self, seed: int) -> int:
        """The trace step that worker 0 reads at iteration 0 under ``seed``."""
        return self._offset(check_seed(seed), ())

    def _offset(self, seed, path):
        if self.fixed_offset is not None:
            return self.fixed_offset % self.S
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
        if self.trace_comm is not None:   # a captured trace: one speed per worker and step, for all its micro-batches
            return np.repeat(self.step_means[pair, step][:, :, None], M, axis=2)
        j = np.arange(M)
        steps = (step[:, :, None] + (j // self.M_tr)[None, None, :]) % self.S
        return self.times[pair[:, :, None], steps, (j % self.M_tr)[None, None, :]]

    def _comm(self, seed, t_arr, n, path=()):
        own = self._draw_comm(self._own_cd, seed, t_arr, n, path)
        if self.trace_comm is None:
            return own
        pair, step = self._map(seed, t_arr, n, path)
        return own + self.trace_comm[pair, step]

    def _comm_key(self):
        key = super()._comm_key()
        return key if self.trace_comm is None else (*key, "trace comm", self.trace, self.scale)

    _discrete = True

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
