"""Entry point of every rank: ``mpiexec -n n+1 python -m mpi4py -m mpi_runtime SPEC.toml --out DIR``.

Rank 0 is the master (or, for a decentralized scheme, a peer with zero contribution that writes the records);
rank ``i + 1`` is worker ``i``. Every rank loads and validates the spec and builds the scheme, delay model and
workload itself (deterministic), so nothing but plans, models and messages travel.

Any exception on any rank is printed to stderr with the rank and its role. On rank 0 the summary is written with
the error (and the records so far stay), then ``MPI_Abort`` ends every rank of the job at once; a worker reports
its failure to rank 0 (which names it, writes its summary and aborts) and aborts by itself if rank 0 does not
within ``grace``. ``python -m mpi4py`` adds the same guarantee for anything that escapes. Every wait is bounded and
names the rank it waits for (``peers.py``): ``[run] startup_timeout`` until the run clock starts (start-up,
shared-memory set-up, warm-up), ``[run] grace`` after it.

Exit codes: 0 success; 0 also when the run completed but unresponsive workers had to be aborted at shutdown (the
master's ``run`` returns True, says so on stderr and in ``summary.json``, and this module calls ``MPI_Abort(0)``:
only an abort ends a hung rank); 1 a failure inside the job (a crashed rank, a stop rule that cannot hold, a rank
that stopped answering); 2 a bad spec or command line.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from mpi4py import MPI

from gradcode.clusters.records import write_summary
from gradcode.deaths import planned_deaths
from gradcode.errors import ConfigError
from gradcode.plumbing.children import die_with_grandparent, die_with_parent
from gradcode.spec import RunOptions

from . import protocol as P
from .config import FINISHED, STARTED, load_run
from .faults import Faults, check_hooks
from .hosts import gather_hosts, write_hosts
from .peers import MasterLost, Peers, who
from .protocol import RunFailure, precise_sleep


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mpi4py -m mpi_runtime",
                                description="run one scheme of a gradcode spec on an MPI cluster")
    p.add_argument("spec", help="experiment spec (TOML)")
    p.add_argument("--out", required=True, help="output folder for records.jsonl and summary.json (rank 0)")
    p.add_argument("--scheme", type=int, default=0, help="which [[schemes]] entry to run (default 0)")
    p.add_argument("--iterations", type=int, help="override [run] iterations")
    p.add_argument("--seed", type=int, help="override [run] seed")
    return p


class _Job:
    """What is known of the run so far: rank 0 writes the summary of a failure with it, at any point."""

    def __init__(self, peers: Peers):
        self.peers = peers
        self.out: Path | None = None
        self.cfg = None
        self.driver = None

    def write_failure(self, error: str) -> None:
        """Rank 0: ``summary.json`` with the error (and the records so far, if the run had begun)."""
        try:
            if self.driver is not None:
                self.driver.write_failure(error)
            elif self.cfg is not None and self.out is not None:
                self.out.mkdir(parents=True, exist_ok=True)
                write_summary(self.out, {"iterations": 0, **self.cfg.summary_fields([], error)})
        except Exception as err:  # noqa: BLE001 - the original error is the one to report
            print(f"mpi_runtime: rank 0 could not write the summary: {err}", file=sys.stderr, flush=True)

    @property
    def grace(self) -> float:
        return RunOptions().grace if self.cfg is None else self.cfg.options.grace


def run(argv: list[str] | None, job: _Job) -> bool:
    """This rank's part of the job; True if the run completed but hung ranks are left that only an abort ends."""
    args = _parser().parse_args(argv)
    world = MPI.COMM_WORLD
    job.out = Path(args.out)
    overrides = {k: getattr(args, k) for k in ("iterations", "seed") if getattr(args, k) is not None}
    cfg = job.cfg = load_run(args.spec, scheme_index=args.scheme, overrides=overrides)
    if world.Get_size() != cfg.workers + 1:
        raise ConfigError(f"the spec has {cfg.workers} workers, so the job needs {cfg.workers + 1} ranks "
                          f"(a master and the workers); it was launched with {world.Get_size()}")
    check_hooks(world.Get_size(), cfg.options.iterations)
    scheme, delay, workload = cfg.build()
    faults = Faults(world.Get_rank(), planned_deaths(cfg.options, cfg.workers))
    faults.maybe_crash("start")
    job.peers.checkpoint("start-up", cfg.options.startup_timeout)   # names the ranks that did not start
    if world.Get_rank() == 0:
        print(STARTED, flush=True)     # the launcher's start-up watchdog (launch.py) waits for this line
    comm = P.dup(world, cfg.options.startup_timeout, job.peers.check)   # our own communicator: no other tags
    hosts = gather_hosts(comm, cfg.options.startup_timeout, job.peers.check)
    if hosts is not None:
        write_hosts(job.out, hosts)
    precise_sleep()         # every rank emulates times and polls with time.sleep
    if scheme.decentralized:
        from .allreduce import Decentralized

        job.driver = Decentralized(comm, cfg, scheme, delay, workload, job.out, job.peers, faults)
        return job.driver.run()
    capacity = max(len(p) for p in scheme.plan(0).parts)
    if comm.Get_rank() == 0:
        from .master import Master

        if scheme.asynchronous:
            from .async_master import AsyncMaster as Master
        job.driver = Master(comm, cfg, scheme, delay, workload, capacity, job.out, job.peers, faults)
        return job.driver.run()
    from .worker import Worker

    Worker(comm, cfg, scheme, delay, workload, capacity, job.peers, faults).run()
    return False


def main(argv: list[str] | None = None) -> None:
    # a rank whose launcher (MPICH's proxy) is killed ends too, instead of running on as an orphan that keeps
    # writing the run folder (gradcode.plumbing.children)
    die_with_parent(signal.SIGTERM, os.getppid())
    die_with_grandparent(signal.SIGTERM)     # and when its proxy is killed (the rank runs under a shell)
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    job = _Job(Peers(world))
    try:
        hung = run(argv, job)
    except SystemExit as err:        # argparse: --help or a usage error
        if err.code not in (0, None):
            world.Abort(2)
        raise
    except BaseException as err:     # noqa: BLE001 - any error on any rank must end the whole job
        code = 2 if isinstance(err, ConfigError) else 1
        what = "error" if isinstance(err, (ConfigError, RunFailure)) else f"crashed ({type(err).__name__})"
        host = f" (on host {MPI.Get_processor_name()})"
        print(f"mpi_runtime: {who([rank])} {what}: {err}{host}", file=sys.stderr, flush=True)
        if rank == 0:
            job.write_failure(str(err) if what == "error" else f"{what}: {err}")
            print(FINISHED, flush=True)
        elif not isinstance(err, MasterLost):
            # rank 0 names this rank (and its host), and either goes on without it (a dead worker is an erasure to
            # a master/worker scheme: this rank ends alone, as if it had died) or writes its summary and aborts the
            # job; abort here if it does neither
            if job.peers.report_failure(f"{what}: {err}{host}", patience=job.grace + 1.0):
                sys.stderr.flush()
                os._exit(code)
        time.sleep(0.3)    # let the launcher forward the message before MPI_Abort tears the job down
        _abort(world, code)
    if rank == 0:
        print(FINISHED, flush=True)
    if hung:
        # the run is complete and on disk; only MPI_Abort can end the hung (or dead) ranks
        _abort(world, 0)
    MPI.Finalize()
    # Hydra (-disable-auto-cleanup) signals SIGUSR1 to every rank whenever a rank's PMI socket closes, so also while
    # this process ends: after MPI_Finalize that signal has nothing left to say (SIG_IGN: Python's exit leaves it)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    sys.exit(0)


def _abort(world: MPI.Comm, code: int) -> None:
    """``MPI_Abort(code)``, then end this process. MPICH's abort returns on the calling rank (measured with code 0)
    and the launcher kills every rank, this one too, a moment later (about a second: measured); until then this rank
    waits, so that no other rank sees it gone first and reports a lost master, and Python's exit never calls
    ``MPI_Finalize`` (which would fail with a traceback)."""
    world.Abort(code)
    sys.stderr.flush()
    time.sleep(ABORT_WAIT)
    os._exit(code)


ABORT_WAIT = 5.0     # seconds a rank that called MPI_Abort waits for the launcher to end it


if __name__ == "__main__":
    main()
