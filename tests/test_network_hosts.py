"""Emulated hosts that are hosts: their ranks share no memory, so every payload between two hosts crosses a link and
shows on its interface's byte counters (``mpi_runtime/cluster_emu.py``). Needs root, as ``tests/test_multihost.py``;
``GRADCODE_TEST_MPIEXEC`` names another launcher (the CI's Open MPI subset)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import tomli_w
from helpers import mpi_spec, read_whole_records

from mpi_runtime.cluster_emu import ClusterError, EmulatedCluster, missing_requirements
from mpi_runtime.launch import find_mpiexec, mpi_flavor, prepare

pytestmark = [pytest.mark.multihost, pytest.mark.mpi]

PREFIX = f"n{os.getpid() % 100000}"
MPIEXEC = os.environ.get("GRADCODE_TEST_MPIEXEC") or None
WHY_NOT = missing_requirements(rate=True)
LIMITED = 1      # the host whose link is limited: workers 1 and 2 (ranks 2, 3) with 2 slots a host
D = 20_000       # parameters: 160 kB plans and results, so that headers and control messages are noise


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if WHY_NOT is not None:
        pytest.skip(f"no emulated cluster here: {WHY_NOT}")
    with EmulatedCluster(3, slots=2, prefix=PREFIX, folder=tmp_path_factory.mktemp("cluster"),
                         rate={LIMITED: "200mbit"}) as c:
        yield c


def test_up_proves_the_link_and_refuses_hosts_that_share_memory(cluster):
    """``up`` measured its 4 MB on host 1's link; with the launcher of old (network namespaces only) MPICH's UCX
    reaches the other host's ranks through shared memory, and the same check fails and says why. (Open MPI's
    shared-memory transport serves only the ranks it sees on one node, so its hosts used TCP even then.)"""
    assert cluster.proof and cluster.proof.startswith("checked: 4 MB"), cluster.proof
    if mpi_flavor(find_mpiexec(MPIEXEC)) != "mpich":
        return
    script = cluster.launcher.read_text()
    shared = script.replace(" --ipc --mount", "").replace(" && mount -t tmpfs -o mode=1777 tmpfs /dev/shm", "")
    assert shared != script
    try:
        cluster.launcher.write_text(shared)
        with pytest.raises(ClusterError, match="without the network"):
            cluster.prove_network()
    finally:
        cluster.launcher.write_text(script)


def test_bytes_on_a_limited_link_are_the_runs_messages(cluster, tmp_path):
    """A ``sync`` run of 1 master + 4 workers: the bytes into and out of host 1's interface are within 20% of its
    workers' plans (each the model, ``d`` floats) and results (``d`` floats) that the records count, the warm-up's
    one exchange of each buffer included (TCP/IP headers and acknowledgements add a few per cent)."""
    spec = mpi_spec({"name": "sync"}, iterations=10, scale=0.005)
    spec["workload"] = {"name": "least_squares", "n_samples": 40, "dim": D, "seed": 1}
    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    out = tmp_path / "out"
    hostfile = str(cluster.hostfile_for(mpi_flavor(find_mpiexec(MPIEXEC))))
    cmd, env, _ = prepare(path, out, 5, hostfile=hostfile, mpiexec=MPIEXEC)
    before = cluster.link_bytes(LIMITED)
    proc = subprocess.run(cmd, env={**env, **cluster.env()}, capture_output=True, text=True, timeout=120)
    rx, tx = (b - a for a, b in zip(before, cluster.link_bytes(LIMITED), strict=True))
    assert proc.returncode == 0, proc.stderr[-3000:]
    workers = [1, 2]     # ranks 2 and 3: host 1's two slots
    records = read_whole_records(out)
    plans = len(workers) + sum(r["worker_plan_received"][i] is not None for r in records for i in workers)
    results = len(workers) + sum(r["worker_arrived"][i] is not None for r in records for i in workers)
    assert plans == results == 2 * 11
    assert 1.0 <= rx / (8 * D * plans) < 1.2, (rx, plans)
    assert 1.0 <= tx / (8 * D * results) < 1.2, (tx, results)
    assert Path(out / "summary.json").is_file()
