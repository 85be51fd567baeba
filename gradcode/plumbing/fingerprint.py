"""The fingerprint of a run: its spec and every input the run reads, so a resume never reuses stale results.

A run is a pure function of its single-run spec *and* of what the spec names outside itself:

- files: any string of the spec that names an existing file (a trace CSV given by path), and the shipped trace a
  ``trace`` key names, by a hash of their content;
- user code: a class named by import path (``"package.module:ClassName"``) or by a plugin's entry-point name, by a
  hash of its module's source file (by the distribution's version when there is no source file);
- gradcode itself, by its version.

:func:`fingerprint` hashes the spec together with :func:`inputs`; the harness writes it into each run's
``run.json`` and ``COMPLETE`` marker and redoes a run whose fingerprint changed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import json
import os
import re
from functools import lru_cache
from typing import Any

from . import VERSION

IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
CLASS_KEYS = ("name", "code")        # keys whose value names a class (a table's factory, a coded scheme's code)


def fingerprint(spec: dict[str, Any]) -> str:
    """A short hash of ``spec`` and of :func:`inputs` (16 hex digits)."""
    text = json.dumps({"spec": spec, "inputs": inputs(spec)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def inputs(spec: dict[str, Any]) -> dict[str, str]:
    """``{input: version or content hash}`` of everything ``spec`` reads besides itself."""
    found = {"gradcode": VERSION}
    for key, value in _strings(spec):
        if IMPORT_PATH.match(value):
            found[f"module {value.partition(':')[0]}"] = _module_hash(value.partition(":")[0])
        elif key in CLASS_KEYS and (plugin := _plugin_module(value)) is not None:
            found[f"module {plugin}"] = _module_hash(plugin)
        elif key == "trace" and (shipped := _shipped_trace(value)) is not None:
            found[f"file {value}"] = _file_hash(shipped)
        elif os.path.isfile(value):
            found[f"file {os.path.abspath(value)}"] = _file_hash(os.path.abspath(value))
    return found


def _strings(node: Any, key: str = ""):
    """Every ``(key, string)`` in a nested spec (the key is the nearest table key)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, str(k))
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v, key)
    elif isinstance(node, str) and node:
        yield key, node


def _file_hash(path: str) -> str:
    st = os.stat(path)
    return _cached_hash(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=256)
def _cached_hash(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _module_hash(module: str) -> str:
    """The hash of a module's source file, else its distribution's version, else ``"unknown"``."""
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is not None and found.origin and os.path.isfile(found.origin):
        return _file_hash(found.origin)
    top = module.partition(".")[0]
    for dist in importlib.metadata.packages_distributions().get(top, []):
        return f"{dist}=={importlib.metadata.version(dist)}"
    return "unknown"


def _plugin_module(name: str) -> str | None:
    """The module of an installed plugin named ``name`` (an entry point of a ``gradcode.*`` group), if any."""
    for points in _entry_points().values():
        for ep in points:
            if ep.name == name:
                return ep.value.partition(":")[0]
    return None


@lru_cache(maxsize=1)
def _entry_points() -> dict[str, list]:
    groups = ("gradcode.codes", "gradcode.schemes", "gradcode.delays", "gradcode.workloads")
    return {g: list(importlib.metadata.entry_points(group=g)) for g in groups}


def _shipped_trace(name: str) -> str | None:
    path = importlib.resources.files("gradcode") / "data" / "traces" / f"{name}.csv"
    return str(path) if "/" not in name and path.is_file() else None
