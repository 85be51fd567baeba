"""The gradcode command: `gradcode simulate` and `gradcode run` on a spec with several seeds, `describe` of a module
in the working directory, `demo`'s table.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ENV, cli


def test_simulate_refuses_to_drop_the_seeds_of_a_spec(tmp_path):
    """`gradcode simulate` on a spec with [run] seeds asks for --seed rather than run seed 0 in silence."""
    path = tmp_path / "seeds.toml"
    text = '[cluster]\nworkers = 4\n[delay]\nname = "pareto"\n[[schemes]]\nname = "sync"\n[run]\niterations = 3\n'
    path.write_text(text + "seeds = [3, 4]\n")
    (tmp_path / "one.toml").write_text(text + "seed = 4\n")
    from gradcode.cli import main

    assert main(["simulate", str(path), "--out", str(tmp_path / "a")]) == 2
    assert not (tmp_path / "a").exists()
    assert main(["simulate", str(path), "--out", str(tmp_path / "b"), "--seed", "4"]) == 0
    assert main(["simulate", str(tmp_path / "one.toml"), "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "b" / "records.jsonl").read_text() == (tmp_path / "c" / "records.jsonl").read_text()


def test_describe_finds_a_module_in_the_working_directory(tmp_path):
    """`gradcode describe mymodule:Class` from the module's folder (the console script: `python -m` would put the
    working directory on sys.path by itself and hide the bug)."""
    (tmp_path / "mymean.py").write_text(
        "import gradcode\n\n\nclass Mean(gradcode.Workload):\n    '''The mean of a vector (test plugin).'''\n\n"
        "    def __init__(self, dim: int = 3):\n        self.dim = dim\n")
    script = Path(sys.executable).with_name("gradcode")
    done = subprocess.run([str(script), "describe", "mymean:Mean"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=ENV)
    assert done.returncode == 0, done.stderr
    assert "dim" in done.stdout and "test plugin" in done.stdout


def test_an_mpi_run_of_a_spec_with_seeds_takes_one_by_seed(tmp_path):
    """`gradcode run --seed 0` on a spec with [run] seeds runs that seed; without --seed the error names the flag
    (load_run is what both the launcher and every rank call with the --seed override)."""
    from gradcode.errors import ConfigError
    from mpi_runtime.config import load_run

    spec = {"cluster": {"workers": 3}, "workload": {"name": "least_squares", "n_samples": 60, "dim": 3},
            "delay": {"name": "pareto"}, "scheme": {"name": "sync"}, "run": {"iterations": 3, "seeds": [5, 6]}}
    assert load_run(spec, overrides={"seed": 6}).spec.options.seed == 6
    with pytest.raises(ConfigError, match="--seed"):
        load_run(spec)


def test_demo_prints_no_warning_inside_its_table():
    """`gradcode demo`: the fallback decodes are a column of the table, not warnings with file paths among its
    rows."""
    done = cli("demo", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr and ".py:" not in done.stdout + done.stderr
    assert "fallback" in done.stdout
