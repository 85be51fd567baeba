"""Shared test set-up: the helpers module on the path; the MPI tests in one xdist group.

The helpers themselves (the gradcode command, MPI jobs, a small experiment, waiting for processes) are plain
functions in ``helpers.py``: ``from helpers import cli``. The markers are registered in pyproject.toml:

- ``mpi``: the test launches mpiexec (a job of several ranks);
- ``multihost``: the test needs root and network namespaces (an emulated cluster of hosts);
- ``slow``: the test takes 10 s or more in a serial run on a shared 2-core machine.

``make test`` runs the tests without ``mpi`` and ``multihost`` on two xdist workers, then those two serially: a
job of 5 to 10 ranks already oversubscribes two cores, and its timing checks (MPI against the simulator) hold only
when nothing else competes for them. Under ``pytest -n N --dist loadgroup`` they share one xdist group, so one
worker runs them one after the other (while the other workers still run the rest).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:      # `import helpers` under any import mode
    sys.path.insert(0, str(HERE))

SERIAL = ("mpi", "multihost")


@pytest.hookimpl(trylast=True)     # after -m has deselected
def pytest_collection_modifyitems(config, items):
    """The tests marked mpi or multihost in one xdist group (``--dist loadgroup``: one worker runs them all)."""
    for item in items:
        if any(item.get_closest_marker(m) for m in SERIAL):
            item.add_marker(pytest.mark.xdist_group("mpi"))
