"""The fingerprint of a run covers every input: a changed trace file or plugin module is rerun, unchanged inputs are
not, and the package version is part of it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from helpers import NO_MPI, ROOT, experiment, summary_rows

import gradcode.plumbing.fingerprint
from gradcode.study.harness import compare, load_experiment


def _trace_spec(path: Path) -> dict:
    out = experiment()
    out["delay"] = {"name": "trace", "trace": str(path), "normalize": False}
    return out


def test_a_changed_trace_file_is_rerun(tmp_path):
    trace = tmp_path / "t.csv"
    shutil.copy(ROOT / "gradcode" / "data" / "traces" / "bytedance-ST.csv", trace)
    out = tmp_path / "out"
    compare(_trace_spec(trace), out, progress=False, figures=False, mpi=NO_MPI)
    before = [r["mean_iteration_time"] for r in summary_rows(out)]
    head, *body = trace.read_text().splitlines()
    scaled = [",".join(line.split(",")[:4] + [repr(10 * float(line.split(",")[4]))]) for line in body]
    trace.write_text("\n".join([head, *scaled]) + "\n")
    compare(_trace_spec(trace), out, progress=False, figures=False, mpi=NO_MPI)
    after = [r["mean_iteration_time"] for r in summary_rows(out)]
    assert after == pytest.approx([10 * x for x in before])


PLUGIN = """from gradcode.delays.parametric import ConstantDelay


class Slow(ConstantDelay):
    def __init__(self, value=1.0, **kw):
        super().__init__(value={factor} * value, **kw)
"""


def test_a_changed_plugin_module_is_rerun_and_unchanged_inputs_are_not(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "slowplug.py").write_text(PLUGIN.format(factor=1))
    user = experiment()
    user["delay"] = {"name": "slowplug:Slow", "value": 1.0}
    out = tmp_path / "out"
    compare(user, out, progress=False, figures=False, mpi=NO_MPI)
    assert {r["mean_iteration_time"] for r in summary_rows(out)} == {1.0}
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/records.jsonl")}
    compare(user, out, progress=False, figures=False, mpi=NO_MPI)                 # nothing changed: nothing redone
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    plugin = tmp_path / "slowplug.py"
    plugin.write_text(PLUGIN.format(factor=3))
    # the edit as a user makes it, seconds later: Python's bytecode cache keys a module on its size and its mtime in
    # whole seconds, so an edit of the same size within the second of the first import would load the old code
    # (where bytecode is written: PYTHONDONTWRITEBYTECODE unset, as on a user's machine)
    later = plugin.stat().st_mtime + 2
    os.utime(plugin, (later, later))
    for name in [m for m in sys.modules if m == "slowplug"]:
        del sys.modules[name]
    from gradcode.plumbing.registry import DELAYS

    DELAYS._cache.pop("slowplug:Slow", None)
    compare(user, out, progress=False, figures=False, mpi=NO_MPI)
    assert {r["mean_iteration_time"] for r in summary_rows(out)} == {3.0}


def test_the_fingerprint_covers_the_package_version(monkeypatch):
    before = load_experiment(experiment(), mpi=NO_MPI).runs[0].digest()
    monkeypatch.setattr(gradcode.plumbing.fingerprint, "VERSION", "99.0")   # gradcode.__version__ is this string
    assert load_experiment(experiment(), mpi=NO_MPI).runs[0].digest() != before
