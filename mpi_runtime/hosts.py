"""Which host each rank runs on: gathered once at start-up, written by rank 0 as ``hosts.json`` beside the records.

``hosts.json`` is ``{"master": HOST, "workers": [HOST of worker 0, ..., HOST of worker n - 1]}`` (worker ``i`` is
rank ``i + 1``; the host is ``MPI.Get_processor_name()``). It is what lets ``gradcode run``'s summary and
``gradcode report RUN`` name the slow hosts, not only the slow workers; the simulator has no hosts and writes none.
The gather is bounded like every start-up step (``[run] startup_timeout``): a rank that stopped right after the
previous checkpoint is named, never waited for.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from mpi4py import MPI

from gradcode.clusters.run_view import HOSTS_FILE

from . import protocol as P
from .protocol import RunFailure

NAME_BYTES = MPI.MAX_PROCESSOR_NAME     # a fixed-size slot per rank: one buffer gather, no pickles


def gather_hosts(comm: MPI.Comm, timeout: float, watch=None) -> list[str] | None:
    """Every rank's host name on rank 0 (in rank order), ``None`` on the others; collective, bounded."""
    mine = np.zeros(NAME_BYTES, dtype=np.uint8)
    name = MPI.Get_processor_name().encode()[:NAME_BYTES]
    mine[:len(name)] = np.frombuffer(name, dtype=np.uint8)
    root = comm.Get_rank() == 0
    every = np.zeros((comm.Get_size(), NAME_BYTES), dtype=np.uint8) if root else None
    request = comm.Igather([mine, MPI.BYTE], [every, MPI.BYTE] if root else None, root=0)
    try:
        P.wait(request, timeout=timeout, watch=watch)
    except TimeoutError:
        raise RunFailure(f"gathering the host names did not complete within {timeout:g} s: some rank stopped "
                         "right after the start-up checkpoint") from None
    if not root:
        return None
    return [bytes(row).rstrip(b"\0").decode(errors="replace") for row in every]


def write_hosts(out: Path, hosts: list[str]) -> None:
    """``out/hosts.json`` from the ranks' hosts (rank 0 first)."""
    Path(out).mkdir(parents=True, exist_ok=True)     # launched by hand (mpiexec ... -m mpi_runtime): not made yet
    (Path(out) / HOSTS_FILE).write_text(json.dumps({"master": hosts[0], "workers": hosts[1:]}) + "\n")
