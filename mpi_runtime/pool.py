"""The cells of a sweep on MPI ranks: an ``mpi4py.futures.MPIPoolExecutor`` (``gradcode sweep --executor mpi``).

Launch the sweep under ``mpiexec`` through ``mpi4py.futures``::

    mpiexec -n 5 python -m mpi4py.futures -m gradcode sweep SPEC --out DIR --executor mpi

Rank 0 runs ``gradcode sweep`` (it expands the grid, writes ``DIR`` and assembles the table); ranks 1..4 are the
pool's workers, each running whole cells (:func:`gradcode.study.sweep_run.run_cell`) one after another, so N ranks run
N - 1 cells at a time; ``--jobs`` is not used then. Every rank needs the same Python environment and ``DIR`` on a
shared file system. ``--executor mpi`` outside such a job is refused before anything runs: the pool would then
spawn its workers (``MPI_Comm_spawn``), which a singleton MPICH process cannot do (with the PyPI wheel it hangs).
Only ``mpi_runtime`` imports mpi4py.
"""

from __future__ import annotations

from gradcode.errors import ConfigError

LAUNCH = "mpiexec -n N python -m mpi4py.futures -m gradcode sweep SPEC --out DIR --executor mpi"


def check_pool() -> None:
    """A :class:`ConfigError` unless mpi4py is installed and this process is rank 0 of an MPI job of two ranks or
    more (the pool's workers being the others, as ``python -m mpi4py.futures`` makes them): a rank other than 0
    running the sweep means the job was not started through ``mpi4py.futures`` (every rank would run its own
    sweep)."""
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise ConfigError(f"--executor mpi needs mpi4py ({err}); pip install gradcode[mpi], or use --executor "
                          "process") from None
    world = MPI.COMM_WORLD
    if world.Get_size() < 2:
        raise ConfigError(f"--executor mpi runs inside an MPI job whose other ranks are the pool: {LAUNCH} "
                          "(N - 1 cells at a time); on this machine alone, use --executor process --jobs N")
    if world.Get_rank() != 0:
        raise ConfigError(f"--executor mpi: rank {world.Get_rank()} of {world.Get_size()} is running the sweep too, "
                          f"so the job was not started through mpi4py.futures; start it as {LAUNCH}")


def mpi_pool(workers: int):
    """The ``MPIPoolExecutor`` of the job's ranks (at most ``workers``; :func:`check_pool` first)."""
    from mpi4py.futures import MPIPoolExecutor

    return MPIPoolExecutor(max_workers=workers)
