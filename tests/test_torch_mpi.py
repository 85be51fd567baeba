"""The torch workloads on the MPI cluster: every rank builds the model from the spec, and the runtime, unchanged,
trains it. Needs PyTorch and MPI (``make test-torch``); a missing MPI is a failure, as in tests/test_mpi.py."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import tomli_w

from gradcode import make_scheme, simulate
from gradcode.output.report import read_records
from gradcode.workloads import make_workload
from mpi_runtime.launch import prepare

pytestmark = pytest.mark.torch

TIMEOUT = 240     # a rank's first `import torch` takes seconds on a loaded 2-core machine


def _run_mpi(spec: dict, tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    out = tmp_path / "out"
    cmd, env, _ = prepare(path, out, spec["cluster"]["workers"] + 1)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records, whole = read_records(out / "records.jsonl")
    assert whole and len(records) == spec["run"]["iterations"]
    return records, np.load(out / "params.npy")


def test_an_exact_code_on_mpi_trains_the_torch_model_as_sync_does(tmp_path):
    """Coded cyclic repetition on 3 MPI workers (mini-batches of 16) ends where the simulator's sync ends: each
    worker's torch gradients of a partition are the same bits on every rank, so the code decodes the exact sum."""
    workload = {"name": "torch_mlp", "hidden": [16]}
    spec = {"cluster": {"workers": 3}, "workload": workload, "delay": {"name": "shifted_exponential", "mu": 1.0},
            "scheme": {"name": "coded", "code": "cyclic_repetition", "s": 1},
            "run": {"iterations": 6, "seed": 0, "time_scale": 0.005, "batch": 16}}
    records, params = _run_mpi(spec, tmp_path)
    assert all(r["method"] == "exact" and r["residual"] < 1e-8 for r in records)
    sync = simulate(make_scheme("sync", n=3, batch=16), "exponential", make_workload(workload), iterations=6, seed=0)
    np.testing.assert_allclose(params, sync.params, rtol=1e-8, atol=1e-10)


def test_natural_timing_measures_the_models_real_compute(tmp_path):
    """``[delay] name = "none"``: nothing injected, a worker's time is torch's real compute; sync's parameters are
    the simulator's (they do not depend on time), and the held-out metrics are recorded."""
    spec = {"cluster": {"workers": 3}, "workload": {"name": "torch_cnn"}, "delay": {"name": "none"},
            "scheme": {"name": "sync"}, "run": {"iterations": 4, "seed": 0, "eval_every": 2}}
    records, params = _run_mpi(spec, tmp_path)
    computes = [c for r in records for c in r["worker_compute"] if c is not None]
    assert len(computes) == 12 and all(c > 0 for c in computes)
    assert "test_accuracy" in records[-1]
    sync = simulate(make_scheme("sync", n=3), "exponential", make_workload("torch_cnn"), iterations=4, seed=0)
    np.testing.assert_allclose(params, sync.params, rtol=1e-9, atol=1e-12)


def test_compare_sweep_and_a_replayed_capture_take_a_torch_workload(tmp_path):
    """The study layer, unchanged: `gradcode compare` (simulator) of two schemes on torch_mlp, a `gradcode sweep`
    over fastest_k's k, and `gradcode trace export` of a natural-timing MPI capture replayed in the simulator."""
    import json
    import sys

    from gradcode.study.capture import export_trace

    spec = ('[cluster]\nworkers = 3\nkind = "sim"\n[workload]\nname = "torch_mlp"\nhidden = [8]\n'
            '[delay]\nname = "exponential"\n[[schemes]]\nname = "sync"\n[[schemes]]\nname = "fastest_k"\nk = 2\n'
            '[run]\niterations = 5\n')
    (tmp_path / "cmp.toml").write_text(spec)
    (tmp_path / "sweep.toml").write_text(spec + '[sweep]\n"schemes.fastest_k.k" = [1, 2]\n')
    gradcode = [sys.executable, "-m", "gradcode"]
    for args in (["compare", "cmp.toml", "--out", "cmp"], ["sweep", "sweep.toml", "--out", "sweep", "--jobs", "1"]):
        proc = subprocess.run(gradcode + args, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
        assert proc.returncode == 0, (args, proc.stderr[-3000:])
    assert len(list((tmp_path / "cmp").rglob("records.jsonl"))) == 2
    assert len(list((tmp_path / "sweep").rglob("records.jsonl"))) == 4

    capture = {"cluster": {"workers": 3}, "workload": {"name": "torch_cnn"}, "delay": {"name": "none"},
               "scheme": {"name": "sync"}, "run": {"iterations": 5, "seed": 0, "time_scale": 1.0}}
    _run_mpi(capture, tmp_path)
    trace, rows, _ = export_trace(tmp_path / "out", tmp_path / "trace.csv")
    assert rows == 15
    delay = {"name": "trace", "trace": str(trace), "normalize": False, "offset": 0}
    replay = simulate(make_scheme("sync", n=3), delay, None, iterations=5, seed=0)
    measured = json.loads((tmp_path / "out" / "summary.json").read_text())["mean_iteration_time"]
    assert 0 < replay.summary["mean_iteration_time"] <= 2 * measured
