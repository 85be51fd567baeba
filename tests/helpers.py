"""Helpers shared by the test files: the gradcode command in a subprocess, an MPI job launched as `gradcode run`
launches it, a small experiment spec, and waiting for processes to end.

Plain functions and constants (``from helpers import cli``): pytest puts this folder on ``sys.path`` for the test
files (rootdir-relative imports of a folder without ``__init__.py``); the fixtures are in ``conftest.py``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the environment of a gradcode subprocess: one BLAS thread, and the project importable without an install
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

# the harness's `mpi` argument: whether MPI runs are possible, and why
NO_MPI = (False, "MPI disabled in this test")
MPI_OK = (True, "`gradcode run`")


# --- the gradcode command -----------------------------------------------------------------------------------------
def cli(*args, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """``python -m gradcode ARGS`` (arguments as strings), its output captured; ``env`` defaults to :data:`ENV`."""
    kwargs.setdefault("env", ENV)
    return subprocess.run([sys.executable, "-m", "gradcode", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


# --- a small experiment (`gradcode compare`) ----------------------------------------------------------------------
EXPERIMENT = {
    "experiment": {"name": "safety"},
    "cluster": {"workers": 3, "kind": "sim"},
    "workload": {"name": "least_squares", "n_samples": 60, "dim": 4},
    "delay": {"name": "shifted_exponential", "a": 1.0, "mu": 1.0},
    "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 2}],
    "run": {"iterations": 5, "seeds": [0, 1]},
}
MPI_RUN = {"time_scale": 0.01, "grace": 2.0}     # the [run] keys of an MPI run: fast, and a grace for start-up


def experiment(**run) -> dict:
    """A copy of :data:`EXPERIMENT` with ``run`` merged into its ``[run]`` table."""
    out = copy.deepcopy(EXPERIMENT)
    out["run"].update(run)
    return out


def summary_rows(out: Path) -> list[dict]:
    """The rows of a comparison's ``summary.json``."""
    return json.loads((out / "summary.json").read_text())


# --- MPI jobs -----------------------------------------------------------------------------------------------------
MPI_SCALE = 0.02          # seconds per model time unit
MPI_WORKLOAD = {"name": "least_squares", "n_samples": 240, "dim": 8, "seed": 1}
MPI_DELAY = {"name": "shifted_exponential", "a": 1.0, "mu": 0.1}


def mpi_spec(scheme: dict, *, n: int = 4, iterations: int = 10, seed: int = 0, delay: dict | None = None,
             grace: float = 2.0, scale: float = MPI_SCALE) -> dict:
    """A one-run spec for an MPI job: ``n`` workers, :data:`MPI_WORKLOAD`, ``delay`` (:data:`MPI_DELAY`)."""
    return {"cluster": {"workers": n}, "workload": dict(MPI_WORKLOAD), "delay": delay or dict(MPI_DELAY),
            "scheme": scheme, "run": {"iterations": iterations, "seed": seed, "time_scale": scale, "grace": grace}}


def run_mpi(spec: dict, tmp_path: Path, *, env_extra: dict | None = None, timeout: float = 120):
    """Launch ``spec`` as `gradcode run` does (a master and one rank per worker) into ``tmp_path/out``: the
    finished process and the output folder."""
    import tomli_w

    from mpi_runtime.launch import prepare

    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    out = tmp_path / "out"
    cmd, env, _ = prepare(path, out, spec["cluster"]["workers"] + 1)
    env.update(env_extra or {})
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return proc, out


def mpi_env() -> dict:
    """The environment of an MPI job for the launcher found (oversubscription-friendly settings included)."""
    from mpi_runtime.launch import environment, find_mpiexec, mpi_flavor

    return environment(mpi_flavor(find_mpiexec()))



def read_whole_records(out: Path) -> list[dict]:
    """The records of a finished run's folder; a cut line fails the test."""
    from gradcode.output.report import read_records

    records, whole = read_records(out / "records.jsonl")
    assert whole, "a record line was cut"
    return records


def simulate_spec(spec: dict):
    """The simulator's run of a one-run spec (the same draws an MPI job of it makes)."""
    from gradcode.clusters.sim import simulate
    from gradcode.spec import build, load_spec

    s = load_spec(spec)
    schemes, delay, workload = build(s)
    return simulate(schemes[0], delay, workload, s.options)


# --- choosing well-separated seeds with the simulator's own arithmetic --------------------------------------------
# Wall-clock noise must not change who responds in an MPI job: a spec's seed is the first for which the simulator's
# own arithmetic (same draws) puts at least GAP model units (30 ms at MPI_SCALE) between the arrival that ends each
# iteration and the next one.
GAP = 1.5               # model units = 30 ms


def master_gaps(spec: dict) -> float:
    """Smallest gap between the stopping arrival and the next one, over the iterations (finish mode)."""
    import math

    import numpy as np

    from gradcode.clusters.driver import StopPolicy
    from gradcode.spec import build, load_spec

    s = load_spec(spec)
    schemes, delay, _ = build(s)
    scheme, n = schemes[0], s.workers
    clock, free, smallest = 0.0, np.zeros(n), math.inf
    for t in range(s.run["iterations"]):
        plan = scheme.plan(t)
        compute, comm = delay.sample(s.run["seed"], t, n, plan.load)
        begin = np.maximum(clock, free)
        arrive = begin + compute[0] + comm[0]
        times = np.sort(arrive[np.isfinite(arrive)])
        order = np.argsort(arrive, kind="stable")[:len(times)]
        m = StopPolicy(scheme).count(order, times, clock, plan)     # an exact code: its first decodable prefix
        end = times[m - 1]
        if m < len(times):     # who is in and who is out must not depend on timing noise
            smallest = min(smallest, float(times[m] - times[m - 1]))
        # a worker still late from before frees up during this iteration: whether it takes this plan (freed before
        # the stop) or the next must not be a coin flip either (test_stale_messages_never_mixed_in[1] once failed
        # on a late worker freed 0.9 ms from the stop)
        late = free > clock
        if late.any():
            smallest = min(smallest, float(np.abs(free[late] - end).min()))
        started = begin < end
        free = np.where(started, arrive, free)
        clock = end
    return smallest


def separated(make, gaps) -> dict:
    """``make(seed)`` for the first seed whose spec ``gaps`` at least :data:`GAP`."""
    for seed in range(300):
        spec = make(seed)
        if gaps(spec) >= GAP:
            return spec
    raise AssertionError("no seed below 300 gives well-separated arrivals; change the spec")


# --- per-worker times in a record ---------------------------------------------------------------------------------
EPS = 1e-9


def check_worker_times(rec: dict, n: int, *, all_answer: bool = False) -> None:
    """Every per-worker field is n long; an answering worker's times are ordered within the iteration
    (``0 <= plan_received <= sent <= arrived <= end - start``, compute within receipt-to-send); every responder
    answered; a worker with no plan has no time at all."""
    import numpy as np

    from gradcode.clusters.records import WORKER_TIME_KEYS, record_worker_times

    fields = {key: record_worker_times(rec, key) for key in WORKER_TIME_KEYS}
    assert all(v is not None and len(v) == n for v in fields.values()), rec
    received, compute, sent, arrived = (fields[k] for k in WORKER_TIME_KEYS[:4])
    span = rec["end"] - rec["start"]
    answered = ~np.isnan(arrived)
    assert set(int(i) for i in rec["responders"]) <= set(np.flatnonzero(answered).tolist())
    if all_answer:
        assert answered.all(), rec
    assert not np.isnan(sent[answered]).any() and not np.isnan(received[answered]).any()
    assert (received[answered] >= -EPS).all()
    assert (sent[answered] >= received[answered] - EPS).all()
    assert (arrived[answered] >= sent[answered] - EPS).all()
    assert (arrived[answered] <= span + EPS).all()
    assert (compute[answered] >= 0).all()
    assert (received[answered] + compute[answered] <= sent[answered] + 1e-6).all()
    assert np.isnan(compute[np.isnan(received)]).all()

# --- the shared driver on a simulated cluster ---------------------------------------------------------------------
def run_driver(workload, iterations, scheme="sync", n=4, **training):
    """``workload`` trained by ``scheme`` on ``n`` simulated workers with constant delays: (records, cluster)."""
    from gradcode import make_delay, make_scheme
    from gradcode.clusters.sim import SimulatedCluster
    from gradcode.spec import RunOptions

    scheme = make_scheme(scheme, n=n)
    delay = make_delay("constant", value=1.0)
    scheme.bind(delay=delay)
    scheme.reset()
    cluster = SimulatedCluster(scheme, delay, workload, RunOptions(iterations=iterations, **training))
    return cluster.run(), cluster


# --- processes ------------------------------------------------------------------------------------------------------
def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")   # a zombie is dead


def wait_dead(pids, seconds: float = 10.0) -> list[int]:
    """Wait up to ``seconds`` for ``pids`` to end: those still alive."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def processes(tag: str) -> list[int]:
    """The processes whose command line holds ``tag`` (a test's own tmp path)."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines() if tag in line and "ps -eo" not in line]
