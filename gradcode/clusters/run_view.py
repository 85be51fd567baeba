"""A run's workers and hosts from its records: who answered, how fast, on which host.

A worker's **response time** in an iteration is ``worker_arrived - worker_plan_received`` (its plan in hand to its
message at the master: compute, emulated delay and the send), its **mean** over the iterations in which it answered;
``answered`` is the share of iterations in which its message arrived. A host's row gathers its workers. An MPI run's
rank 0 writes the workers' hosts to ``hosts.json`` (:mod:`mpi_runtime.hosts`). ``gradcode run`` prints
:func:`slowest_lines` under its summary; :mod:`gradcode.output.run_report` and the comparison report build tables
from the same functions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def _num(x: float) -> str:
    return f"{x:.4g}"


HOSTS_FILE = "hosts.json"     # written by an MPI run's rank 0 (mpi_runtime.hosts)


def read_hosts(folder: Path) -> list[str] | None:
    """The workers' hosts of a run folder (worker ``i`` at index ``i``), ``None`` without a readable ``hosts.json``
    (a simulated run, or an MPI run from before it was written)."""
    try:
        workers = json.loads((Path(folder) / HOSTS_FILE).read_text())["workers"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [str(h) for h in workers] if isinstance(workers, list) else None


def scheme_text(summary: dict, records: list[dict]) -> str:
    """The scheme's name with what picks it out: a code and its ``s`` (the records carry them), else the name."""
    first = records[0] if records else {}
    code = first.get("code")
    name = str(summary.get("scheme") or first.get("scheme") or "?")
    return name if not code else f"{name} {code}" + (f" s={first['s']}" if first.get("s") is not None else "")


def per_worker(records: list[dict]) -> list[dict[str, Any]]:
    """Per worker ``i``: ``worker``, ``mean_response`` (None if it never answered) and ``answered`` (a share)."""
    n = max((len(r.get("worker_arrived") or []) for r in records), default=0)
    out = []
    for i in range(n):
        times = [r["worker_arrived"][i] - r["worker_plan_received"][i] for r in records
                 if _has(r, "worker_arrived", i) and _has(r, "worker_plan_received", i)]
        out.append({"worker": i, "mean_response": float(np.mean(times)) if times else None,
                    "answered": len(times) / len(records) if records else 0.0})
    return out


def _has(rec: dict, key: str, i: int) -> bool:
    values = rec.get(key)
    return isinstance(values, list) and i < len(values) and values[i] is not None


def per_host(workers: list[dict], hosts: list[str]) -> list[dict[str, Any]]:
    """Per host (in order of first appearance): ``host``, ``workers`` (their indices), ``mean_response`` (over
    its workers' means), ``answered`` (mean share) and ``slowest`` (the worker with the largest mean)."""
    out = []
    for host in dict.fromkeys(hosts):
        mine = [w for w in workers if w["worker"] < len(hosts) and hosts[w["worker"]] == host]
        means = [w["mean_response"] for w in mine if w["mean_response"] is not None]
        slowest = max((w for w in mine if w["mean_response"] is not None), key=lambda w: w["mean_response"],
                      default=None)
        out.append({"host": host, "workers": [w["worker"] for w in mine],
                    "mean_response": float(np.mean(means)) if means else None,
                    "answered": float(np.mean([w["answered"] for w in mine])) if mine else 0.0,
                    "slowest": None if slowest is None else slowest["worker"]})
    return out


def _ranked(items: list[dict], top: int) -> list[dict]:
    return sorted((x for x in items if x["mean_response"] is not None), key=lambda x: -x["mean_response"])[:top]


def slowest_lines(records: list[dict], hosts: list[str] | None, top: int = 3) -> list[str]:
    """The slowest workers (and hosts, with several) by mean response time, in model units."""
    workers = per_worker(records)
    ranked = _ranked(workers, top)
    if not ranked:
        return []
    where = (lambda w: f" on {hosts[w['worker']]}") if hosts and len(hosts) == len(workers) else (lambda w: "")
    lines = ["  slowest workers      " + ", ".join(f"{w['worker']}{where(w)} ({_num(w['mean_response'])}, "
                                                   f"answered {w['answered']:.0%})" for w in ranked)]
    if hosts and len(set(hosts)) > 1:
        lines.append("  slowest hosts        " + ", ".join(
            f"{h['host']} ({_num(h['mean_response'])}, workers {worker_span(h['workers'])})"
            for h in _ranked(per_host(workers, hosts), top)))
    return lines


def worker_span(indices: list[int]) -> str:
    return ",".join(map(str, indices))
