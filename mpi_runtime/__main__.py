"""Entry point of every rank: ``mpiexec -n n+1 python -m mpi4py -m mpi_runtime SPEC.toml --out DIR``.

Rank 0 is the master (or, for a decentralized scheme, a peer with zero contribution that writes the records);
rank ``i + 1`` is worker ``i``. Every rank loads and validates the spec and builds the scheme, delay model and
workload itself (deterministic), so nothing but plans, models and messages travel.

Any exception on any rank is printed to stderr with the rank and its role, then ``MPI_Abort`` ends every rank of
the job at once (no hang); ``python -m mpi4py`` adds the same guarantee for anything that escapes. Exit codes:
0 success; 0 also when the run completed but unresponsive workers had to be aborted at shutdown (the master's
``run`` returns True, says so on stderr and in ``summary.json``, and this module calls ``MPI_Abort(0)``: only an
abort ends a hung rank); 1 a failure inside the job (a crashed rank, a stop rule that cannot hold); 2 a bad spec or
command line.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from mpi4py import MPI

from gradcode.children import die_with_parent
from gradcode.errors import ConfigError

from .config import load_run
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


def _role(rank: int) -> str:
    return "master" if rank == 0 else f"worker {rank - 1}"


def run(argv: list[str] | None = None) -> bool:
    """This rank's part of the job; True if the run completed but hung ranks are left that only an abort ends."""
    args = _parser().parse_args(argv)
    world = MPI.COMM_WORLD
    overrides = {k: getattr(args, k) for k in ("iterations", "seed") if getattr(args, k) is not None}
    cfg = load_run(args.spec, scheme_index=args.scheme, overrides=overrides)
    if world.Get_size() != cfg.workers + 1:
        raise ConfigError(f"the spec has {cfg.workers} workers, so the job needs {cfg.workers + 1} ranks "
                          f"(a master and the workers); it was launched with {world.Get_size()}")
    scheme, delay, workload = cfg.build()
    comm = world.Dup()      # our own communicator: nothing else can match our tags
    precise_sleep()         # every rank emulates times and polls with time.sleep
    out = Path(args.out)
    if scheme.decentralized:
        from .allreduce import Decentralized

        return Decentralized(comm, cfg, scheme, delay, workload, out).run()
    capacity = max(len(p) for p in scheme.plan(0).parts)
    if comm.Get_rank() == 0:
        from .master import Master

        return Master(comm, cfg, scheme, delay, workload, capacity, out).run()
    from .worker import Worker

    Worker(comm, cfg, scheme, delay, workload, capacity).run()
    return False


def main(argv: list[str] | None = None) -> None:
    # a rank whose launcher (MPICH's proxy) is killed ends too, instead of running on as an orphan that keeps
    # writing the run folder (gradcode.children)
    die_with_parent(signal.SIGTERM, os.getppid())
    rank = MPI.COMM_WORLD.Get_rank()
    try:
        hung = run(argv)
    except SystemExit as err:        # argparse: --help or a usage error
        if err.code not in (0, None):
            MPI.COMM_WORLD.Abort(2)
        raise
    except BaseException as err:     # noqa: BLE001 - any error on any rank must end the whole job
        code = 2 if isinstance(err, ConfigError) else 1
        what = "error" if isinstance(err, (ConfigError, RunFailure)) else f"crashed ({type(err).__name__})"
        print(f"mpi_runtime: rank {rank} ({_role(rank)}) {what}: {err}", file=sys.stderr, flush=True)
        time.sleep(0.3)    # let the launcher forward the message before MPI_Abort tears the job down
        MPI.COMM_WORLD.Abort(code)
        return
    if hung:
        # the run is complete and on disk; only MPI_Abort can end the hung ranks
        MPI.COMM_WORLD.Abort(0)
    sys.exit(0)


if __name__ == "__main__":
    main()
