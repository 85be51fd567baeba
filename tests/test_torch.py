"""The torch workloads (``gradcode.workloads.torch``): gradients against plain torch autograd, purity in
``(w, t, j, n_parts)``, exact codes on sync's trajectory, training that learns, clear errors. Needs PyTorch: run by
``make test-torch`` (its own venv); ``make test`` deselects the ``torch`` marker."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from gradcode import make_scheme, simulate
from gradcode.errors import ConfigError
from gradcode.workloads import make_workload

pytestmark = pytest.mark.torch

BUILTINS = {"torch_mlp": dict(hidden=[16]), "torch_cnn": dict(channels=4)}


@pytest.fixture(scope="module", params=list(BUILTINS))
def workload(request):
    return make_workload(request.param, **BUILTINS[request.param])


def _module_with(wl, w):
    """A fresh copy of the workload's module holding ``w``: the reference computed the ordinary torch way."""
    import copy

    import torch

    model = copy.deepcopy(wl.model)
    torch.nn.utils.vector_to_parameters(torch.tensor(w, dtype=wl.dtype), model.parameters())
    return model


def _autograd_sum(wl, w, rows):
    """``sum_{i in rows} grad l(x_i; w)`` by ``loss.backward()`` on the module, float64."""
    import torch

    model = _module_with(wl, w)
    x, y = wl._tensor(wl.X[rows]), torch.tensor(wl.y[rows])
    (torch.nn.functional.cross_entropy(model(x), y, reduction="sum")).backward()
    return torch.nn.utils.parameters_to_vector([p.grad for p in model.parameters()]).double().numpy()


def _w(wl, seed=1):
    return wl.init_params() + 0.05 * np.random.default_rng(seed).standard_normal(wl.dim)


# --- gradients ----------------------------------------------------------------------------------------------
def test_whole_partitions_sum_to_autograd_on_the_concatenated_data(workload):
    w = _w(workload)
    G = workload.gradients(w, t=0, parts=range(7), n_parts=7)
    assert G.shape == (7, workload.dim) and G.dtype == np.float64
    expected = _autograd_sum(workload, w, np.arange(workload.n_samples)) / workload.n_samples + workload.reg * w
    np.testing.assert_allclose(G.sum(axis=0), expected, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(workload.full_gradient(w), expected, rtol=1e-4, atol=1e-6)
    # and partition by partition, each against autograd on its own slice
    b = workload.partition_bounds(7)
    for j in (0, 6):
        ref = _autograd_sum(workload, w, np.arange(b[j], b[j + 1])) / workload.n_samples
        np.testing.assert_allclose(G[j] - (b[j + 1] - b[j]) * workload.reg / workload.n_samples * w, ref,
                                   rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("vmap", [False, True])
def test_mini_batch_gradients_are_autograd_on_each_partitions_batch(vmap):
    wl = make_workload("torch_cnn", channels=4, reg=0.0, vmap=vmap)
    w = _w(wl)
    parts, n_parts, batch = [5, 2, 2], 9, 12
    G = wl.gradients(w, t=4, parts=parts, n_parts=n_parts, batch=batch)
    idx = wl.batch_indices(4, parts, n_parts, batch)
    sizes = wl.partition_sizes(n_parts)
    for i, j in enumerate(parts):
        ref = _autograd_sum(wl, w, idx[i]) * sizes[j] / (batch * wl.n_samples)
        np.testing.assert_allclose(G[i], ref, rtol=1e-4, atol=1e-7)


def test_float64_gradient_matches_finite_differences():
    wl = make_workload("torch_mlp", hidden=[6], activation="tanh", dtype="float64", n_samples=300)
    w = _w(wl)
    g = wl.full_gradient(w)
    h = 1e-6
    for v in np.random.default_rng(3).standard_normal((4, wl.dim)):
        fd = (wl.loss(w + h * v) - wl.loss(w - h * v)) / (2 * h)
        assert fd == pytest.approx(float(g @ v), rel=1e-6, abs=1e-9)


# --- purity: what exact codes need ----------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [None, 10])
def test_a_partitions_gradient_is_the_same_bits_whatever_else_the_call_holds(workload, batch):
    w = _w(workload)
    alone = workload.gradients(w, t=3, parts=[1], n_parts=8, batch=batch)[0]
    among = workload.gradients(w, t=3, parts=[6, 1, 3, 1], n_parts=8, batch=batch)
    assert np.array_equal(among[1], alone) and np.array_equal(among[3], alone)
    again = make_workload(workload.name, **BUILTINS[workload.name])     # another rank building the same spec
    assert np.array_equal(again.init_params(), workload.init_params())
    assert np.array_equal(again.gradients(w, t=3, parts=[1], n_parts=8, batch=batch)[0], alone)


def test_mini_batches_are_a_pure_function_of_seed_t_and_partition(workload):
    idx = workload.batch_indices(5, [2, 0], 6, 8)
    assert np.array_equal(idx[1], workload.batch_indices(5, [0], 6, 8)[0])
    assert not np.array_equal(idx, workload.batch_indices(6, [2, 0], 6, 8))          # another iteration
    other = make_workload(workload.name, **{**BUILTINS[workload.name], "seed": 1})
    assert not np.array_equal(idx, other.batch_indices(5, [2, 0], 6, 8))             # another seed
    w = _w(workload)
    np.testing.assert_array_equal(workload.gradients(w, 5, [2], 6, batch=8), workload.gradients(w, 5, [2], 6, batch=8))


@pytest.mark.parametrize("batch", [None, 16])
def test_an_exact_code_follows_syncs_trajectory(batch):
    wl = make_workload("torch_mlp", hidden=[16])
    delay = {"name": "persistent", "base": {"name": "shifted_exponential", "mu": 5.0}, "workers": [2],
             "slowdown": 8.0}
    sync = simulate(make_scheme("sync", n=5, batch=batch), delay, wl, iterations=12, seed=0)
    coded = simulate(make_scheme("coded", n=5, code="cyclic_repetition", s=1, batch=batch), delay, wl,
                     iterations=12, seed=0)
    assert all(r["method"] == "exact" and r["residual"] < 1e-8 for r in coded.records)
    np.testing.assert_allclose(coded.params, sync.params, rtol=1e-8, atol=1e-10)
    assert coded.summary["total_time"] < sync.summary["total_time"]
    assert not np.allclose(sync.params, wl.init_params())


# --- training -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(BUILTINS))
def test_held_out_accuracy_improves_in_twenty_iterations(name):
    wl = make_workload(name)
    res = simulate(make_scheme("fastest_k", n=4, k=3), "exponential", wl, iterations=20, seed=0, eval_every=10)
    before, after = wl.heldout(wl.init_params()), wl.heldout(res.params)
    assert before["test_accuracy"] < 0.3 and after["test_accuracy"] > 0.7
    assert after["test_loss"] < before["test_loss"]
    assert "test_accuracy" in res.records[-1]


# --- your own model, data and loss ----------------------------------------------------------------------------
@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "mymodels.py").write_text(textwrap.dedent("""
        import numpy as np
        import torch

        def linear(n_out=1):
            return torch.nn.Linear(3, n_out)

        def wide():
            return torch.nn.Linear(5, 1)

        def not_a_module():
            return 42

        def data():
            rng = np.random.default_rng(0)
            X = rng.standard_normal((200, 3))
            return X, X @ np.array([1.0, -2.0, 0.5]) + 0.3

        def huber(out, target):
            return torch.nn.functional.huber_loss(out[:, 0], target)
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "mymodels"


def test_your_own_model_data_and_loss(user_module):
    wl = make_workload("torch", model=f"{user_module}:linear", data=f"{user_module}:data", loss="mse", lr=0.3,
                       dtype="float64", test_fraction=0.25)
    assert (wl.dim, wl.n_samples, wl.task) == (4, 150, "regression")
    w = wl.init_params()
    for t in range(200):
        w = w - wl.lr * wl.gradients(w, t, range(3), 3).sum(axis=0)
    np.testing.assert_allclose(w, [1.0, -2.0, 0.5, 0.3], atol=1e-3)         # Linear: weight row, then bias
    assert wl.heldout(w)["test_loss"] < 1e-6 and "test_accuracy" not in wl.heldout(w)
    huber = make_workload("torch", model=f"{user_module}:linear", data=f"{user_module}:data",
                          loss=f"{user_module}:huber")
    assert huber.loss(huber.init_params()) > 0


@pytest.mark.parametrize("params, match", [
    (dict(model="nosuchmodule:net"), "model: cannot import module 'nosuchmodule'"),
    (dict(model="mymodels:nosuch"), "has no attribute 'nosuch'"),
    (dict(model="mymodels"), "import path must look like 'package.module:ClassName'"),
    (dict(model="mymodels:not_a_module"), "returned int, not a torch.nn.Module"),
    (dict(model="mymodels:linear", model_args={"n_in": 3}), "factory .* failed"),
    (dict(model="mymodels:wide", data="mymodels:data", loss="mse"), "does not fit the data"),
    (dict(model="mymodels:linear", data="mymodels:data", loss="cross_entropy"), "needs integer class labels"),
    (dict(model="mymodels:linear", loss="hinge"), "loss must be one of cross_entropy, mse"),
    (dict(model="mymodels:linear", loss="mymodels:nosuch"), "loss: module 'mymodels' has no attribute"),
    (dict(model="mymodels:linear", dtype="float16"), "dtype must be one of float32, float64"),
    (dict(), "model is missing"),
])
def test_a_bad_model_data_or_loss_is_a_config_error(user_module, params, match):
    with pytest.raises(ConfigError, match=match):
        make_workload("torch", **params)


def test_a_spec_with_a_bad_model_path_fails_before_any_work(tmp_path):
    from gradcode.spec import load_spec

    path = tmp_path / "bad.toml"
    path.write_text('[cluster]\nworkers = 3\n[workload]\nname = "torch"\nmodel = "nosuchmodule:net"\n'
                    '[delay]\nname = "exponential"\n[scheme]\nname = "sync"\n[run]\niterations = 5\n')
    with pytest.raises(ConfigError, match="nosuchmodule"):
        load_spec(path)


def test_the_extending_example_runs_as_written(tmp_path, monkeypatch):
    """docs/extending.md, "Your own PyTorch model": its module and its [workload] table, in a spec the simulator
    runs; the model learns the digits."""
    import re
    from pathlib import Path

    from gradcode.spec import build, load_spec

    text = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    section = text.split("## Your own PyTorch model\n")[1].split("\n## ")[0]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    module = next(body for lang, body in blocks if body.startswith("# mynet.py"))
    table = next(body for lang, body in blocks if lang == "toml")
    (tmp_path / "mynet.py").write_text(module)
    (tmp_path / "spec.toml").write_text("[cluster]\nworkers = 4\n" + table + '[delay]\nname = "exponential"\n'
                                        '[scheme]\nname = "sync"\n[run]\niterations = 20\n')
    monkeypatch.chdir(tmp_path)
    spec = load_spec(tmp_path / "spec.toml")
    schemes, delay, wl = build(spec)
    assert wl.dim == 64 * 64 + 64 + 64 * 10 + 10
    res = simulate(schemes[0], delay, wl, spec.options)
    assert wl.heldout(res.params)["test_accuracy"] > 0.7
