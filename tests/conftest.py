"""Shared test set-up: the helpers module on the path; the MPI tests in two xdist groups.

The helpers themselves (the gradcode command, MPI jobs, a small experiment, waiting for processes) are plain
functions in ``helpers.py``: ``from helpers import cli``. The markers are registered in pyproject.toml:

- ``mpi``: the test launches mpiexec (a job of several ranks);
- ``multihost``: the test needs root and network namespaces (an emulated cluster of hosts);
- ``slow``: the test takes 10 s or more in a serial run on a shared 2-core machine.

``make test`` runs the tests without ``mpi`` and ``multihost`` on two xdist workers, then those on two workers again
(``--dist loadgroup``), in two groups that each run one job at a time: the jobs whose timing is checked against the
model (:data:`TIMED`: MPI against the simulator, on one host) and all the others (faults, the command line, sweeps,
the emulated hosts). Why two jobs at once can share two cores: most of a timed job is emulated delay, a sleep, and a
rank waking from a sleep is scheduled ahead of processes that have been running, so its timing holds while the other
job starts up or fails on purpose. A timed test is never paired with another timed one. ``make test
MPI_TEST_JOBS=1`` runs every MPI test one after the other.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:      # `import helpers` under any import mode
    sys.path.insert(0, str(HERE))

SERIAL = ("mpi", "multihost")
# the test files whose MPI jobs are checked against the model's timing (agreement with the simulator)
TIMED = {"test_mpi.py", "test_mpi_straggle.py", "test_anytime.py", "test_natural.py", "test_trace_export.py",
         "test_harness.py"}   # (its MPI test is the README command: MPI against the simulator, within 2x)


@pytest.hookimpl(trylast=True)     # after -m has deselected
def pytest_collection_modifyitems(config, items):
    """Each test marked mpi or multihost in one of two xdist groups (``--dist loadgroup``: one worker runs a group):
    ``mpi-timed`` for those of :data:`TIMED`, ``mpi-other`` for the rest."""
    for item in items:
        if any(item.get_closest_marker(m) for m in SERIAL):
            group = "mpi-timed" if item.path.name in TIMED else "mpi-other"
            item.add_marker(pytest.mark.xdist_group(group))
