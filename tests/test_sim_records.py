"""The simulated cluster's records: consistent with zero and tiny delays, a uniform load as one number, per-worker
lists compact at huge n.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from gradcode import make_delay, make_scheme, make_workload, simulate
from gradcode.clusters.records import jsonable, record_load


@pytest.mark.parametrize("delay", [{"name": "constant", "value": 0}, {"name": "constant", "value": 5e-324},
                                   {"name": "constant", "value": 0, "comm": 1e-310}], ids=str)
@pytest.mark.parametrize("scheme", [{"name": "sync"}, {"name": "fastest_k", "k": 3},
                                    {"name": "coded", "code": "cyclic_repetition", "s": 2},
                                    {"name": "adaptive_k_load", "max_batch": 2}], ids=str)
@pytest.mark.parametrize("late", ["finish", "abandon", "between_chunks"])
def test_zero_delay_records_are_consistent(delay, scheme, late):
    workload = make_workload({"name": "least_squares", "n_samples": 60, "dim": 3})
    for wl in (None, workload):
        res = simulate(make_scheme(**scheme, n=6), delay, wl, iterations=3, late_workers=late)
        for rec in res.records:
            used = float(record_load(rec, 6)[list(rec["responders"])].sum())
            assert rec["messages"] >= len(rec["responders"]) > 0
            assert rec["computed"] >= used - 1e-12 and rec["wasted"] >= 0
        assert res.summary["wasted"] >= 0 and res.summary["computed"] > 0


def test_uniform_load_is_one_number_and_read_back():
    res = simulate(make_scheme("fastest_k", n=5, k=3), "exponential", iterations=2)
    assert [rec["load"] for rec in res.records] == [1.0, 1.0]
    assert record_load(res.records[0], 5).tolist() == [1.0] * 5
    assert record_load({"load": [1.0, 2.0]}, 2).tolist() == [1.0, 2.0]
    res = simulate(make_scheme("dropcompute", n=4, M=3, tau=1.0, warmup=0), "exponential", iterations=2)
    assert any(np.ndim(rec["load"]) == 1 for rec in res.records)   # workers that kept different loads


def test_per_worker_lists_are_compact_at_huge_n():
    # a sync step at n = 20,002 names the stragglers (none) and the last to arrive, not every responder (which
    # would be a 7.9 MB JSON line at n = 10^6). Per-worker lists of equal values are one number.
    from gradcode.clusters.records import _is_record, per_worker, record_responders, worker_values

    n = 20_002
    res = simulate(make_scheme("sync", n=n), make_delay("exponential"), iterations=2, seed=0)
    rec = res.records[0]
    assert rec["responders"]["count"] == n and rec["responders"]["stragglers"] == []
    assert len(json.dumps(rec, default=jsonable)) < 2000
    order = record_responders(rec, n)
    assert sorted(order) == list(range(n)) and order[-1] == rec["responders"]["last"]
    assert _is_record(json.loads(json.dumps(rec, default=jsonable)))
    small = simulate(make_scheme("fastest_k", n=6, k=4), make_delay("exponential"), iterations=1, seed=0)
    assert not isinstance(small.records[0]["responders"], dict) and len(small.records[0]["responders"]) == 4
    assert per_worker(np.full(5, 2.0)) == 2.0 and per_worker([1.0, 2.0]).tolist() == [1.0, 2.0]
    assert worker_values({"w": 3}, "w", 4).tolist() == [3] * 4 and worker_values({}, "w", 4) is None
