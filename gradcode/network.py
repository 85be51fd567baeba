"""Bytes on links: the ``[network]`` table and what it does to a master iteration and an All-Reduce.

Without a ``[network]`` a message's time is the delay model's ``comm`` draw alone, whatever its size. With one, every
rank sits on a host (``slots``: ranks a host, in rank order, the master, rank 0, first, as a hostfile places them),
every host has one full-duplex link (``link``, or its own in ``links``) and every transfer between two hosts pays
the alpha-beta cost (Hockney): ``latency + bytes / rate``. The delay model's ``comm`` stays what it was (the
software's own time before a message leaves); the network adds the wire (``docs/network.md``).

- **Plans.** The master sends each worker its plan, the model of ``d`` floats, when the worker can take it
  (:func:`gradcode.clusters.iteration.begins`); the worker begins when it has arrived.
- **Messages.** Worker ``i``'s message of ``scheme.message_bytes(d)`` leaves at ``send`` (its chunk's end plus
  ``comm``) and crosses its host's link out, then the master's host's link in. Each link serves one transfer at a
  time, first come first served by the time a transfer is ready (ties: by worker), and is busy with it for its
  bytes at its own rate: a message's transfer leaves at ``s_out = max(send, out_free[h])`` (then ``out_free[h] =
  s_out + b / r_h``), enters the master's link at ``s_in = max(s_out + latency, in_free)`` (then ``in_free = s_in +
  b / r_master``) and arrives when both have carried it, ``max(in_free, out_free[h] + latency)``. So ``n``
  messages of ``b`` bytes into one master take at least ``n b / r_master``, the parameter server's bottleneck, and
  a slow host's transfers do not hold the master's link longer than its own bytes take (as TCP shares a link among
  flows). Ranks on the master's host do not cross a link. Plans go the other way through the same two queues.
- **All-Reduce** (DropCompute, anytime: ``d + 1`` floats, the sum and the count): hosts first (MPICH reduces within a
  host, so the links carry each host's share once), then MPICH's algorithm among the ``H`` hosts (Thakur,
  Rabenseifner and Gropp 2005), at the slowest link's rate ``1 / beta`` and the latency ``alpha``: with ``p`` the
  largest power of two ``<= H`` and ``m`` bytes, recursive doubling for short vectors, ``log2 p (alpha + m beta)``,
  and Rabenseifner's reduce-scatter and all-gather for long ones, ``2 log2 p alpha + 2 (p - 1) / p m beta``; when
  ``H`` is not a power of two the extra ``H - p`` hosts first hand their vector to a partner and get the result back
  at the end, ``2 (alpha + m beta)`` more.

Units: the table is in seconds and bytes per second, the delay model in units; ``[run] time_scale`` (seconds per
unit, the one the MPI cluster sleeps by) converts, so that a simulated run and an MPI run of the same spec put the
same wire time into the same units.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ConfigError, check_float, check_int

FLOAT_BYTES = 8     # every message travels as float64 (a complex one as two)
SHORT_ALL_REDUCE = 2048     # bytes: MPICH's MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE, below it recursive doubling

# tc's rate units (tc(8)): bit-based ones are bits per second, "bps"-based ones bytes per second
_RATE_UNITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "tbit": 1e12 / 8,
               "kibit": 1024 / 8, "mibit": 1024 ** 2 / 8, "gibit": 1024 ** 3 / 8, "tibit": 1024 ** 4 / 8,
               "bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12,
               "kibps": 1024.0, "mibps": 1024.0 ** 2, "gibps": 1024.0 ** 3, "tibps": 1024.0 ** 4}
_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]+)\s*$")

NETWORK_KEYS = {"link": "every host's link, both ways: bytes/s, or tc's units (\"1gbit\", \"200mbit\", \"100mbps\")",
                "latency": "one-way latency of a transfer between two hosts, seconds (default 0)",
                "slots": "ranks a host, in rank order, the master first: one number for every host, or a list "
                         "(default 1: every rank its own host)",
                "links": "per-host links overriding link, e.g. {1 = \"200mbit\"} (host 0 holds the master)",
                "d": "floats in the model, for a timing-only run (with a workload: the workload's)"}


def parse_rate(name: str, value) -> float:
    """A link rate in bytes per second: a number (bytes/s) or a string in tc's units (``"1gbit"`` is ``1.25e8``)."""
    if isinstance(value, str):
        match = _RATE.match(value)
        unit = match and match.group(2).lower()
        if not match or unit not in _RATE_UNITS:
            raise ConfigError(f"{name} = {value!r}: a rate in bytes/s, or a number and one of tc's units "
                              f"({', '.join(_RATE_UNITS)}), e.g. \"1gbit\"")
        value = float(match.group(1)) * _RATE_UNITS[unit]
    return check_float(name, value, low=0.0, low_open=True)


@dataclass(frozen=True)
class Network:
    """The ``[network]`` table, checked (:data:`NETWORK_KEYS`): rates in bytes per second, ``latency`` in seconds,
    ``slots`` one number (every host) or a tuple (host by host), ``links`` ``{host: bytes/s}``."""

    link: float
    latency: float = 0.0
    slots: int | tuple[int, ...] = 1
    links: Mapping[int, float] = field(default_factory=dict)
    d: int | None = None

    @classmethod
    def of(cls, table) -> Network:
        """The network a ``[network]`` table (a dict) describes, or ``table`` itself if it is one; a clear error
        naming the key otherwise."""
        if isinstance(table, Network):
            return table
        if not isinstance(table, Mapping):
            raise ConfigError(f"[network] must be a table ({', '.join(NETWORK_KEYS)}), got {table!r}")
        unknown = sorted(set(table) - set(NETWORK_KEYS))
        if unknown:
            raise ConfigError(f"[network] unknown key(s) {unknown}; accepted: "
                              + "; ".join(f"{k}: {v}" for k, v in NETWORK_KEYS.items()))
        if "link" not in table:
            raise ConfigError(f"[network] link is missing: {NETWORK_KEYS['link']}")
        slots = table.get("slots", 1)
        if isinstance(slots, (list, tuple)):
            if not slots:
                raise ConfigError("[network] slots must be a number or a non-empty list of numbers of ranks a host")
            slots = tuple(check_int(f"[network] slots[{h}]", s, low=1) for h, s in enumerate(slots))
        else:
            slots = check_int("[network] slots", slots, low=1)
        links = table.get("links", {})
        if not isinstance(links, Mapping):
            raise ConfigError("[network] links must be a table of host = rate, e.g. {1 = \"200mbit\"}, got "
                              f"{links!r}")
        over = {}
        for host, rate in links.items():
            if not (isinstance(host, int) or (isinstance(host, str) and host.isdigit())):
                raise ConfigError(f"[network] links: {host!r} is not a host number (0, 1, ...; 0 holds the master)")
            over[int(host)] = parse_rate(f"[network] links.{host}", rate)
        d = table.get("d")
        return cls(link=parse_rate("[network] link", table["link"]),
                   latency=check_float("[network] latency", table.get("latency", 0.0), low=0.0),
                   slots=slots, links=over, d=None if d is None else check_int("[network] d", d, low=1))

    def hosts(self, ranks: int) -> np.ndarray:
        """The host of each of ``ranks`` ranks, filled in rank order as a hostfile places them."""
        if isinstance(self.slots, int):
            return np.arange(ranks) // self.slots
        if sum(self.slots) < ranks:
            raise ConfigError(f"[network] slots {list(self.slots)} place {sum(self.slots)} ranks; the run has "
                              f"{ranks} (the master and {ranks - 1} workers): give more slots")
        return np.repeat(np.arange(len(self.slots)), self.slots)[:ranks]

    def bind(self, n: int, d: int | None, time_scale: float) -> Links:
        """The network of a run of ``n`` workers (ranks ``1..n``; the master rank 0) and a model of ``d`` floats
        (None: the table's ``d``), in units of ``time_scale`` seconds."""
        d = self.d if d is None else d
        if d is None:
            raise ConfigError("[network] d is needed in a timing-only run (no workload): the number of floats in "
                              "the model, which sets the bytes of every plan and message")
        host = self.hosts(n + 1)
        count = int(host.max()) + 1
        beyond = sorted(h for h in self.links if h >= count)
        if beyond:
            raise ConfigError(f"[network] links names host(s) {beyond}, but the run's {n + 1} ranks fill hosts "
                              f"0..{count - 1}")
        rate = np.array([self.links.get(h, self.link) for h in range(count)]) * time_scale
        return Links(host=host, per_unit=rate, latency=self.latency / time_scale, d=d)

    def table(self) -> dict[str, Any]:
        """The ``[network]`` table (bytes/s and seconds) that makes this network again."""
        out: dict[str, Any] = {"link": self.link, "latency": self.latency,
                               "slots": list(self.slots) if isinstance(self.slots, tuple) else self.slots}
        if self.links:
            out["links"] = {str(h): r for h, r in self.links.items()}
        if self.d is not None:
            out["d"] = self.d
        return out


@dataclass(frozen=True)
class Links:
    """A network bound to a run (:meth:`Network.bind`): ``host[r]`` of rank ``r`` (worker ``i`` is rank ``i + 1``),
    each host's link in bytes per unit (``per_unit``), ``latency`` in units, the model's ``d`` floats."""

    host: np.ndarray
    per_unit: np.ndarray
    latency: float
    d: int

    @property
    def plan_bytes(self) -> int:
        """A plan's bytes: the model's ``d`` floats (the plan's few indices are left out)."""
        return FLOAT_BYTES * self.d

    def plans(self, ready: np.ndarray, nbytes: int) -> np.ndarray:
        """When each worker has its plan, sent by the master when the worker is ready for it (``ready``)."""
        workers = np.arange(len(ready))
        return self._fifo(ready, workers, nbytes, toward_master=False)

    def messages(self, send: np.ndarray, worker: np.ndarray, nbytes: int) -> np.ndarray:
        """When each message ``k`` of worker ``worker[k]``, sent at ``send[k]``, arrives at the master."""
        return self._fifo(send, worker, nbytes, toward_master=True)

    def _fifo(self, ready: np.ndarray, worker: np.ndarray, nbytes: int, toward_master: bool) -> np.ndarray:
        """The module's queue (first come, first served, ties by position) of transfers between the master's host
        and each worker's, one way."""
        ready = np.asarray(ready, dtype=float)
        arrive = ready.copy()
        master, far = self.host[0], self.host[np.asarray(worker) + 1]
        crossing = np.flatnonzero((far != master) & np.isfinite(ready))
        out_free = np.zeros(len(self.per_unit))     # when each host's link is free, outward
        in_free = np.zeros(len(self.per_unit))      # and inward
        lat = self.latency
        for k in crossing[np.argsort(ready[crossing], kind="stable")].tolist():
            src, dst = (far[k], master) if toward_master else (master, far[k])
            s_out = max(ready[k], out_free[src])
            s_in = max(s_out + lat, in_free[dst])
            in_free[dst], out_free[src] = s_in + nbytes / self.per_unit[dst], s_out + nbytes / self.per_unit[src]
            arrive[k] = max(in_free[dst], out_free[src] + lat)
        return arrive

    def all_reduce(self, nbytes: int) -> float:
        """Units an All-Reduce of ``nbytes`` takes among the hosts of every rank (the module's formula; 0 on one
        host)."""
        hosts = np.unique(self.host)
        if len(hosts) < 2:
            return 0.0
        alpha, beta = self.latency, 1.0 / float(self.per_unit[hosts].min())
        p = 1 << (len(hosts).bit_length() - 1)
        steps = math.log2(p)
        extra = 0.0 if p == len(hosts) else 2 * (alpha + nbytes * beta)
        if nbytes < SHORT_ALL_REDUCE:
            return steps * (alpha + nbytes * beta) + extra
        return 2 * steps * alpha + 2 * (p - 1) / p * nbytes * beta + extra


def bind(network: Network | None, n: int, d: int | None, time_scale: float) -> Links | None:
    """:meth:`Network.bind`, or None without a network."""
    return None if network is None else network.bind(n, d, time_scale)


def describe_network(table) -> str:
    """A report's sentence on the network a spec assumed (its ``[network]`` table, or None)."""
    if not table:
        return ("Network: none (no [network] table): a message costs its delay model's comm draw whatever its "
                "size, an All-Reduce nothing more.")
    net = Network.of(table)
    slow = "".join(f", host {h} at {r * 8 / 1e6:g} Mbit/s" for h, r in sorted(net.links.items()))
    slots = list(net.slots) if isinstance(net.slots, tuple) else f"{net.slots} a host"
    return (f"Network: links of {net.link * 8 / 1e6:g} Mbit/s{slow}, latency {net.latency * 1e3:g} ms, ranks "
            f"{slots} (the master first): plans, messages and All-Reduces cross them (docs/network.md).")
