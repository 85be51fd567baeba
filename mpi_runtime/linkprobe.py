"""Measure a link between two hosts: ping-pong for the latency, a bulk transfer for the rate, and the ``[network]``
table they describe (``gradcode cluster measure``).

``python -m mpi4py -m mpi_runtime.linkprobe BYTES REPEATS`` under ``mpiexec -n 2`` (one rank on each host):
rank 0 and rank 1 bounce 8 bytes ``REPEATS`` times (latency: half the median round trip), then rank 0 sends
``BYTES`` to rank 1 and back ``REPEATS`` times (the rate one way: the bytes over the median of half a round trip,
less the latency). Rank 0 prints one JSON line. :func:`measure` runs it from host 0 (the master's, the hostfile's
first) to every other host and makes the table: ``link`` the fastest rate found, ``links`` the hosts measurably
slower (below 90% of it; a pair's rate is the slower of its two links), ``latency`` the largest, ``slots`` the
hostfile's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = "mpi_runtime.linkprobe"
SHARED_MEMORY_LATENCY = 20e-6    # s: below, the two ranks met through memory (measured: 2 us; over TCP: 0.9 ms)


def probe(nbytes: int, repeats: int) -> dict[str, float] | None:
    """The two ranks' measurement (rank 0 returns it, rank 1 None)."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, peer = comm.Get_rank(), 1 - comm.Get_rank()

    def round_trips(buf: np.ndarray) -> float:
        times = []
        for _ in range(repeats + 1):      # the first warms the connection up and is dropped
            comm.Barrier()
            begin = MPI.Wtime()
            if rank == 0:
                comm.Send(buf, dest=peer)
                comm.Recv(buf, source=peer)
            else:
                comm.Recv(buf, source=peer)
                comm.Send(buf, dest=peer)
            times.append(MPI.Wtime() - begin)
        return float(np.median(times[1:]))

    latency = round_trips(np.zeros(1)) / 2
    one_way = round_trips(np.zeros(max(1, nbytes // 8))) / 2
    if rank:
        return None
    return {"latency": latency, "rate": nbytes / max(one_way - latency, 1e-12), "bytes": nbytes}


def hostfile_slots(path: str | Path) -> list[tuple[str, int]]:
    """``(host, slots)`` of each line of an MPICH (``host:slots``) or Open MPI (``host slots=N``) hostfile."""
    hosts = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        if "slots=" in line:
            name, slots = line.split()[0], line.split("slots=")[1].split()[0]
        else:
            name, _, slots = line.partition(":")
        hosts.append((name.strip(), int(slots) if slots else 1))
    return hosts


def measure(hostfile: str, *, mpiexec: str | None = None, nbytes: int = 1 << 24, repeats: int = 5,
            timeout: float = 120.0) -> dict:
    """The ``[network]`` table of the hosts of ``hostfile``, measured from its first host to each other one."""
    from gradcode.errors import ConfigError

    from .launch import environment, find_mpiexec, mpi_flavor

    hosts = hostfile_slots(hostfile)
    if len(hosts) < 2:
        raise ConfigError(f"--hostfile {hostfile}: {len(hosts)} host(s); a link is between two")
    exe = find_mpiexec(mpiexec)
    flavor = mpi_flavor(exe)
    pairs = {}
    for h in range(1, len(hosts)):
        pairs[h] = _run_pair(exe, flavor, hosts[0][0], hosts[h][0], nbytes, repeats, timeout, environment(flavor))
    fastest = max(p["rate"] for p in pairs.values())
    table = {"link": round(fastest), "latency": max(p["latency"] for p in pairs.values()),
             "slots": [s for _, s in hosts]}
    slow = {str(h): round(p["rate"]) for h, p in pairs.items() if p["rate"] < 0.9 * fastest}
    if slow:
        table["links"] = slow
    return table


def _run_pair(exe: str, flavor: str, a: str, b: str, nbytes: int, repeats: int, timeout: float, env) -> dict:
    """The probe between hosts ``a`` and ``b`` (one rank each)."""
    from gradcode.errors import GradcodeError

    with tempfile.TemporaryDirectory() as tmp:
        pair = Path(tmp) / "pair"
        pair.write_text(f"{a} slots=1\n{b} slots=1\n" if flavor == "openmpi" else f"{a}:1\n{b}:1\n")
        cmd = [exe, "-n", "2", *(["--hostfile", str(pair)] if flavor == "openmpi" else ["-f", str(pair)]),
               sys.executable, "-m", "mpi4py", "-m", PROBE, str(nbytes), str(repeats)]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise GradcodeError(f"cluster measure: {a} <-> {b} took over {timeout:.0f} s; are both hosts "
                                "reachable by mpiexec (env.sh sourced)?") from None
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode or not lines:
        raise GradcodeError(f"cluster measure: {a} <-> {b} failed (exit {out.returncode}): "
                            f"{(out.stderr or out.stdout).strip()[-400:]}")
    return json.loads(lines[-1])


def measure_command(hostfile: str, nbytes: int, out: str | None, mpiexec: str | None) -> int:
    """``gradcode cluster measure``: the table printed, and written to ``out`` if given."""
    from gradcode.errors import ConfigError

    from .launch import check_hostfile

    check_hostfile(hostfile)
    if nbytes < 8:
        raise ConfigError(f"--bytes {nbytes}: the bulk transfer needs at least 8 bytes (1 MiB or more to measure a "
                          "rate)")
    table = measure(hostfile, mpiexec=mpiexec, nbytes=nbytes)
    text = toml_table(table)
    print(text, end="")
    if table["latency"] < SHARED_MEMORY_LATENCY:
        print(f"note: a latency of {table['latency'] * 1e6:.1f} us is shared memory's, not a network's: these ranks "
              "may not cross a link (MPICH's UCX reaches other namespaces' ranks through /dev/shm); with "
              "UCX_TLS=tcp,self in the environment they go over TCP", file=sys.stderr)
    if out is not None:
        Path(out).write_text(text)
    return 0


def toml_table(table: dict) -> str:
    """``table`` as a ``[network]`` TOML table."""
    lines = ["[network]"]
    for key, value in table.items():
        if isinstance(value, dict):
            value = "{" + ", ".join(f"{k} = {v}" for k, v in value.items()) + "}"
        lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    found = probe(int(sys.argv[1]), int(sys.argv[2]))
    if found is not None:
        print(json.dumps(found), flush=True)
