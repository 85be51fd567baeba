"""gradcode: straggler-tolerant distributed gradient descent.

Gradient codes, waiting for fewer workers (fastest-k, backup workers, adaptive k and load) and DropCompute behind one
scheme interface, run on a simulated cluster (virtual clock) or a real MPI cluster (``mpi_runtime``), and compared
under one timing harness with common random numbers.

Layers (dependencies point down only): ``codes``, ``delays``, ``workloads`` -> ``schemes`` -> ``sim`` (and
``mpi_runtime``) -> ``spec``, ``cli``. Nothing here imports mpi4py; galois is imported only when the finite-field
code is built.
"""

from __future__ import annotations

import importlib

from .codes import code_class, list_codes, make_code
from .errors import ConfigError, GradcodeError, IllConditionedError, NotDecodableError

__version__ = "0.1.0"

# The rest of the public surface is imported on first use (PEP 562), which keeps `import gradcode` fast.
_LAZY = {
    "list_delays": "delays", "make_delay": "delays",
    "list_schemes": "schemes", "make_scheme": "schemes",
    "list_workloads": "workloads", "make_workload": "workloads",
    "SimResult": "sim", "SimulationError": "sim", "simulate": "sim",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gradcode' has no attribute {name!r}")


__all__ = [
    "ConfigError",
    "GradcodeError",
    "IllConditionedError",
    "NotDecodableError",
    "SimResult",
    "SimulationError",
    "code_class",
    "list_codes",
    "list_delays",
    "list_schemes",
    "list_workloads",
    "make_code",
    "make_delay",
    "make_scheme",
    "make_workload",
    "simulate",
]
