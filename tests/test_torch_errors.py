"""The torch workloads without torch: listed, described and refused with a clear error, and nothing above the workload
layer imports torch. These run in the default venv (``make test``), where torch is absent, and in ``make test-torch``
(torch hidden from the import system)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from gradcode.errors import ConfigError
from gradcode.workloads import list_workloads, make_workload

ROOT = Path(__file__).resolve().parents[1]
TORCH_WORKLOADS = ("torch", "torch_mlp", "torch_cnn")


@pytest.fixture
def no_torch(monkeypatch):
    """``import torch`` fails as if it were not installed (None in sys.modules makes the import raise)."""
    monkeypatch.setitem(sys.modules, "torch", None)


def test_the_torch_workloads_are_listed_without_torch(no_torch):
    listed = list_workloads()
    assert all(name in listed and "torch" in listed[name].lower() and "broken" not in listed[name]
               for name in TORCH_WORKLOADS)


@pytest.mark.parametrize("name", TORCH_WORKLOADS)
def test_a_torch_workload_without_torch_says_how_to_install_it(no_torch, name):
    with pytest.raises(ConfigError, match=r"needs PyTorch.*pip install 'gradcode\[torch\]'"):
        make_workload(name, **({"model": "gradcode.workloads.torch:mlp_model"} if name == "torch" else {}))


def test_a_spec_naming_torch_without_torch_fails_before_any_work(no_torch, tmp_path):
    from gradcode.spec import load_spec

    path = tmp_path / "torch.toml"
    path.write_text('[cluster]\nworkers = 3\n[workload]\nname = "torch_cnn"\n[delay]\nname = "exponential"\n'
                    '[scheme]\nname = "sync"\n[run]\niterations = 5\n')
    with pytest.raises(ConfigError, match="needs PyTorch"):
        load_spec(path)


def test_import_gradcode_and_gradcode_list_work_without_torch(tmp_path):
    """In a fresh interpreter where ``import torch`` fails: gradcode imports, ``gradcode list`` names the torch
    workloads, and torch was never imported."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "import gradcode, gradcode.cli\n"
            "sys.argv = ['gradcode', 'list']\n"
            "try:\n    gradcode.cli.main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert all(name in out.stdout for name in TORCH_WORKLOADS)


def test_nothing_above_the_workload_layer_imports_torch():
    """Only gradcode.workloads knows torch exists (docs/design.md, "Real models behind the same Workload
    interface"): no other module of gradcode or mpi_runtime imports it, even inside a function."""
    found = []
    for top in ("gradcode", "mpi_runtime"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.is_relative_to(ROOT / "gradcode" / "workloads"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "torch"]
    assert found == []
