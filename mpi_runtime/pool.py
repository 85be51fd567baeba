"""The cells of a sweep on MPI ranks: an ``mpi4py.futures.MPIPoolExecutor`` (``gradcode sweep --executor mpi``).

Launch the sweep under ``mpiexec`` through ``mpi4py.futures``::

    mpiexec -n 5 python -m mpi4py.futures -m gradcode sweep SPEC --out DIR --executor mpi

Rank 0 runs ``gradcode sweep`` (it expands the grid, writes ``DIR`` and assembles the table); ranks 1..4 are the
pool's workers, each running whole cells (:func:`gradcode.sweep_run.run_cell`) one after another, so N ranks run
N - 1 cells at a time; ``--jobs`` is not used then. Every rank needs the same Python environment and ``DIR`` on a
shared file system. Started without ``mpiexec``, the pool spawns ``--jobs`` workers itself (``MPI_Comm_spawn``),
which needs an MPI that supports dynamic processes. Only ``mpi_runtime`` imports mpi4py.
"""

from __future__ import annotations

from gradcode.errors import ConfigError


def mpi_pool(workers: int):
    """An ``MPIPoolExecutor`` (under ``python -m mpi4py.futures``: the ranks of the job; otherwise ``workers``
    spawned processes); a :class:`ConfigError` when mpi4py is not installed."""
    try:
        from mpi4py.futures import MPIPoolExecutor
    except ImportError as err:
        raise ConfigError(f"--executor mpi needs mpi4py ({err}); pip install gradcode[mpi], or use --executor "
                          "process") from None
    return MPIPoolExecutor(max_workers=workers)
