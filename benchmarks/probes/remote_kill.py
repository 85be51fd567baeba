"""Probe (root): ``kill -9`` of a worker on another emulated host, with the hosts' traffic on their links.

Three emulated hosts of two slots, fastest_k (k = 2 of 4), worker 3 (rank 4, host 2) killed at iteration 3 by the
test hook. Prints the job's exit status and the end of its stderr (UCX backtraces on: ``UCX_HANDLE_ERRORS=bt``).
Extra ``KEY=VALUE`` arguments go into the job's environment (e.g. ``MPIR_CVAR_ENABLE_FT=1``). The known bug it shows
(docs/mpi.md): rank 0 segfaults in its next send to the dead worker, and the other hosts' workers wait.

Run: ``.venv/bin/python benchmarks/probes/remote_kill.py [KEY=VALUE ...]``
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import tomli_w

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from helpers import mpi_spec  # noqa: E402

from mpi_runtime.cluster_emu import EmulatedCluster  # noqa: E402
from mpi_runtime.launch import find_mpiexec, mpi_flavor, prepare  # noqa: E402


def main() -> None:
    extra = dict(arg.split("=", 1) for arg in sys.argv[1:])
    tmp = Path(tempfile.mkdtemp(prefix="remote-kill-"))
    with EmulatedCluster(3, slots=2, prefix="rk", folder=tmp / "cluster") as cluster:
        spec = mpi_spec({"name": "fastest_k", "k": 2}, iterations=10, grace=2.0)
        path = tmp / "spec.toml"
        path.write_text(tomli_w.dumps(spec))
        mpiexec = find_mpiexec(None)
        cmd, env, _ = prepare(path, tmp / "out", 5, hostfile=str(cluster.hostfile_for(mpi_flavor(mpiexec))),
                              mpiexec=mpiexec)
        env.update(cluster.env())
        env.update({"GRADCODE_TEST_CRASH": "4:3:kill", "UCX_HANDLE_ERRORS": "bt", **extra})
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=40)
            print(f"exit status {proc.returncode}\n{proc.stderr[-4000:]}")
        except subprocess.TimeoutExpired as err:
            print(f"still running after 40 s (stopped)\n{(err.stderr or b'').decode()[-6000:]}")


if __name__ == "__main__":
    main()
