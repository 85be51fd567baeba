"""An emulated cluster on one Linux machine: ``N`` hosts made of network namespaces (root only); never imports mpi4py.

``gradcode cluster up --hosts 3`` makes hosts ``host0 .. host2``: one network namespace each (``ip netns add``), a
veth pair each into a bridge, an address each in a free ``10.213.X.0/24``, ``/etc/netns/HOST/hosts`` naming every
host (``ip netns exec`` mounts it over ``/etc/hosts``) and this machine's own name (the bridge's address: ``mpiexec``
runs here and its proxies call it back). A host's commands run under ``unshare --uts --ipc --mount`` with the
host's name as hostname and a fresh ``tmpfs`` on ``/dev/shm``, so MPI sees separate nodes and cannot share memory
between them: one proxy per host, and ranks on different hosts talk over TCP through the hosts' links (network
namespaces alone separate neither System V IPC nor ``/dev/shm``: MPICH's UCX then reached the other hosts' ranks
through shared memory, and a 4 MB All-Reduce put 0 bytes on the links). ``up`` proves it: a rank on host 0 sends
4 MB to a rank on host 1 and host 1's interface counters must show them (:meth:`EmulatedCluster.prove_network`),
else ``up`` fails with the figures.

It writes into its folder (default ``/run/gradcode-cluster/PREFIX``): ``hostfile`` (``host0:3`` a line; Open MPI's
``host0 slots=3`` in ``hostfile.openmpi``), ``launcher``
(an ``ssh`` stand-in: ``launcher [ssh options] HOST COMMAND...`` runs ``COMMAND`` on ``HOST``, as ssh would, through
``sh -c``), ``env.sh`` (``HYDRA_LAUNCHER=ssh``, ``HYDRA_LAUNCHER_EXEC=launcher``, ``OMPI_MCA_plm_rsh_agent=launcher``,
``PRTE_MCA_plm_ssh_agent``) and ``cluster.json``. Then ``gradcode run SPEC --hostfile FOLDER/hostfile`` spans the
hosts unchanged (with ``env.sh`` sourced), under MPICH's Hydra or Open MPI (``FOLDER/hostfile.openmpi``).

A slow host for real: ``--rate 1:20mbit`` limits host 1's link both ways with a token bucket (``tc qdisc ... tbf``;
this machine's kernel has no ``netem``), ``--cpu 2:0.25`` gives host 2's processes a quarter of one core (a cgroup
``cpu`` quota, v1 or v2, that the launcher puts every command of the host into).

Clean-up: ``down`` (idempotent) ends every process in the hosts, deletes the namespaces, the links, the bridge, the
cgroups and ``/etc/netns/HOST``; ``up`` undoes what it did when a step fails; used as a context manager (``with
EmulatedCluster(...) as c``, or ``gradcode cluster run -- COMMAND``) the cluster goes down on every exit path,
``SIGTERM``/``SIGHUP``/``SIGINT`` and interpreter exit included. Without root, or without ``ip``/``unshare``
(``tc`` for ``--rate``), it refuses with :class:`ClusterError` before touching anything.
"""

from __future__ import annotations

import atexit
import importlib.util
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

from gradcode.errors import GradcodeError

NETNS_ETC = Path("/etc/netns")
RUN_DIR = Path("/run/gradcode-cluster")
CGROUP_V1 = Path("/sys/fs/cgroup/cpu")
CGROUP_ROOT = Path("/sys/fs/cgroup")
SUBNETS = "10.213.{}.0/24"
PERIOD_US = 100_000
PREFIX_RE = re.compile(r"[a-z][a-z0-9]{0,7}")
MAX_HOSTS = 64
PROOF_BYTES = 4_000_000     # what up sends between two hosts' ranks to prove that it crosses the link
PROOF_TIMEOUT = 120.0
PROOF_SCRIPT = ("import sys, numpy as np; from mpi4py import MPI; c = MPI.COMM_WORLD; "
                "b = np.ones(int(sys.argv[1]) // 8); c.Send(b, 1) if c.rank == 0 else c.Recv(b, 0)")


class ClusterError(GradcodeError):
    """The emulated cluster cannot be made or used (not root, a tool missing, a name taken, a bad limit)."""


SYSTEM_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin")   # root's tools, if PATH lacks sbin


def _tool(name: str) -> str | None:
    """The full path of ``name``: on PATH, else in the system's directories (``ip`` and ``tc`` live in sbin, which a
    root shell from ``env -i``, cron or a container's minimal PATH may leave out)."""
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(SYSTEM_DIRS))


def _sh(*args: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    args = (_tool(args[0]) or args[0], *args[1:])
    proc = subprocess.run(list(args), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise ClusterError(f"`{shlex.join(args)}` failed: {(proc.stderr or proc.stdout).strip()}")
    return proc


def missing_requirements(rate: bool = False) -> str | None:
    """Why this process cannot make an emulated cluster (``None``: it can): not Linux, not root, a tool missing."""
    if not os.uname().sysname == "Linux":
        return "an emulated cluster needs Linux network namespaces"
    if os.geteuid() != 0:
        return ("an emulated cluster needs root (network namespaces, /etc/netns, cgroups): run it as root, e.g. "
                "`sudo gradcode cluster up`")
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux")) + ((("tc", "iproute2"),) if rate else ()):
        if _tool(tool) is None:
            return (f"an emulated cluster needs `{tool}` (not on PATH nor in {', '.join(SYSTEM_DIRS)}; Debian/Ubuntu: "
                    f"apt-get install {package})")
    return None


def parse_limits(items: list[str] | None, kind: str, hosts: int) -> dict[int, str | float]:
    """``["1:20mbit", ...]`` (``--rate``) or ``["2:0.25", ...]`` (``--cpu``, cores) as ``{host: limit}``."""
    limits: dict[int, str | float] = {}
    for item in items or []:
        host, sep, value = item.partition(":")
        if not sep or not host.isdigit() or not 0 <= int(host) < hosts:
            raise ClusterError(f"--{kind} {item!r}: write HOST:VALUE with HOST a host number 0..{hosts - 1}")
        if kind == "rate":
            if not re.fullmatch(r"\d+(\.\d+)?([kmg]?bit|[kmg]?bps)", value):
                raise ClusterError(f"--rate {item!r}: a rate like 20mbit, 500kbit or 1gbit")
            limits[int(host)] = value
        else:
            try:
                cores = float(value)
            except ValueError:
                cores = -1.0
            if not 0.01 <= cores <= 64:
                raise ClusterError(f"--cpu {item!r}: a number of cores between 0.01 and 64, e.g. 0.25")
            limits[int(host)] = cores
    return limits


class EmulatedCluster:
    """``hosts`` namespaces named ``PREFIX0 ..``, ``slots`` ranks each in the hostfile; see the module docstring."""

    def __init__(self, hosts: int = 3, *, slots: int = 1, prefix: str = "host", folder: str | Path | None = None,
                 rate: dict[int, str] | None = None, cpu: dict[int, float] | None = None, prove: bool = True):
        if not PREFIX_RE.fullmatch(prefix):
            raise ClusterError(f"--prefix {prefix!r}: 1-8 lower-case letters and digits, starting with a letter")
        if not 1 <= hosts <= MAX_HOSTS:
            raise ClusterError(f"--hosts {hosts}: between 1 and {MAX_HOSTS}")
        if slots < 1:
            raise ClusterError(f"--slots {slots}: at least 1")
        for what, limits in (("rate", rate), ("cpu", cpu)):
            bad = [h for h in (limits or {}) if not 0 <= h < hosts]
            if bad:
                raise ClusterError(f"--{what}: no host {bad[0]} (hosts 0..{hosts - 1})")
        self.prefix, self.slots = prefix, slots
        self.names = [f"{prefix}{i}" for i in range(hosts)]
        self.folder = Path(folder) if folder is not None else RUN_DIR / prefix
        self.rate, self.cpu = dict(rate or {}), dict(cpu or {})
        self.bridge = f"{prefix}br"
        self.subnet: str | None = None
        self.prove = prove
        self.proof: str | None = None      # what ``up`` measured between two hosts (:meth:`prove_network`)
        self._handlers: dict = {}

    # --- the files a user (and mpiexec) reads ------------------------------------------------------------------
    @property
    def hostfile(self) -> Path:
        return self.folder / "hostfile"

    @property
    def hostfile_openmpi(self) -> Path:
        """The same hosts in Open MPI's syntax (``host0 slots=3``: Open MPI 5 reads ``host0:3`` as a host name)."""
        return self.folder / "hostfile.openmpi"

    def hostfile_for(self, flavor: str) -> Path:
        return self.hostfile_openmpi if flavor == "openmpi" else self.hostfile

    def hosts_args(self, flavor: str, hostfile: Path | None = None) -> list[str]:
        """The ``mpiexec`` options that place ranks on these hosts (``hostfile``: default :meth:`hostfile_for`):
        MPICH's ``-f FILE``; Open MPI's ``--hostfile FILE --bind-to none`` (a host may have more slots than
        cores)."""
        hostfile = hostfile or self.hostfile_for(flavor)
        return ["--hostfile", str(hostfile), "--bind-to", "none"] if flavor == "openmpi" else ["-f", str(hostfile)]

    @property
    def launcher(self) -> Path:
        return self.folder / "launcher"

    def env(self) -> dict[str, str]:
        """What ``mpiexec`` needs to reach the hosts: Hydra's ssh launcher and Open MPI's rsh agent, both the
        launcher script."""
        return {"HYDRA_LAUNCHER": "ssh", "HYDRA_LAUNCHER_EXEC": str(self.launcher),
                "OMPI_MCA_plm_rsh_agent": str(self.launcher),      # Open MPI 4
                "PRTE_MCA_plm_ssh_agent": str(self.launcher),      # Open MPI 5 (PRRTE)
                "GRADCODE_HOSTFILE": str(self.hostfile), "GRADCODE_HOSTFILE_OPENMPI": str(self.hostfile_openmpi)}

    def address(self, host: int) -> str:
        assert self.subnet is not None
        return str(ipaddress.ip_network(self.subnet)[host + 1])

    def exec_args(self, host: int | str) -> list[str]:
        """The argument prefix that runs a command on ``host`` (the launcher, without the ssh conventions)."""
        name = self.names[host] if isinstance(host, int) else host
        return [str(self.launcher), name]

    def cgroup(self, host: int) -> Path | None:
        if host not in self.cpu:
            return None
        return _cgroup_base() / f"gradcode-{self.prefix}" / self.names[host]

    # --- up ----------------------------------------------------------------------------------------------------
    def up(self) -> EmulatedCluster:
        why = missing_requirements(rate=bool(self.rate))
        if why:
            raise ClusterError(why)
        taken = set(_netns_list()) & set(self.names)
        if taken or _link_exists(self.bridge):
            raise ClusterError(f"hosts {sorted(taken) or self.bridge} exist already: `gradcode cluster down --prefix "
                               f"{self.prefix}` first, or choose another --prefix")
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        return self

    def _up(self) -> None:
        self.subnet = _free_subnet()
        net = ipaddress.ip_network(self.subnet)
        gateway = str(net[254])
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write_state()      # first: a failed or interrupted up is undone from it
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"{gateway}/24", "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        hosts = "".join(f"{self.address(i)}\t{name}\n" for i, name in enumerate(self.names))
        hosts = f"127.0.0.1\tlocalhost\n::1\tlocalhost\n{hosts}{gateway}\t{socket.gethostname()}\n"
        for i, name in enumerate(self.names):
            outer = f"{self.prefix}{i}v"
            _sh("ip", "netns", "add", name)
            _sh("ip", "link", "add", outer, "type", "veth", "peer", "name", f"{self.prefix}{i}p")
            _sh("ip", "link", "set", f"{self.prefix}{i}p", "netns", name)
            _sh("ip", "-n", name, "link", "set", f"{self.prefix}{i}p", "name", "eth0")
            _sh("ip", "-n", name, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _sh("ip", "-n", name, "link", "set", "eth0", "up")
            _sh("ip", "-n", name, "link", "set", "lo", "up")
            _sh("ip", "-n", name, "route", "add", "default", "via", gateway)
            _sh("ip", "link", "set", outer, "master", self.bridge)
            _sh("ip", "link", "set", outer, "up")
            (NETNS_ETC / name).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / name / "hosts").write_text(hosts)
            if i in self.rate:       # both ways: the host's sends (its eth0) and what it receives (the outer end)
                tbf = ["tbf", "rate", str(self.rate[i]), "burst", f"{_burst_bytes(self.rate[i])}b", "latency",
                       "50ms"]
                _sh("ip", "netns", "exec", name, _tool("tc") or "tc", "qdisc", "add", "dev", "eth0", "root", *tbf)
                _sh("tc", "qdisc", "add", "dev", outer, "root", *tbf)
            if i in self.cpu:
                _make_cgroup(self.cgroup(i), self.cpu[i])
        self.hostfile.write_text("".join(f"{name}:{self.slots}\n" for name in self.names))
        self.hostfile_openmpi.write_text("".join(f"{name} slots={self.slots}\n" for name in self.names))
        self.launcher.write_text(_launcher_script(self))
        self.launcher.chmod(0o755)
        (self.folder / "env.sh").write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.env().items()))
        if self.prove and len(self.names) > 1:
            self.proof = self.prove_network()

    # --- the proof that hosts talk through their links ----------------------------------------------------------
    def link_bytes(self, host: int) -> tuple[int, int]:
        """``(received, sent)`` bytes so far on ``host``'s interface (its ``eth0``, read inside its namespace)."""
        stats = [f"/sys/class/net/eth0/statistics/{k}_bytes" for k in ("rx", "tx")]
        rx, tx = _sh("ip", "netns", "exec", self.names[host], "cat", *stats).stdout.split()
        return int(rx), int(tx)

    def prove_network(self, nbytes: int = PROOF_BYTES) -> str:
        """An MPI job of two ranks, one on host 0 and one on host 1 (through the launcher, as ``gradcode run``
        starts them), sends ``nbytes`` from the first to the second; host 1's interface must have received at least
        that many bytes, else the ranks reached each other some other way (shared memory) and this is no cluster:
        :class:`ClusterError` with the figures. Without MPI here (no ``mpiexec`` or no ``mpi4py`` for this Python)
        nothing is proved, and the line returned says so."""
        job = _proof_job(self, nbytes)
        if isinstance(job, str):
            return job
        cmd, env = job
        before = self.link_bytes(1)[0]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=PROOF_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"the check of the hosts' links ({nbytes / 1e6:g} MB from {self.names[0]} to "
                               f"{self.names[1]}) did not finish within {PROOF_TIMEOUT:g} s: is host 1's --rate "
                               "that low, or does the MPI job hang?") from None
        received = self.link_bytes(1)[0] - before
        if proc.returncode != 0:
            raise ClusterError(f"the check of the hosts' links failed: `{shlex.join(cmd)}` exited "
                               f"{proc.returncode}: {(proc.stderr or proc.stdout).strip()[-600:]}")
        if received < nbytes:
            raise ClusterError(f"a rank on {self.names[0]} sent {nbytes:,} bytes to a rank on {self.names[1]}, but "
                               f"{self.names[1]}'s interface received only {received:,}: the ranks reached each other "
                               "without the network (shared memory between hosts?), so these are no separate hosts")
        return (f"checked: {nbytes / 1e6:g} MB from a rank on {self.names[0]} to a rank on {self.names[1]} put "
                f"{received / 1e6:.3g} MB on {self.names[1]}'s link")

    def _write_state(self) -> None:
        state = {"prefix": self.prefix, "hosts": self.names, "slots": self.slots, "subnet": self.subnet,
                 "bridge": self.bridge, "rate": self.rate, "cpu": self.cpu, "folder": str(self.folder)}
        (self.folder / "cluster.json").write_text(json.dumps(state, indent=1) + "\n")

    # --- down --------------------------------------------------------------------------------------------------
    def down(self) -> list[str]:
        """Undo everything ``up`` did (any part of it); nothing to undo is fine. The hosts that were removed."""
        names = sorted(set(self.names) & set(_netns_list())) if _has_ip() else []
        for name in names:
            _kill_netns(name)
        for i, name in enumerate(self.names):
            if name in names:
                _sh("ip", "netns", "del", name, check=False)
            if _has_ip() and _link_exists(f"{self.prefix}{i}v"):
                _sh("ip", "link", "del", f"{self.prefix}{i}v", check=False)
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
        if _has_ip() and _link_exists(self.bridge):
            _sh("ip", "link", "del", self.bridge, check=False)
        group = _cgroup_base() / f"gradcode-{self.prefix}"
        if group.is_dir():
            for sub in [p for p in group.iterdir() if p.is_dir()] + [group]:
                _empty_cgroup(sub)
                with suppress(OSError):
                    sub.rmdir()
        for file in ("hostfile", "hostfile.openmpi", "proof.hosts", "launcher", "env.sh", "cluster.json"):
            with suppress(FileNotFoundError):
                (self.folder / file).unlink()
        with suppress(OSError):
            self.folder.rmdir()
        return names

    # --- as a context manager: down on every exit path ---------------------------------------------------------
    def __enter__(self) -> EmulatedCluster:
        atexit.register(self.down)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            with suppress(ValueError):       # not the main thread: atexit and __exit__ still hold
                self._handlers[sig] = signal.signal(sig, _raise_exit)
        return self.up()

    def __exit__(self, *exc) -> None:
        try:
            self.down()
        finally:
            atexit.unregister(self.down)
            for sig, old in self._handlers.items():
                signal.signal(sig, old)
            self._handlers.clear()

    @classmethod
    def from_folder(cls, prefix: str = "host", folder: str | Path | None = None) -> EmulatedCluster:
        """The cluster ``up`` made with this prefix (from its ``cluster.json``; else whatever namespaces
        ``PREFIX0, PREFIX1, ...`` exist), for ``down`` and ``status``."""
        folder = Path(folder) if folder is not None else RUN_DIR / prefix
        state = folder / "cluster.json"
        if state.is_file():
            s = json.loads(state.read_text())
            c = cls(len(s["hosts"]), slots=s["slots"], prefix=s["prefix"], folder=folder,
                    rate={int(k): v for k, v in s["rate"].items()}, cpu={int(k): v for k, v in s["cpu"].items()})
            c.subnet = s["subnet"]
            return c
        if not PREFIX_RE.fullmatch(prefix):
            raise ClusterError(f"--prefix {prefix!r}: 1-8 lower-case letters and digits, starting with a letter")
        found = [int(n[len(prefix):]) for n in (_netns_list() if _has_ip() else [])
                 if re.fullmatch(re.escape(prefix) + r"\d+", n)]
        return cls(max(found, default=0) + 1, prefix=prefix, folder=folder)


def _proof_job(c: EmulatedCluster, nbytes: int) -> tuple[list[str], dict[str, str]] | str:
    """The command and environment of :meth:`EmulatedCluster.prove_network`'s job (one slot on host 0 and on host 1,
    this Python), or why there is none."""
    from .launch import environment, find_mpiexec, mpi_flavor  # here: `cluster down` needs none of launch's imports

    if importlib.util.find_spec("mpi4py") is None:
        return f"not checked: no mpi4py for {sys.executable}"
    try:
        exe = find_mpiexec()
    except GradcodeError as err:
        return f"not checked: {err}"
    flavor = mpi_flavor(exe)
    hosts = c.folder / "proof.hosts"
    hosts.write_text("".join(f"{name} slots=1\n" if flavor == "openmpi" else f"{name}:1\n" for name in c.names[:2]))
    # up runs as root: Open MPI must be told that this is intended
    env = {**environment(flavor), **c.env(), "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return [exe, "-n", "2", *c.hosts_args(flavor, hosts), sys.executable, "-c", PROOF_SCRIPT, str(nbytes)], env


RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


def _burst_bytes(rate: str) -> int:
    """tbf's bucket: 10 ms at ``rate`` (at least 16 kB), so that the kernel's timer tick does not cap the rate lower."""
    number, unit = re.fullmatch(r"([\d.]+)([a-z]+)", rate).groups()
    return max(16_000, int(float(number) * RATE_UNITS[unit] / 8 / 100))


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def _has_ip() -> bool:
    return _tool("ip") is not None


def _netns_list() -> list[str]:
    out = _sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _link_exists(name: str) -> bool:
    return _sh("ip", "link", "show", name, check=False).returncode == 0


def _free_subnet() -> str:
    used = _sh("ip", "-o", "-4", "addr", "show").stdout
    for x in range(256):
        net = SUBNETS.format(x)
        if f" 10.213.{x}." not in used:
            return net
    raise ClusterError("no free 10.213.X.0/24 subnet left for the bridge")


def _kill_netns(name: str) -> None:
    """End every process in namespace ``name``: SIGTERM, then SIGKILL after 2 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [int(p) for p in _sh("ip", "netns", "pids", name, check=False).stdout.split() if p.isdigit()]
        if not pids:
            return
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            if not _sh("ip", "netns", "pids", name, check=False).stdout.split():
                return
            time.sleep(0.05)


def _cgroup_base() -> Path:
    if CGROUP_V1.is_dir() and (CGROUP_V1 / "cpu.cfs_quota_us").exists():
        return CGROUP_V1
    return CGROUP_ROOT


def _make_cgroup(path: Path, cores: float) -> None:
    path.mkdir(parents=True, exist_ok=True)
    quota = max(1000, int(round(cores * PERIOD_US)))
    if (path / "cpu.cfs_quota_us").exists():       # cgroup v1
        (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (path / "cpu.cfs_quota_us").write_text(str(quota))
    elif (path / "cpu.max").exists():                # cgroup v2
        (path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
    else:
        raise ClusterError(f"--cpu: {path} has neither cpu.cfs_quota_us (cgroup v1) nor cpu.max (cgroup v2): the cpu "
                           "controller is not available here")


def _empty_cgroup(path: Path) -> None:
    procs = path / "cgroup.procs"
    for _ in range(3):
        try:
            pids = [int(p) for p in procs.read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def _launcher_script(c: EmulatedCluster) -> str:
    hosts = "|".join(c.names)
    groups = "".join(f'  {n}) cg={shlex.quote(str(c.cgroup(i)))};;\n' for i, n in enumerate(c.names) if c.cgroup(i))
    ip, unshare = (shlex.quote(_tool(t) or t) for t in ("ip", "unshare"))    # full paths: mpiexec's PATH may lack sbin
    return f"""#!/bin/sh
# gradcode emulated cluster '{c.prefix}' (mpi_runtime/cluster_emu.py): an ssh stand-in for mpiexec.
#   {c.launcher} [ssh options] HOST COMMAND...
# runs COMMAND on HOST as ssh would (its words joined, through sh -c), inside the host's network namespace with
# the host's name as hostname, an IPC namespace and a /dev/shm of its own (so that MPI's shared-memory transports
# cannot reach another host's ranks: payloads cross the host's link), and in its cgroup when its CPU is limited.
# Hydra: HYDRA_LAUNCHER=ssh
# HYDRA_LAUNCHER_EXEC={c.launcher}; Open MPI: OMPI_MCA_plm_rsh_agent={c.launcher}.
while [ $# -gt 0 ]; do
  h=${{1#*@}}
  case "$h" in
    {hosts}) break;;
    -[bcDEeFIiJLlmOopQRSWw]) shift 2;;
    -*) shift;;
    *) echo "gradcode cluster launcher: no host '$1' in cluster '{c.prefix}' (hosts: {' '.join(c.names)})" >&2
       exit 255;;
  esac
done
[ $# -ge 2 ] || {{ echo "usage: $0 [ssh options] HOST COMMAND..." >&2; exit 255; }}
shift
cg=
case "$h" in
{groups}esac
[ -n "$cg" ] && echo $$ > "$cg/cgroup.procs"
exec {ip} netns exec "$h" {unshare} --uts --ipc --mount sh -c \
  'hostname "$0" && mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec sh -c "$*"' "$h" "$@"
"""
