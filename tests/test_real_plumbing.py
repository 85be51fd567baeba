"""The optimizer and the held-out evaluation reach both clusters from a spec (issue 14, section 2)."""

from __future__ import annotations

import subprocess

import pytest
import tomli_w

from gradcode.clusters.sim import simulate
from gradcode.output.report import read_records
from gradcode.spec import build, load_spec
from mpi_runtime.launch import prepare

SPEC = {"cluster": {"workers": 4},
        "workload": {"name": "mlp", "hidden": [8], "seed": 1},
        "delay": {"name": "constant", "value": 1.0},
        "scheme": {"name": "sync"},
        "run": {"iterations": 5, "seed": 0, "time_scale": 0.01, "grace": 5.0, "optimizer": "nesterov",
                "momentum": 0.8, "lr": 0.3, "eval_every": 2, "target_accuracy": 0.3}}


def test_sim_and_mpi_take_the_same_nesterov_steps_and_evaluate_the_same(tmp_path):
    spec = load_spec(SPEC)
    schemes, delay, workload = build(spec)
    sim = simulate(schemes[0], delay, workload, spec.options)
    plain = simulate(build(spec)[0][0], delay, build(spec)[2], iterations=spec.options.iterations,
                     seed=spec.options.seed, lr=spec.options.lr)   # the plain step, no evaluation
    assert sim.records[-1]["loss"] != pytest.approx(plain.records[-1]["loss"], rel=1e-6)   # the optimizer acts
    # evaluated every 2 iterations; the target accuracy, reached at iteration 2, stops the run on both clusters
    assert [r["iteration"] for r in sim.records if r["test_accuracy"] is not None] == [0, 2]
    assert len(sim.records) == 3 and sim.records[-1]["test_accuracy"] >= 0.3 > sim.records[0]["test_accuracy"]
    assert "time_to_target_accuracy" in sim.summary

    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(SPEC))
    out = tmp_path / "out"
    cmd, env, _ = prepare(path, out, 5)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records, whole = read_records(out / "records.jsonl")
    assert whole and len(records) == len(sim.records)
    for a, b in zip(records, sim.records, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-9)
        assert (a["test_accuracy"] is None) == (b["test_accuracy"] is None)
        if b["test_accuracy"] is not None:
            assert a["test_accuracy"] == pytest.approx(b["test_accuracy"])
            assert a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-9)
