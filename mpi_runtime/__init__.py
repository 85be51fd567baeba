"""mpi_runtime: the MPI cluster of gradcode.

The same scheme objects as the simulated cluster (``gradcode.clusters.sim``), driven over real MPI messages instead of a
virtual clock. Launch with ``mpiexec -n n+1 python -m mpi4py -m mpi_runtime SPEC.toml --out DIR`` (or
``gradcode run SPEC.toml --out DIR``, which builds that command for the installed MPI and prints it).

Modules: ``__main__`` (entry point of every rank, error handling), ``config`` (checks before launch), ``protocol``
(buffer layouts, tags, polling waits, receive cancellation), ``peers`` (checkpoints, liveness and failure reports:
every wait bounded, every failure named), ``master`` and ``worker`` (master/worker schemes), ``allreduce``
(DropCompute, decentralized), ``faults`` (test hooks), ``launch`` (``gradcode run``), ``rankshell`` (the
shell around each rank on several hosts), ``cluster_emu`` (``gradcode cluster``: hosts as network namespaces). Only
this package imports mpi4py.
"""
