"""Modules that moved when the package was laid out by layer, still importable by their old names.

``import gradcode.harness`` (or ``from gradcode.cluster import summarize``) keeps working for code written before
the move: a finder on ``sys.meta_path`` answers an old name with the module at its new place (the same module
object, so a monkeypatch or an ``isinstance`` check sees one module) and warns once with a
:class:`DeprecationWarning` naming the new path. :data:`MOVED` is the one table of old -> new names; a name below
an old one (``gradcode.sim.something``) follows its parent.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    "gradcode._params": "gradcode.plumbing.params",
    "gradcode.registry": "gradcode.plumbing.registry",
    "gradcode.outdir": "gradcode.plumbing.outdir",
    "gradcode.children": "gradcode.plumbing.children",
    "gradcode.fingerprint": "gradcode.plumbing.fingerprint",
    "gradcode.progress": "gradcode.plumbing.progress",
    "gradcode.datafile": "gradcode.plumbing.datafile",
    "gradcode.memory": "gradcode.clusters.footprint",      # its estimates; the machine's memory is plumbing.memory
    "gradcode.metrics": "gradcode.workloads.metrics",
    "gradcode.cluster": "gradcode.clusters",               # the driver and the records, re-exported together
    "gradcode.sim": "gradcode.clusters.sim",
    "gradcode.numfmt": "gradcode.output.numfmt",
    "gradcode.report": "gradcode.output.report",
    "gradcode.report_html": "gradcode.output.report_html",
    "gradcode.plots": "gradcode.output.plots",
    "gradcode.regimes": "gradcode.output.regimes",
    "gradcode.regime_plots": "gradcode.output.regime_plots",
    "gradcode.harness": "gradcode.study.harness",
    "gradcode.sweep": "gradcode.study.sweep",
    "gradcode.sweep_run": "gradcode.study.sweep_run",
    "gradcode.capture": "gradcode.study.capture",
    "gradcode.demo": "gradcode.study.demo",
}


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new place (already imported, or imported now)."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # The import system has just set the old name's spec on the module: give it back its own.
        module.__spec__ = self.spec


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old names of :data:`MOVED` (and the names below them) and nothing else."""

    def find_spec(self, fullname: str, path=None, target=None):
        old = next((o for o in MOVED if fullname == o or fullname.startswith(o + ".")), None)
        if old is None:
            return None
        new = MOVED[old] + fullname[len(old):]
        warnings.warn(f"{fullname} moved to {new}; import it from there (the old name will go in a later release)",
                      DeprecationWarning, stacklevel=2)   # the import machinery's frames are skipped
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (``import gradcode`` does)."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
