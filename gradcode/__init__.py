"""gradcode: straggler-tolerant distributed gradient descent.

Gradient codes, waiting for fewer workers (fastest-k, backup workers, adaptive k and load) and DropCompute behind one
scheme interface, run on a simulated cluster (virtual clock) or a real MPI cluster (``mpi_runtime``), and compared
under one timing harness with common random numbers.

Layers (dependencies point down only): ``codes``, ``delays``, ``workloads`` -> ``schemes`` -> ``sim`` (and
``mpi_runtime``) -> ``spec``, ``cli``. Nothing here imports mpi4py; galois is imported only when the finite-field
code is built.

The four public base classes, :class:`Code`, :class:`Scheme`, :class:`DelayModel` and :class:`Workload`, are what a
user subclasses to add a part without editing the package: a spec names the subclass by import path
(``name = "mymodule:MyWorkload"``) or an installed plugin declares it as an entry point
(:mod:`gradcode.plumbing.registry`);
:func:`describe` shows the parameters of any of them.
"""

from __future__ import annotations

import importlib

from .errors import ConfigError as ConfigError
from .errors import DecodeFallbackWarning as DecodeFallbackWarning
from .errors import GradcodeError as GradcodeError
from .errors import IllConditionedError as IllConditionedError
from .errors import NotDecodableError as NotDecodableError
from .plumbing import VERSION

__version__ = VERSION

# The public surface is imported on first use (PEP 562), which keeps `import gradcode` fast (a few ms, not the
# seconds of numpy and scipy): the `gradcode` command then catches a Ctrl-C during its imports (cli.main) and
# prints one line instead of a KeyboardInterrupt traceback.
_LAZY = {
    "Code": "codes", "code_class": "codes", "list_codes": "codes", "make_code": "codes",
    "DelayModel": "delays", "list_delays": "delays", "make_delay": "delays",
    "Scheme": "schemes", "list_schemes": "schemes", "make_scheme": "schemes",
    "Workload": "workloads", "list_workloads": "workloads", "make_workload": "workloads",
    "describe": "plumbing.registry",
    "SimResult": "clusters.sim", "SimulationError": "clusters.sim", "simulate": "clusters.sim",
    "RunOptions": "spec",
}


_SUBPACKAGES = ("codes", "delays", "schemes", "workloads")


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    if name in _SUBPACKAGES:     # `import gradcode; gradcode.codes.X`, as when the package imported them eagerly
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'gradcode' has no attribute {name!r}")


# the errors imported above, and what _LAZY names
__all__ = sorted([*_LAZY, "ConfigError", "DecodeFallbackWarning", "GradcodeError", "IllConditionedError",
                  "NotDecodableError"])
