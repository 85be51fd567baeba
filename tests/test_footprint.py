"""Memory: a run (simulated or MPI) that would not fit is refused before any work, with the figures; the estimate
covers the records kept; the machine's available memory is read.
"""

from __future__ import annotations

import pytest

import gradcode.clusters.footprint
import gradcode.plumbing.memory
from gradcode import make_scheme, make_workload, simulate
from gradcode.errors import ConfigError


def test_a_run_that_does_not_fit_is_refused_with_the_figures(monkeypatch):
    monkeypatch.setattr(gradcode.plumbing.memory, "available_bytes", lambda: (10**9, "a test limit"))
    with pytest.raises(ConfigError, match=r"need about \d\.\d GB .* only 1\.0 GB is available \(a test limit\)"):
        simulate(make_scheme("sync", n=10**7), "exponential", iterations=10)
    simulate(make_scheme("sync", n=10**5), "exponential", iterations=2)   # 22 MB: fits


def test_the_estimate_covers_records_kept():
    small, long = (gradcode.clusters.footprint.estimate_bytes(make_scheme("sync", n=10**6), it) for it in (1, 1001))
    assert long - small == 1000 * 8 * 10**6     # the responders of every record kept


def test_available_memory_is_read():
    have = gradcode.plumbing.memory.available_bytes()
    assert have is None or have[0] > 0 and isinstance(have[1], str)


def test_an_mpi_run_that_will_not_fit_is_refused_with_the_figure_before_launching(tmp_path, monkeypatch):
    # the MPI run's own estimate (ranks x one process each): without it a run of 10^4 ranks would start and swap
    from mpi_runtime.launch import launch

    monkeypatch.setattr(gradcode.plumbing.memory, "available_bytes", lambda: (10**9, "a test limit"))
    raw = {"cluster": {"workers": 40}, "workload": {"name": "least_squares", "n_samples": 400, "dim": 4},
           "delay": {"name": "constant"}, "schemes": [{"name": "sync"}], "run": {"iterations": 2}}
    launched = []
    monkeypatch.setattr("mpi_runtime.launch._launch", lambda *a, **k: launched.append(1) or 0)
    with pytest.raises(ConfigError, match=r"MPI run would need about 2.\d GB .*41 ranks.*1.0 GB is available "
                                          r"\(a test limit\)"):
        launch(raw, tmp_path / "out")
    assert launched == []
    raw["cluster"]["workers"] = 3                         # 4 ranks: about 0.24 GB
    assert launch(raw, tmp_path / "out") == 0 and launched == [1]
    need = gradcode.clusters.footprint.estimate_mpi_bytes(make_scheme("sync", n=3),
                                              make_workload("least_squares", n_samples=400, dim=4), 2)
    assert 0.2e9 < need < 0.3e9
