"""Trace capture and replay: ``gradcode trace export`` of a run's per-worker times,
the ``trace`` delay model's ``comm_s`` column and ``offset``, the exact round trip through the simulator, a
what-if comparison on a captured trace, and one natural-timing MPI capture replayed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gradcode.cli import main
from gradcode.clusters.records import record_load
from gradcode.clusters.sim import simulate
from gradcode.delays import make_delay
from gradcode.errors import ConfigError
from gradcode.output.report import read_records
from gradcode.schemes import make_scheme
from gradcode.study.capture import FIELDS, HEADER, export_trace, trace_rows

WORKLOAD = {"name": "least_squares", "n_samples": 120, "dim": 4, "seed": 1}


def _rec(t: int, start: float, got, sent, arrived, load=1.0) -> dict:
    n = len(got)
    end = start + max(a for a in arrived if a is not None)
    return {"scheme": "sync", "iteration": t, "start": start, "end": end, "ideal_end": end, "responders": [],
            "messages": n, "computed": 1.0, "wasted": 0.0, "load": load, "worker_plan_received": got,
            "worker_compute": [None] * n, "worker_sent": sent, "worker_arrived": arrived, "worker_delay": [None] * n}


def _write(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def _read_csv(path: Path) -> tuple[str, np.ndarray]:
    text = path.read_text().splitlines()
    return text[0], np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)


# --- export -----------------------------------------------------------------------------------------------------
def test_export_format_per_unit_of_load_and_comm(tmp_path, capsys):
    # iteration 0: worker 1 carries load 2; iteration 1: worker 0 is still busy (its result of iteration 0 arrived
    # at 3.0, after iteration 1's start at 2.5), so its begin is when it got the plan; iteration 2: a worker missing
    records = [_rec(0, 0.0, [0.1, 0.2], [1.1, 2.2], [3.0, 2.5], load=[1.0, 2.0]),
               _rec(1, 2.5, [0.5, 0.1], [1.5, 0.6], [1.75, 0.7], load=[1.0, 2.0]),
               _rec(2, 4.0, [0.1, None], [0.9, None], [1.0, None], load=[1.0, 2.0])]
    run = _write(tmp_path / "run", records)
    assert main(["trace", "export", str(run), "--out", str(tmp_path / "t.csv")]) == 0
    assert "4 rows" in capsys.readouterr().out
    header, rows = _read_csv(tmp_path / "t.csv")
    assert header == HEADER == "step,dp_rank,stage,microbatch,compute_s,comm_s"
    expected = [  # step, worker, stage, microbatch, (sent - got) / load, (arrived - sent) + (got - begin)
        [0, 0, 0, 0, 1.0, 1.9 + 0.1], [0, 1, 0, 0, 1.0, 0.3 + 0.2],
        [1, 0, 0, 0, 1.0, 0.25 + 0.0], [1, 1, 0, 0, 0.25, 0.1 + 0.1]]
    np.testing.assert_allclose(rows, expected, rtol=1e-12, atol=1e-15)
    # the same rows from the function, and iteration 2 named as skipped
    assert trace_rows(records)[1] == [2]


def test_export_errors_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="not a folder"):
        export_trace(tmp_path / "nowhere", tmp_path / "t.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="has no records.jsonl"):
        export_trace(tmp_path / "empty", tmp_path / "t.csv")
    old = _rec(0, 0.0, [0.0], [1.0], [1.5])
    for key in FIELDS:
        del old[key]
    _write(tmp_path / "old", [old])
    with pytest.raises(ConfigError, match="worker_plan_received.*worker_delay.*rerun the experiment"):
        export_trace(tmp_path / "old", tmp_path / "t.csv")
    run = _write(tmp_path / "run", [_rec(0, 0.0, [0.0], [1.0], [1.5])])
    with pytest.raises(ConfigError, match="--out .*existing folder"):
        export_trace(run, tmp_path / "missing" / "t.csv")
    with pytest.raises(ConfigError, match="--out"):
        export_trace(run, tmp_path)
    _write(tmp_path / "bad", [_rec(0, 0.0, [0.5], [0.2], [1.5])])      # sent before the plan came
    with pytest.raises(ConfigError, match="out of order"):
        export_trace(tmp_path / "bad", tmp_path / "t.csv")
    _write(tmp_path / "cmp" / "runs" / "a", [_rec(0, 0.0, [0.0], [1.0], [1.5])])
    with pytest.raises(ConfigError, match=r"compare folder.*--run \(a\)"):
        export_trace(tmp_path / "cmp", tmp_path / "t.csv")
    with pytest.raises(ConfigError, match="no such run"):
        export_trace(tmp_path / "cmp", tmp_path / "t.csv", run="b")
    assert export_trace(tmp_path / "cmp", tmp_path / "t.csv", run="a")[1] == 1
    assert main(["trace", "export", str(tmp_path / "empty"), "--out", str(tmp_path / "u.csv")]) == 2
    assert not (tmp_path / "u.csv").exists()


# --- replay -----------------------------------------------------------------------------------------------------
def test_trace_comm_column_replayed(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "\n0,0,0,0,1.0,0.1\n0,1,0,0,2.0,0.2\n1,0,0,0,3.0,0.3\n1,1,0,0,4.0,0.4\n")
    d = make_delay({"name": "trace", "trace": str(path), "normalize": False, "offset": 0, "comm": 1.0})
    compute, comm = d.sample(7, [0, 1], 2, load=2.0)
    np.testing.assert_array_equal(compute, [[2.0, 4.0], [6.0, 8.0]])
    np.testing.assert_allclose(comm, [[1.1, 1.2], [1.3, 1.4]])          # the model's comm plus the trace's
    micro, _ = d.sample_micro(7, 1, 2, M=3)                              # one speed per worker and step
    np.testing.assert_array_equal(micro, [[[3.0] * 3, [4.0] * 3]])
    assert d.mean() == pytest.approx(2.5 + 1.0 + 0.25)                   # i.i.d. view: compute + comm + trace comm
    normalized = make_delay({"name": "trace", "trace": str(path), "offset": 1})
    c2, m2 = normalized.sample(0, 0, 2)
    np.testing.assert_allclose(c2 * 2.5, [[3.0, 4.0]])
    np.testing.assert_allclose(m2 * 2.5, [[0.3, 0.4]])                   # comm in the same normalized unit
    plain = tmp_path / "p.csv"
    plain.write_text("step,dp_rank,stage,microbatch,compute_s\n0,0,0,0,1.0\n0,1,0,0,2.0\n")
    assert make_delay({"name": "trace", "trace": str(plain)}).sample(0, 0, 2)[1].tolist() == [[0.0, 0.0]]
    path.write_text(HEADER + "\n0,0,0,0,1.0,-0.1\n")
    with pytest.raises(ConfigError, match="comm_s must be finite and >= 0"):
        make_delay({"name": "trace", "trace": str(path)})
    with pytest.raises(ConfigError, match="offset"):
        make_delay({"name": "trace", "offset": -1})


def test_wrappers_keep_the_trace_comm_column(tmp_path):
    """straggle, heterogeneous, persistent and unresponsive around a captured trace replay its comm_s (sampled and in
    the i.i.d. view) unless they are given a comm of their own, which replaces it (as for any wrapped model)."""
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "\n0,0,0,0,1.0,0.1\n0,1,0,0,2.0,0.2\n1,0,0,0,3.0,0.3\n1,1,0,0,4.0,0.4\n")
    base = {"name": "trace", "trace": str(path), "normalize": False, "offset": 0}
    bare = make_delay(base)
    for spec in ({"name": "straggle", "count": 0}, {"name": "heterogeneous", "speeds": [1, 1]},
                 {"name": "persistent", "workers": [], "slowdown": 2}, {"name": "unresponsive"}):
        wrapped = make_delay({**spec, "base": base})
        np.testing.assert_allclose(wrapped.sample(7, [0, 1], 2, load=2.0)[1], [[0.1, 0.2], [0.3, 0.4]])
        assert wrapped.mean() == pytest.approx(bare.mean())
        assert wrapped.expected_order_statistic(2, 2) == pytest.approx(bare.expected_order_statistic(2, 2))
        own = make_delay({**spec, "base": base, "comm": 1.0, "comm_dist": "constant"})
        assert own.sample(7, [0, 1], 2)[1].tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_order_statistics_cache_sees_a_changed_trace_inside_a_mixture(tmp_path):
    """The process-wide cache of E[T_(k:n)] is keyed by every trace file in the delay tree (path, size, mtime):
    a trace rewritten inside a mixture (or a wrapper inside a mixture) gives new numbers."""
    path = tmp_path / "t.csv"
    trace = {"name": "trace", "trace": str(path), "normalize": False, "offset": 0}
    specs = [{"name": "mixture", "components": [{"weight": 0.5, "model": trace}, {"weight": 0.5, "model": "constant"}]},
             {"name": "mixture", "components": [{"weight": 1, "model": {"name": "straggle", "count": 0,
                                                                         "base": trace}}]}]
    before, after = [], []
    for times, out in (("1.0,2.0,3.0,4.0", before), ("10.0,20.0,30.0,40.0", after)):
        t = times.split(",")
        path.write_text(HEADER + f"\n0,0,0,0,{t[0]},0.1\n0,1,0,0,{t[1]},0.2\n1,0,0,0,{t[2]},0.3\n1,1,0,0,{t[3]},0.4\n")
        out += [make_delay(spec).expected_order_statistic(2, 3) for spec in specs]
    fresh = [make_delay(spec).expected_order_statistic(2, 3) for spec in specs]
    assert after == pytest.approx(fresh) and all(a > 2 * b for a, b in zip(after, before, strict=True))


def _replay_spec(path: Path) -> dict:
    return {"name": "trace", "trace": str(path), "normalize": False, "offset": 0}


def test_round_trip_through_the_simulator_is_exact(tmp_path):
    n, T = 4, 6
    delay = {"name": "shifted_exponential", "a": 1.0, "mu": 0.5, "comm": 0.3, "comm_dist": "exponential"}
    captured = simulate(make_scheme("sync", n=n), delay, WORKLOAD, iterations=T, seed=3)
    run = captured.write(tmp_path / "capture")
    export_trace(run, tmp_path / "trace.csv")
    replayed = simulate(make_scheme("sync", n=n), _replay_spec(tmp_path / "trace.csv"), WORKLOAD, iterations=T,
                        seed=11)   # another seed: offset 0 makes the replay independent of it
    truth = make_delay(delay).sample(3, np.arange(T), n)
    for recs in (captured.records, replayed.records):
        arr = {k: np.array([r[k] for r in recs], dtype=float) for k in FIELDS[:4]}
        np.testing.assert_allclose(arr["worker_sent"] - arr["worker_plan_received"], truth[0], rtol=1e-12)
        np.testing.assert_allclose(arr["worker_arrived"] - arr["worker_sent"], truth[1], rtol=1e-12)
        assert all(record_load(r, n).tolist() == [1.0] * n for r in recs)
    np.testing.assert_allclose([r["end"] - r["start"] for r in replayed.records],
                               [r["end"] - r["start"] for r in captured.records], rtol=1e-12)
    np.testing.assert_allclose(replayed.summary["mean_iteration_time"], captured.summary["mean_iteration_time"],
                               rtol=1e-12)


def test_what_if_compare_replays_every_scheme(tmp_path):
    from gradcode.study.harness import compare

    n, T = 4, 5
    delay = {"name": "pareto", "alpha": 2.0, "comm": 0.2}
    run = simulate(make_scheme("sync", n=n), delay, WORKLOAD, iterations=T, seed=0).write(tmp_path / "cap")
    export_trace(run, tmp_path / "trace.csv")
    spec = {"experiment": {"name": "whatif"}, "cluster": {"workers": n}, "workload": WORKLOAD,
            "delays": [_replay_spec(tmp_path / "trace.csv")],
            "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 3},
                        {"name": "coded", "code": "cyclic_repetition", "s": 1}],
            "run": {"iterations": T, "seed": 0}}
    out = compare(spec, tmp_path / "cmp", figures=False, progress=False)
    rows = {r["scheme"]: r for r in json.loads((out / "summary.json").read_text())}
    assert len(rows) == 3, rows.keys()
    sync_time = rows["sync"]["mean_iteration_time"]     # sync replayed is the captured run
    assert sync_time == pytest.approx(json.loads((run / "summary.json").read_text())["mean_iteration_time"],
                                      rel=1e-12)
    # fastest_k waits for 3 of the same 4 replayed times: never slower than sync; the code carries twice the load
    assert rows["fastest_k k=3"]["mean_iteration_time"] <= sync_time
    records, _ = read_records(next((out / "runs").glob("*coded*")) / "records.jsonl")
    assert record_load(records[0], n).tolist() == [2.0] * n


# --- one natural-timing capture on MPI (one mpiexec launch) -------------------------------------------------------
@pytest.mark.mpi
def test_mpi_natural_capture_exports_and_replays_its_iteration_times(tmp_path):
    import subprocess

    import tomli_w

    from mpi_runtime.launch import prepare

    n, T = 4, 5     # least squares, not the mlp: no scikit-learn import (digits) on every rank, a cheap launch
    spec = {"cluster": {"workers": n}, "workload": {"name": "least_squares", "n_samples": 4000, "dim": 50},
            "delay": {"name": "none"}, "scheme": {"name": "sync"},
            "run": {"iterations": T, "seed": 0, "time_scale": 1.0, "grace": 5.0}}
    (tmp_path / "spec.toml").write_text(tomli_w.dumps(spec))
    cmd, env, _ = prepare(tmp_path / "spec.toml", tmp_path / "run", n + 1)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out, rows, skipped = export_trace(tmp_path / "run", tmp_path / "trace.csv")
    assert (rows, skipped) == (n * T, [])
    header, data = _read_csv(out)
    assert header == HEADER
    assert sorted(map(tuple, data[:, :2].astype(int).tolist())) == [(t, i) for t in range(T) for i in range(n)]
    assert np.all(data[:, 4] > 0) and np.all(data[:, 5] >= 0)
    # replayed under sync, every iteration lasts what it lasted on MPI: its last arrival
    records, _ = read_records(tmp_path / "run" / "records.jsonl")
    replay = simulate(make_scheme("sync", n=n), _replay_spec(out), None, iterations=T, seed=0)
    np.testing.assert_allclose([r["end"] - r["start"] for r in replay.records],
                               [max(r["worker_arrived"]) for r in records], rtol=1e-9)
    # the master ends an iteration a little after the last arrival (it takes the message in): the replay, which
    # knows only the workers' times, cannot see that (examples/capture_replay.py measures how much it matters)
    assert all(r["end"] - r["start"] >= max(r["worker_arrived"]) for r in records)


# --- the example's pipeline, its MPI runs replaced by simulated ones (no mpiexec) ----------------------------------
def test_capture_replay_example_predicts_exactly_when_the_world_is_a_delay_model(tmp_path, monkeypatch):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import capture_replay

    def simulated_run(spec: dict, out: Path, timeout: float) -> dict:
        """What `gradcode run` would give if each worker's time were a shifted exponential draw (CRN)."""
        table = {k: v for k, v in spec["scheme"].items() if k != "name"}   # no workload: the mlp's data stays unread
        scheme = make_scheme(spec["scheme"]["name"], n=spec["cluster"]["workers"], **table)
        res = simulate(scheme, {"name": "shifted_exponential", "comm": 0.1}, None,
                       iterations=spec["run"]["iterations"], seed=spec["run"]["seed"])
        res.write(out / "run")
        return res.summary

    monkeypatch.setattr(capture_replay, "run_mpi", simulated_run)
    result = capture_replay.main(["--quick", "--out", str(tmp_path)])
    assert (tmp_path / "capture_replay.md").is_file() and len(result) == 5
    # a load-proportional world, captured under sync, replays every master/worker scheme exactly: the code's double
    # load too (compute per unit of load); DropCompute's micro-batches are other draws, so only near
    for label, r in result.items():
        if not label.startswith("dropcompute"):
            assert r["ratio"] == pytest.approx(1.0, rel=1e-9), label
    assert result["coded cyclic s=1"]["measured"][0] > result["sync"]["measured"][0]
