"""How much memory this machine lets a process have: the smallest of the free memory, the cgroup's limit and the
address-space limit (:func:`available_bytes`), and byte counts for messages (:func:`describe_bytes`).

What a run will need is estimated by :mod:`gradcode.clusters.footprint`; the codes and schemes use this module to
refuse, before building, a matrix that cannot fit.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path


def available_bytes() -> tuple[int, str] | None:
    """Memory this process may still use and where the figure comes from (the smallest of the system's
    ``MemAvailable``, a cgroup's ``memory.max`` and ``ulimit -v``); None if none can be read."""
    found = [x for x in (_meminfo(), _cgroup(), _rlimit()) if x is not None]
    return min(found) if found else None


def _meminfo() -> tuple[int, str] | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "free physical memory"
    except (OSError, ValueError, AttributeError):
        return None


def _cgroup() -> tuple[int, str] | None:
    root = Path("/sys/fs/cgroup")
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((root / "memory.current").read_text()), "the cgroup's memory.max"
    except (OSError, ValueError):
        return None


def _rlimit() -> tuple[int, str] | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:   # the limit counts the address space already mapped (the interpreter, numpy, scipy)
        status = Path("/proc/self/status").read_text()
        used = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmSize:"))
    except (OSError, ValueError, StopIteration):
        used = 0
    return soft - used, "ulimit -v (RLIMIT_AS)"


def describe_bytes(x: float) -> str:
    """A byte count for a message: ``"12 MB"``, ``"3.4 GB"``, ``"1.2e+12 GB"`` above 1e15 bytes."""
    if x >= 1e15:
        return f"{x / 1e9:.1e} GB"
    return f"{x / 1e9:.1f} GB" if x >= 1e8 else f"{x / 1e6:.0f} MB"
