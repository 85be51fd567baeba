"""The MPI cluster's transport: headers with named fields, and the size limits that keep the master and the worker
readable (the simulator's loop: plan, publish, poll until the policy holds, conclude)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py")

from mpi_runtime import protocol as P  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MAX_FILE_LINES = {"master.py": 350, "worker.py": 350}
MAX_FUNCTION_LINES = 50


def test_a_result_header_travels_with_its_names():
    buf = np.zeros(P.RESULT_HEADER + 3)
    res = P.Result(t=7, worker=2, real=0.25, emulated=0.5, overrun=True, sent_at=123.5, chunks=3, kind=P.LAST,
                   taken_at=122.0, seq=-1)
    res.pack(buf)
    assert P.Result.read(buf) == res
    assert buf[P.RESULT_HEADER:].tolist() == [0.0, 0.0, 0.0]     # the payload after the header is untouched


def test_a_plan_unpacks_into_named_fields():
    capacity, d = 4, 5
    buf = np.zeros(P.plan_size(capacity, d))
    w = np.arange(d, dtype=float)
    P.pack_plan(buf, 3, 2.0, None, 10, (4, 7), w, capacity, stamp=99.5, chunked=True, tau=1.5)
    plan = P.unpack_plan(buf, capacity)
    assert (plan.t, plan.load, plan.batch, plan.n_parts, plan.parts) == (3, 2.0, None, 10, (4, 7))
    assert (plan.stamp, plan.slot, plan.chunked, plan.tau) == (99.5, -1, True, 1.5)
    assert P.WorkerPlan.issued(buf) == 99.5
    np.testing.assert_array_equal(plan.w, w)
    P.pack_plan(buf, 4, 1.0, 8, 10, (1,), w, capacity, stamp=100.0)
    plan = P.unpack_plan(buf, capacity)
    assert (plan.batch, plan.chunked, plan.tau) == (8, False, math.inf)


def test_the_overrun_rule():
    assert P.overran(1.0, until=0.0, add=False)                     # the work went past its emulated end
    assert not P.overran(1.0, until=0.0, add=True)                  # a delay added after the work
    assert not P.overran(P.RESOLUTION / 2, until=0.0, add=False)    # below the runtime's resolution
    assert not P.overran(1.0, until=math.inf, add=False)


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_the_mpi_runtime_stays_small_enough_to_read():
    """master.py and worker.py at most 350 lines each, and no function in mpi_runtime over 50 lines."""
    folder = ROOT / "mpi_runtime"
    too_long = []
    for path in sorted(folder.glob("*.py")):
        source = path.read_text()
        limit = MAX_FILE_LINES.get(path.name)
        if limit is not None and len(source.splitlines()) > limit:
            too_long.append(f"{path.name}: {len(source.splitlines())} lines (at most {limit})")
        for fn in _functions(ast.parse(source)):
            lines = fn.end_lineno - fn.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                too_long.append(f"{path.name}:{fn.lineno} {fn.name}: {lines} lines (at most {MAX_FUNCTION_LINES})")
    assert too_long == []
