"""Natural timing and per-worker times in every record; zero and tiny delays.

The simulator's records carry each worker's plan receipt, compute, send, arrival and emulated delay, consistent with
the iteration; the simulator refuses natural timing (``[delay] name = "none"``); zero and tiny delays count work and
messages; ``target_accuracy`` stops a run. Two MPI launches (4 workers): natural timing under ``sync`` on the
``mlp`` (every field present and consistent, no overhead ratio, no overrun, stopped at the target accuracy, a
timeline drawn from its records) and ``inject = "add"`` under ``fastest_k`` on least squares (each answer comes the
injected delay after the real compute).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import EPS, check_worker_times, read_whole_records, run_mpi

from gradcode import make_scheme
from gradcode.clusters.records import (
    WORKER_TIME_KEYS,
    WORKER_TIMES_MAX_N,
    as_written,
    jsonable,
    record_worker_times,
)
from gradcode.clusters.sim import simulate
from gradcode.delays import make_delay
from gradcode.errors import ConfigError
from gradcode.output.plots import timeline, worker_bars
from gradcode.spec import load_spec

LSQ = {"name": "least_squares", "n_samples": 48, "dim": 4, "seed": 1}
MLP = {"name": "mlp", "hidden": [8], "seed": 1}
# --- the simulator --------------------------------------------------------------------------------------------
SIM_CASES = {
    "sync": ({"name": "sync"}, "finish"),
    "fastest_k": ({"name": "fastest_k", "k": 2}, "finish"),
    "fastest_k_abandon": ({"name": "fastest_k", "k": 2}, "abandon"),
    "partial_coded": ({"name": "partial_coded", "s": 1}, "finish"),
    "dropcompute": ({"name": "dropcompute", "M": 2, "tau": 1.5}, "finish"),
}


@pytest.mark.parametrize("case", list(SIM_CASES))
def test_sim_records_hold_consistent_worker_times(case):
    table, late = SIM_CASES[case]
    scheme = make_scheme(table, 4)
    delay = make_delay("shifted_exponential", a=1.0, mu=1.0, comm=0.2)
    result = simulate(scheme, delay, LSQ, iterations=6, seed=3, late_workers=late)
    for rec in result.records:
        check_worker_times(rec, 4, all_answer=case in ("sync", "dropcompute"))
        line = json.loads(json.dumps(rec, default=jsonable))
        assert all(isinstance(line[key], list) for key in WORKER_TIME_KEYS)
    if not scheme.decentralized and not scheme.streams:   # the delay model's draws, as the MPI workers wait them out
        for rec in result.records:
            compute, comm = delay.sample(3, rec["iteration"], 4, 1.0)
            took = ~np.isnan(record_worker_times(rec, "worker_plan_received"))
            np.testing.assert_allclose(record_worker_times(rec, "worker_compute")[took], compute[0][took])
            np.testing.assert_allclose(record_worker_times(rec, "worker_delay")[took], (compute + comm)[0][took])
    if case == "fastest_k":   # a late worker gets the next plan when it is free: after the start
        assert any(np.nanmax(record_worker_times(r, "worker_plan_received")) > 0 for r in result.records)


def test_timing_only_records_keep_arrays_and_leave_them_out_for_huge_n():
    small = simulate(make_scheme("fastest_k", n=5, k=2), "exponential", None, iterations=3, late_workers="abandon")
    rec = small.records[0]
    assert isinstance(rec["worker_sent"], np.ndarray)          # no Python lists at large n
    check_worker_times(rec, 5)
    line = json.loads(json.dumps(rec, default=jsonable))
    assert line["worker_sent"].count(None) == 3                # NaN is written as null: 3 late workers
    huge = simulate(make_scheme("fastest_k", n=WORKER_TIMES_MAX_N, k=2), "exponential", None, iterations=2,
                    late_workers="abandon")
    assert not any(key in huge.records[0] for key in WORKER_TIME_KEYS)


def test_natural_timing_is_refused_by_the_simulator_and_inject_is_checked():
    assert make_delay("none").injects is False and make_delay("constant").injects is True
    with pytest.raises(ConfigError, match="natural timing is MPI-only.*trace"):
        simulate(make_scheme("sync", n=2), "none", LSQ, iterations=1)
    spec = {"cluster": {"workers": 2}, "workload": LSQ, "delay": {"name": "none"}, "scheme": {"name": "sync"},
            "run": {"iterations": 1}}
    from gradcode.study.harness import load_experiment

    with pytest.raises(ConfigError, match="kind = 'sim'.*MPI-only"):
        load_experiment(spec)
    with pytest.raises(ConfigError, match=r"inject = 'sleep': accepted: 'wait', 'add'"):
        load_spec({**spec, "run": {"inject": "sleep"}})
    from mpi_runtime.config import load_run

    assert load_run({**spec, "run": {"inject": "add"}}).options.inject == "add"
    assert load_run(spec).options.inject == "wait"


@pytest.mark.parametrize("value", [0.0, 1e-9])
@pytest.mark.parametrize("table", [{"name": "fastest_k", "k": 2}, {"name": "sync"}, {"name": "partial_coded", "s": 1},
                                   {"name": "dropcompute", "M": 2, "tau": 1.0}])
def test_zero_and_tiny_delays_in_the_simulator(value, table):
    result = simulate(make_scheme(table, 3), {"name": "constant", "value": value}, LSQ, iterations=3)
    s = result.summary
    assert s["messages"] > 0 and s["computed"] > 0 and s["wasted"] >= 0, s
    for rec in result.records:
        assert rec["messages"] > 0 and rec["wasted"] >= 0
        check_worker_times(rec, 3)
    if value == 0:
        assert s["overhead_ratio"] is None and "ideal time of 0" in s["overhead_ratio_note"]
    else:   # the virtual clock has no overhead: exactly 1, never an absurd figure
        assert s["overhead_ratio"] == pytest.approx(1.0) and s["median_overhead_ratio"] == pytest.approx(1.0)


def test_target_accuracy_stops_a_simulated_run():
    result = simulate(make_scheme("sync", n=3), "constant", MLP, iterations=40, eval_every=1, target_accuracy=0.3)
    accuracies = [r["test_accuracy"] for r in result.records]
    assert 1 < len(accuracies) < 40, accuracies
    assert accuracies[-1] >= 0.3 and max(accuracies[:-1]) < 0.3
    assert result.summary["time_to_target_accuracy"] == result.records[-1]["end"]
    # what a spec's unknown-key error and the guide say: it stops the run, as target_loss does
    from gradcode.spec import RUN_KEYS

    assert RUN_KEYS["target_accuracy"].startswith("stop") and RUN_KEYS["target_loss"].startswith("stop")
    assert "target_accuracy = 0.9        # stop there" in (Path(__file__).parents[1] / "docs/guide.md").read_text()


def test_timeline_bars_follow_the_worker_times():
    result = simulate(make_scheme("fastest_k", n=4, k=2), make_delay("exponential", comm=0.3), LSQ, iterations=2)
    rec = result.records[1]
    bars = {worker: (left, width, compute, role) for worker, left, width, compute, role in worker_bars(rec, 4)}
    received = record_worker_times(rec, "worker_plan_received")
    arrived = record_worker_times(rec, "worker_arrived")
    for i, (left, width, compute, _) in bars.items():
        assert left == pytest.approx(rec["start"] + received[i])
        if not math.isnan(arrived[i]):
            assert width == pytest.approx(arrived[i] - received[i]) and 0 < compute <= width
    assert sum(role == "waited-for" for *_, role in bars.values()) == 1
    assert worker_bars({k: v for k, v in rec.items() if k not in WORKER_TIME_KEYS}, 4) is None


def test_timeline_of_older_records_draws_their_busy_spans():
    """Records without per-worker times (older files) are drawn from ``busy``, in memory (an array, NaN rows) or
    as read from a file (lists, null rows), the same bars either way."""
    from gradcode.output.plots import _exact_bars

    class Axes:
        def __init__(self):
            self.bars = []

        def barh(self, worker, width, left, color, **_):
            self.bars.append((worker, left, width, color))

        def axvline(self, *_, **__):
            pass

    result = simulate(make_scheme("fastest_k", n=4, k=2), make_delay("pareto"), LSQ, iterations=8, seed=2)
    older = [{k: v for k, v in r.items() if k not in WORKER_TIME_KEYS} for r in result.records]
    drawn = []
    for records in (older, as_written(older)):
        axes = Axes()
        for rec in records:
            _exact_bars(axes, rec, 4)
        drawn.append(axes.bars)
    assert drawn[0] == drawn[1]
    spans = [(r["iteration"], i, span) for r in older for i, span in enumerate(r["busy"].tolist())]
    assert len(drawn[0]) == sum(not math.isnan(span[0]) for *_, span in spans) < 4 * len(older)  # some were late
    assert sum(colour == "tab:red" for *_, colour in drawn[0]) == len(older)     # one waited-for a step


# --- MPI: two launches ------------------------------------------------------------------------------------------
MPI_TIMEOUT = 300   # a loaded 2-core machine: start-up of 5 ranks can take a while


def _mpi_spec(scheme: dict, delay: dict, **run) -> dict:
    return {"cluster": {"workers": 4}, "workload": dict(MLP), "delay": delay, "scheme": scheme,
            "run": {"iterations": 8, "seed": 0, "time_scale": 1.0, "grace": 20.0, "startup_timeout": 120.0, **run}}


def _mpi(spec: dict, tmp_path: Path) -> tuple[list[dict], dict]:

    proc, out = run_mpi(spec, tmp_path, timeout=MPI_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return read_whole_records(out), json.loads((out / "summary.json").read_text())


@pytest.mark.mpi
def test_natural_timing_on_mpi(tmp_path):
    """sync, nothing injected: real compute and transfer; every field present and consistent; no overhead ratio and
    no overrun; the run stops at the target accuracy; a timeline is drawn from these records."""
    spec = _mpi_spec({"name": "sync"}, {"name": "none"}, iterations=40, eval_every=1, target_accuracy=0.3)
    records, summary = _mpi(spec, tmp_path)
    assert 1 < len(records) < 40
    assert records[-1]["test_accuracy"] >= 0.3 and all(r["test_accuracy"] < 0.3 for r in records[:-1])
    for rec in records:
        check_worker_times(rec, 4, all_answer=True)
        assert rec["worker_delay"] == [None] * 4 and rec["overruns"] == []
        assert min(rec["worker_compute"]) > 0      # real, measured compute
    assert summary["overhead_ratio"] is None and summary["median_overhead_ratio"] is None
    assert "natural timing" in summary["overhead_ratio_note"] and summary["overruns"] == 0
    assert summary["messages"] == 4 * len(records)
    run = SimpleNamespace(meta={"scheme_name": "sync", "scheme": "sync", "delay": "none", "seed": 0,
                                "cluster": "mpi", "workers": 4}, records=records)
    timeline([run], tmp_path / "timeline.png")
    assert (tmp_path / "timeline.png").stat().st_size > 1000
    bars = worker_bars(records[1], 4)     # each worker's own span, within the iteration, not the whole of it
    assert len(bars) == 4 and all(left >= records[1]["start"] - EPS and left + width <= records[1]["end"] + EPS
                                  for _, left, width, _, _ in bars)
    assert min(width for _, _, width, _, _ in bars) < records[1]["end"] - records[1]["start"]


@pytest.mark.mpi
def test_inject_add_comes_after_the_real_compute_on_mpi(tmp_path):
    """fastest_k with a constant delay added after the real compute: each answer leaves at least the injected
    delay after the compute (and not much later), the fields say what was injected, nothing overruns."""
    value = 0.03    # seconds (time_scale 1) per unit of load
    spec = _mpi_spec({"name": "fastest_k", "k": 3}, {"name": "constant", "value": value}, iterations=6,
                     inject="add")
    spec["workload"] = dict(LSQ)   # no scikit-learn to import on every rank (the mlp's data): seconds less
    records, summary = _mpi(spec, tmp_path)
    assert len(records) == 6 and summary["overruns"] == 0
    for rec in records:
        check_worker_times(rec, 4)
        received, compute, sent, _, delay = (record_worker_times(rec, k) for k in WORKER_TIME_KEYS)
        answered = ~np.isnan(sent)
        np.testing.assert_allclose(delay[answered], value)
        held = sent[answered] - received[answered] - compute[answered]    # the wait after the compute
        assert (held >= value - 1e-3).all(), held
        assert rec["end"] - rec["start"] >= value
    assert np.median([r["end"] - r["start"] for r in records]) < value + 0.5    # about the injected amount
