"""DropCompute for your own PyTorch loop (``gradcode.workloads.torch_dropcompute``): the All-Reduced average, the
limit, and the example on 3 processes with one slow worker. Needs PyTorch (``make test-torch``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def world_of_one(monkeypatch):
    """A gloo process group of this process alone (rank 0 of 1), destroyed after the test."""
    import torch

    from gradcode.workloads.torch_dropcompute import init_process_group

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port))):
        monkeypatch.setenv(key, value)
    init_process_group()
    yield torch
    torch.distributed.destroy_process_group()


def _setup(torch):
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    batches = [(torch.randn(4, 5), torch.randint(0, 3, (4,))) for _ in range(6)]
    return model, batches, lambda mb: torch.nn.functional.cross_entropy(model(mb[0]), mb[1])


def test_without_a_limit_the_grad_is_the_mean_of_the_micro_batch_gradients(world_of_one):
    from gradcode.workloads.torch_dropcompute import DropCompute

    torch = world_of_one
    model, batches, forward = _setup(torch)
    info = DropCompute(model, tau=None).step(batches, forward)
    assert (info["computed"], info["total_computed"]) == (6, 6)
    got = [p.grad.clone() for p in model.parameters()]
    expected = [torch.zeros_like(p) for p in model.parameters()]
    for mb in batches:
        for e, g in zip(expected, torch.autograd.grad(forward(mb), list(model.parameters())), strict=True):
            e += g / len(batches)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)


def test_past_the_limit_nothing_is_computed_and_warm_up_ignores_it(world_of_one):
    from gradcode.workloads.torch_dropcompute import DropCompute

    torch = world_of_one
    model, batches, forward = _setup(torch)
    dc = DropCompute(model, tau=1e-12, warmup=1, normalize="total")
    assert dc.step(batches, forward)["computed"] == 6        # the warm-up step: no limit
    info = dc.step(batches, forward)
    assert info["computed"] == 0 and info["tau"] == 1e-12
    assert all(float(p.grad.abs().max()) == 0.0 for p in model.parameters())


def test_bad_settings_are_config_errors(world_of_one):
    from gradcode.errors import ConfigError
    from gradcode.workloads.torch_dropcompute import DropCompute

    model, _, _ = _setup(world_of_one)
    for kwargs, match in ((dict(tau=-1.0), "tau must be > 0"), (dict(check="idealized"), "check must be one of"),
                          (dict(normalize="mean"), "normalize must be")):
        with pytest.raises(ConfigError, match=match):
            DropCompute(model, **kwargs)


def test_the_example_drops_the_slow_workers_micro_batches_and_steps_sooner(tmp_path):
    """examples/torch_dropcompute.py under mpiexec, 3 processes, worker 2 three times slower: DropCompute's
    automatic tau computes fewer micro-batches and its steps are shorter than synchronous training's."""
    mpiexec = Path(sys.executable).parent / "mpiexec"
    out = tmp_path / "dc.json"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_PORT": str(port)}
    proc = subprocess.run([str(mpiexec), "-n", "3", sys.executable, str(ROOT / "examples" / "torch_dropcompute.py"),
                           "--steps", "14", "--warmup", "2", "--record", "4", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    sync, dc = r["sync"], r["dropcompute"]
    assert sync["micro_batches_computed"] == 24 and sync["tau_ms"] is None
    assert dc["tau_ms"] is not None and dc["micro_batches_computed"] < 24
    assert dc["mean_step_ms"] < sync["mean_step_ms"]


@pytest.mark.multihost
def test_the_example_on_three_emulated_hosts(tmp_path):
    """examples/torch_dropcompute.py --hosts 3 (root): one process on each of three emulated hosts that share no
    memory, gloo's rendezvous at the first host's address, host 2 three times slower: DropCompute again computes
    fewer micro-batches and steps sooner than synchronous training."""
    from mpi_runtime.cluster_emu import missing_requirements

    why = missing_requirements(rate=True)
    if why is not None:
        pytest.skip(f"no emulated cluster here: {why}")
    out = tmp_path / "dc.json"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "torch_dropcompute.py"), "--hosts", "3",
                           "--prefix", f"td{os.getpid() % 10000}", "--steps", "14", "--warmup", "2", "--record", "4",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    sync, dc = r["sync"], r["dropcompute"]
    assert sync["micro_batches_computed"] == 24 and dc["micro_batches_computed"] < 24
    assert dc["mean_step_ms"] < sync["mean_step_ms"]
