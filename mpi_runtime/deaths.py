"""The master's side of a worker's death: a dead worker is a straggler that never answers again.

The master learns of a death in its polling loop (:meth:`mpi_runtime.peers.Peers.check`, every ``CHECK_EVERY``
seconds): on one host a worker's process that is gone (its pid in ``/proc``), on any host a worker that reported
its own failure (it then ends alone, ``__main__``). Measured with the MPICH wheel (one host, ``-disable-auto-cleanup``):
a receive posted for a dead rank is cancelled at once, a send to it completes (eagerly), ``Testsome`` over requests
that include it raises nothing, but ``MPI_Finalize`` waits for it for ever; so the master drops every request to or
from the dead (``MasterPort.drop``), never sends it another plan, and a run that had deaths ends with
``MPI_Abort(0)`` like a run with hung workers (the records and the summary are on disk first). The run goes on while
the stop rule can still hold with the living (:meth:`gradcode.clusters.driver.Driver.deaths_unmet`).
"""

from __future__ import annotations

import sys

from mpi4py import MPI

from gradcode.deaths import name_dead

from .protocol import RunFailure


class Burials:
    """Takes the deaths :class:`~mpi_runtime.peers.Peers` noticed, drops the dead from the master's transport and
    plans, and ends the run when the stop rule can no longer hold without them."""

    def __init__(self, master):
        self.master = master
        self.host = MPI.Get_processor_name()

    def bury(self, t: int, plan, received=()) -> None:
        """The workers found dead since the last look (in iteration ``t``) never get a plan again; a
        :class:`RunFailure` if the stop rule can no longer hold without them (and with the messages ``received``
        already, ``(worker, chunks)`` pairs)."""
        master = self.master
        lost = master.peers.take_lost()
        for rank, why in lost.items():
            i = rank - 1
            master.port.drop(i)
            # a process found gone is on this host (its pid is watched); a failure report names its host itself
            note = {"rank": rank, **({"host": self.host} if rank in master.peers.local else {}), "why": why}
            master.dead[i], master.dead_notes[i], master.busy[i] = t, note, -1
            print(f"mpi_runtime: master (rank 0): {name_dead(i, t, note)}; the run goes on without it while the "
                  "stop rule can hold", file=sys.stderr, flush=True)
        if lost and (unmet := master.deaths_unmet(t, plan, [i for i, _ in received])):
            raise RunFailure(unmet)
