"""The classic gradient-coding experiment (``straggle``: base constant 1 per unit load, 2 workers 5 late) on the
real MPI cluster, against its exact times.

The MPI cluster only lets late workers finish their work (``late_workers = "finish"``), so the stragglers are a
fixed list (``workers = [0, 3]``): late every iteration, they never hold up a later one, and every iteration takes
exactly sync 6, fastest-k (k = n - 2) 1, an exact code with s = 2 its load 3. Sync runs with ``count = 2`` random
stragglers instead (it waits for everyone, so finishing late work cannot matter, and the fixed list would take the
same 6 units). The emulated (ideal) durations must be exact; the measured ones carry the runtime's overhead (a
loaded 2-core machine: 7 ranks), so they are checked the way tests/test_mpi.py checks timing: never below the ideal,
and on average within a tolerance of it.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import mpi_spec, run_mpi

from gradcode.clusters.sim import simulate
from gradcode.output.report import read_records
from gradcode.spec import build, load_spec

pytestmark = pytest.mark.mpi

SCALE = 0.05         # seconds per model time unit: sync's 6 units are 300 ms
TIMEOUT = 180
N = 6
# the runtime's overhead on a loaded 2-core machine (7 ranks): the median iteration at most 0.5 model units (25 ms)
# above its exact time, the mean at most 1.5 (the first iteration pays the start-up); both far below the 2 to 5
# units that a wrong straggler rule would add (a code or fastest-k waiting for a straggler takes 6)
MEDIAN_OVERHEAD, MEAN_OVERHEAD = 0.5, 1.5
BASE = {"name": "constant", "value": 1.0}
FIXED = {"name": "straggle", "base": BASE, "workers": [0, 3], "extra": 5}
RANDOM = {"name": "straggle", "base": BASE, "count": 2, "extra": 5}

CASES = {
    "sync_random": ({"name": "sync"}, RANDOM, 6.0),
    "fastest_k": ({"name": "fastest_k", "k": N - 2}, FIXED, 1.0),
    "coded": ({"name": "coded", "code": "cyclic_repetition", "s": 2}, FIXED, 3.0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_classic_straggle_on_mpi(case, tmp_path):
    scheme, delay, expected = CASES[case]
    spec = mpi_spec(scheme, n=N, iterations=8, delay=delay, scale=SCALE)
    proc, out = run_mpi(spec, tmp_path, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    records, whole = read_records(out / "records.jsonl")
    assert whole and len(records) == spec["run"]["iterations"]
    ideal = np.array([r["ideal_end"] - r["start"] for r in records])
    measured = np.array([r["end"] - r["start"] for r in records])
    np.testing.assert_allclose(ideal, expected, rtol=0, atol=1e-6)   # the emulated times: exact
    assert np.all(measured >= expected - 1e-3 / SCALE), measured
    assert np.median(measured) <= expected + MEDIAN_OVERHEAD, (measured, expected)
    assert measured.mean() <= expected + MEAN_OVERHEAD, (measured, expected)
    # the simulator (same spec, late workers finishing as on MPI) takes the same time and the same responders
    s = load_spec(spec)
    schemes, d, workload = build(s)
    sim = simulate(schemes[0], d, workload, s.options)
    np.testing.assert_allclose([r["end"] - r["start"] for r in sim.records], expected, rtol=0, atol=1e-12)
    for a, b in zip(sim.records, records, strict=True):
        assert sorted(int(i) for i in a["responders"]) == sorted(int(i) for i in b["responders"])
