"""PyTorch models as workloads: any ``nn.Module`` behind the same :class:`Workload` interface as the numpy models.

The codes, the schemes and both clusters see only a flat float64 parameter vector ``w`` and the partial gradients
``g_j`` of :meth:`Workload.gradients`; this module is the one place that knows torch exists (and imports it only
when a torch workload is built, so ``import gradcode`` and ``gradcode list`` work without it).

- **Parameters.** ``w`` is every parameter of the module, in ``named_parameters()`` order, each flattened
  (``dim`` = their total size). The module is called functionally (``torch.func.functional_call``) on views of
  ``w`` cut to the parameters' shapes, so nothing is copied into the module and two calls never share state.
  The module runs in ``eval()`` mode (dropout off, batch norm on its fixed buffers): a gradient must be a pure
  function of ``w`` and the batch, or a gradient code no longer decodes the exact sum.
- **Partitions and mini-batches** are the base class's: the data are stored once in the seeded order, partition
  ``j`` of ``n_parts`` is a contiguous slice, the mini-batch of ``j`` at iteration ``t`` a pure function of
  ``(seed, t, j, n_parts)``, and ``g_j = (|P_j| / N) (mean_{x in batch_j} grad l(x; w) + reg w)``.
- **Precision.** The model computes in ``dtype`` (float32 or float64); ``w`` and the gradients handed to the
  codes are float64 (codes decode in float64, and the decoding residual is reported as always).
- **Threads.** ``torch.set_num_threads(threads)`` (default 1) when the workload is built: one thread per MPI rank,
  since several ranks share each host's cores.

**Per-partition gradients** are one backward pass per distinct partition of the call, so ``g_j`` is the same
computation, bit for bit, whatever else a worker computes: exact codes decode sync's gradient to float64 rounding.
``vmap = true`` instead computes a mini-batch call's partitions in one ``torch.func.vmap`` of ``torch.func.grad``:
faster for small batches of small models, but a batched kernel (a convolution) may round ``g_j`` differently with
different companions, so the codes are then exact only to the model's float tolerance.

    >>> from gradcode.workloads import make_workload             # doctest: +SKIP
    >>> wl = make_workload("torch_mlp", hidden=[16])              # doctest: +SKIP
    >>> wl.gradients(wl.init_params(), t=0, parts=[0, 3], n_parts=8, batch=16).shape   # doctest: +SKIP
    (2, 1210)
"""

from __future__ import annotations

import os
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, check_float, check_int, check_seed
from ._base import Workload
from .data import _digits, _user_data

_LOSSES = ("cross_entropy", "mse")
_DTYPES = ("float32", "float64")
_EVAL_ROWS = 4096          # rows a loss or held-out evaluation forwards at once


def _require_torch(who: str):
    """``torch``, or a :class:`ConfigError` saying how to install it (before any other work)."""
    try:
        import torch
    except ImportError:
        raise ConfigError(f"workload {who!r} needs PyTorch, which is not installed: pip install 'gradcode[torch]' "
                          "(or make test-torch, which builds .venv-torch)") from None
    return torch


def _import_path(path, what: str):
    """The object named ``"package.module:name"`` (the registry's import, its ConfigErrors)."""
    from ..plumbing.registry import _import

    if not isinstance(path, str):
        raise ConfigError(f"{what} must be an import path 'package.module:name' (a string), got {path!r}")
    return _import(path, what)


class TorchWorkload(Workload):
    """A PyTorch ``nn.Module`` trained by gradcode's schemes: ``[workload] name = "torch"``.

    ``model = "pkg.module:factory"`` names a function returning the ``nn.Module`` (called with ``model_args``, under
    ``torch.manual_seed(seed)``, so the starting point is a function of ``seed``). ``data``: None for the bundled
    digits (1,797 images of 8x8 as 64 pixels in ``[0, 1]``, 10 classes; needs scikit-learn), a data file
    (``.npz``/``.csv``/``.svmlight``, as for the numpy workloads), or ``"pkg.module:factory"`` returning
    ``(X, y)`` arrays (``X`` of any shape ``(N, ...)``: images stay images). ``loss``: ``"cross_entropy"``
    (integer labels; held-out accuracy reported), ``"mse"`` (integer labels become one-hot targets) or
    ``"pkg.module:fn"``, a function ``fn(output, target)`` returning the batch's mean loss, as torch's own losses do.
    ``n_samples`` keeps that many samples of the data (a seeded choice; None: all), ``test_fraction`` of them are
    held out. ``dtype`` is the model's precision, ``threads`` torch's intra-op threads in this process, ``vmap``
    batches a mini-batch call's partitions into one ``torch.func.vmap`` (module docstring).
    """

    name: ClassVar[str] = "torch"
    description: ClassVar[str] = ("a PyTorch nn.Module (model = 'pkg.module:factory') on the bundled digits or your "
                                  "data; needs pip install gradcode[torch]")
    task: ClassVar[str] = "multiclass"

    def __init__(self, model: str = "", data: str | None = None, loss: str = "cross_entropy",
                 model_args: dict | None = None, n_samples: int | None = None, lr: float = 0.1, reg: float = 0.0,
                 test_fraction: float = 0.2, dtype: str = "float32", threads: int = 1, vmap: bool = False,
                 seed: int = 0):
        self._build(model=model, data=data, loss=loss, model_args=model_args, n_samples=n_samples, lr=lr, reg=reg,
                    test_fraction=test_fraction, dtype=dtype, threads=threads, vmap=vmap, seed=seed)

    # --- construction ---------------------------------------------------------------------------------------
    def _build(self, *, model, data, loss, model_args, n_samples, lr, reg, test_fraction, dtype, threads,
               vmap, seed, params: dict | None = None) -> None:
        """Check every argument, then build the data and the model. ``model`` is an import path or (built-ins) a
        factory; ``params`` is what ``repr`` shows (default: the arguments)."""
        torch = _require_torch(self.name)
        if not model:
            raise ConfigError(f"workload {self.name!r}: model is missing: model = 'package.module:factory', a "
                              "function returning a torch.nn.Module")
        if model_args is None:
            model_args = {}
        if not isinstance(model_args, dict):
            raise ConfigError(f"workload {self.name!r}: model_args must be a table of keyword arguments for the "
                              f"model factory, got {model_args!r}")
        if not (loss in _LOSSES or (isinstance(loss, str) and ":" in loss)):
            raise ConfigError(f"workload {self.name!r}: loss must be one of {', '.join(_LOSSES)} or an import "
                              f"path 'package.module:function', got {loss!r}")
        if dtype not in _DTYPES:
            raise ConfigError(f"workload {self.name!r}: dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        if n_samples is not None:
            n_samples = check_int("n_samples", n_samples, low=2)
        lr = check_float("lr", lr, low=0.0, low_open=True)
        reg = check_float("reg", reg, low=0.0)
        test_fraction = check_float("test_fraction", test_fraction, low=0.0, high=1.0)
        threads = check_int("threads", threads, low=1)
        if not isinstance(vmap, bool):
            raise ConfigError(f"workload {self.name!r}: vmap must be true or false, got {vmap!r}")
        seed = check_seed(seed)
        self.params = params if params is not None else dict(
            model=model, data=data, loss=loss, model_args=model_args, n_samples=n_samples, lr=lr, reg=reg,
            test_fraction=test_fraction, dtype=dtype, threads=threads, vmap=vmap, seed=seed)
        factory = _import_path(model, f"workload {self.name!r} model") if isinstance(model, str) else model
        loss_fn = None if loss in _LOSSES else _import_path(loss, f"workload {self.name!r} loss")
        if loss_fn is not None and not callable(loss_fn):
            raise ConfigError(f"workload {self.name!r}: loss {loss!r} is {loss_fn!r}, not a function "
                              "fn(output, target) -> mean loss")

        # one thread per process: MPI ranks share a host's cores, and torch's default (every core) makes them fight
        torch.set_num_threads(threads)
        self.torch, self.dtype = torch, getattr(torch, dtype)

        X, y = self._read_data(data, loss)
        if n_samples is not None:
            if n_samples > X.shape[0]:
                raise ConfigError(f"workload {self.name!r}: n_samples = {n_samples}, but the data hold "
                                  f"{X.shape[0]} samples")
            keep = np.sort(np.random.default_rng(np.random.SeedSequence([seed, 0x70C4])).choice(
                X.shape[0], n_samples, replace=False))
            X, y = X[keep], y[keep]
        labelled = np.issubdtype(y.dtype, np.integer)
        if loss == "cross_entropy" and not labelled:
            raise ConfigError(f"workload {self.name!r}: loss = 'cross_entropy' needs integer class labels, got "
                              f"{y.dtype} targets; use loss = 'mse' for real-valued targets")
        self.task = "multiclass" if labelled else "regression"
        self.n_classes = int(y.max()) + 1 if labelled else 1
        self._setup(X, y, seed=seed, reg=reg, test_fraction=test_fraction)   # the numpy models' order and split
        self.lr = lr
        self._X = self._tensor(self.X)
        self._Xt = None if self.X_test is None else self._tensor(self.X_test)
        self._y = self._targets(self.y, loss)
        self._yt = None if self.y_test is None else self._targets(self.y_test, loss)
        self._loss_name, self._loss_fn = loss, loss_fn

        self.model = self._make_model(factory, model_args, seed)
        named = list(self.model.named_parameters())
        if not named:
            raise ConfigError(f"workload {self.name!r}: the model {model!r} has no parameters to train")
        self._names = [n for n, _ in named]
        self._shapes = [tuple(p.shape) for _, p in named]
        self._numels = [p.numel() for _, p in named]
        self._params = [p for _, p in named]
        self._w0 = torch.cat([p.detach().reshape(-1) for _, p in named]).to(torch.float64).numpy().copy()
        self.dim = int(sum(self._numels))
        self._check_forward(model)
        self.vmap = vmap
        # w, a stack of equal batches x, y -> one gradient per batch (vmap over torch.func.grad)
        self._vgrad = torch.func.vmap(torch.func.grad(self._loss_sum), in_dims=(None, 0, 0))

    def _read_data(self, data, loss: str) -> tuple[np.ndarray, np.ndarray]:
        """``(X, y)``: the digits, a user's data file or a data factory's arrays."""
        if data is None:
            return _digits(self.name)
        task = "multiclass" if loss == "cross_entropy" else "regression"
        if isinstance(data, str) and ":" in data and not os.path.exists(data):
            out = _import_path(data, f"workload {self.name!r} data")
            try:
                out = out() if callable(out) else out
                X, y = (np.asarray(a.numpy() if hasattr(a, "numpy") else a) for a in out)
            except ConfigError:
                raise
            except Exception as err:
                raise ConfigError(f"workload {self.name!r}: data {data!r} must return (X, y) arrays; it gave "
                                  f"{type(err).__name__}: {err}") from None
            if X.ndim < 2 or y.ndim != 1 or X.shape[0] != y.shape[0] or X.shape[0] < 2:
                raise ConfigError(f"workload {self.name!r}: data {data!r} returned X of shape {X.shape} and y of "
                                  f"shape {y.shape}; accepted: X (N, ...) and y (N,) with N >= 2")
            if np.issubdtype(y.dtype, np.floating) and task == "multiclass" and np.all(y == np.round(y)):
                y = y.astype(np.int64)
            return X, y
        X, y = _user_data(self.name, data, task)
        return (X.toarray() if hasattr(X, "toarray") else X), y

    def _tensor(self, X: np.ndarray):
        return self.torch.tensor(np.asarray(X), dtype=self.dtype)     # a copy: the stored arrays are read-only

    def _targets(self, y: np.ndarray, loss: str):
        """The targets as the loss wants them: class indices (int64), one-hot rows (mse on labels) or reals."""
        torch = self.torch
        if self.task == "multiclass":
            labels = torch.tensor(np.asarray(y), dtype=torch.int64)
            if loss == "mse":
                return torch.nn.functional.one_hot(labels, self.n_classes).to(self.dtype)
            return labels
        return self._tensor(y)

    def _make_model(self, factory, model_args: dict, seed: int):
        torch = self.torch
        if not callable(factory):
            raise ConfigError(f"workload {self.name!r}: model {factory!r} is not a function returning an nn.Module")
        with torch.random.fork_rng(devices=[]):     # the factory's initialisation: a function of seed alone
            torch.manual_seed(seed)
            try:
                module = factory(**model_args)
            except ConfigError:
                raise
            except Exception as err:
                raise ConfigError(f"workload {self.name!r}: the model factory {factory!r} failed with "
                                  f"{model_args or 'no arguments'}: {type(err).__name__}: {err}") from None
        if not isinstance(module, torch.nn.Module):
            raise ConfigError(f"workload {self.name!r}: the model factory returned {type(module).__name__}, not a "
                              "torch.nn.Module")
        return module.to(self.dtype).eval()

    def _check_forward(self, model) -> None:
        """One forward pass and loss on two samples now, so that a model that does not fit the data (wrong input
        size, wrong number of outputs for the loss) fails at construction with a ConfigError, before any run."""
        try:
            with self.torch.no_grad():
                self._loss_sum(self.torch.from_numpy(self._w0).to(self.dtype), self._X[:2], self._y[:2])
        except Exception as err:
            raise ConfigError(f"workload {self.name!r}: the model {model!r} does not fit the data (X of shape "
                              f"{tuple(self._X.shape)}) and loss {self._loss_name!r}: {type(err).__name__}: "
                              f"{err}") from None

    # --- the model as a function of the flat w --------------------------------------------------------------
    def _unflatten(self, flat) -> dict:
        return {name: piece.view(shape) for name, piece, shape
                in zip(self._names, self.torch.split(flat, self._numels), self._shapes, strict=True)}

    def _forward(self, flat, x):
        return self.torch.func.functional_call(self.model, self._unflatten(flat), (x,))

    def _mean_loss(self, out, y):
        F = self.torch.nn.functional
        if self._loss_name == "cross_entropy":
            return F.cross_entropy(out, y)
        if self._loss_name == "mse":
            return F.mse_loss(out, y.reshape(out.shape))
        return self._loss_fn(out, y)

    def _loss_sum(self, flat, x, y):
        """``sum_i l(x_i; w)`` over the rows of ``x`` (the losses are means over a batch: times its size), the model
        called functionally on ``flat`` (what ``vmap`` needs)."""
        return self._mean_loss(self._forward(flat, x), y) * x.shape[0]

    def _set_params(self, flat) -> None:
        """Copy ``flat`` into the module's own parameters. The per-partition path calls the module directly, as
        an ordinary training loop does: ``functional_call`` re-binds every parameter on each call, which cost a
        third of a torch_cnn partition's gradient (docs/extending.md)."""
        with self.torch.no_grad():
            for p, piece in zip(self._params, self.torch.split(flat, self._numels), strict=True):
                p.copy_(piece.view_as(p))

    def _flat(self, w):
        arr = np.asarray(w, dtype=np.float64)
        if arr.shape != (self.dim,):
            raise ConfigError(f"{self.name}: w must be a vector of shape ({self.dim},), got shape {arr.shape}")
        return arr, self.torch.from_numpy(arr).to(self.dtype)

    # --- the Workload interface -----------------------------------------------------------------------------
    def init_params(self) -> np.ndarray:
        """The factory's own initialisation (under ``torch.manual_seed(seed)``), as float64."""
        return self._w0.copy()

    def gradients(self, w, t: int, parts, n_parts: int, batch: int | None = None) -> np.ndarray:
        """Partial gradients ``g_j = (|P_j|/N) (mean_{x in batch_j} grad l(x; w) + reg * w)`` (float64), row ``i``
        for ``parts[i]``; see the module docstring."""
        arr, flat = self._flat(w)
        t, parts, bounds, batch, sizes = self._gradient_args(t, parts, n_parts, batch)
        G = np.empty((len(parts), self.dim))
        if len(parts) == 0:
            return G
        if batch is not None and self.vmap:
            idx = self.torch.from_numpy(self._batch_indices(t, parts, n_parts, batch, bounds))
            G[:] = self._vgrad(flat, self._X[idx], self._y[idx]).to(self.torch.float64).numpy()
        else:
            # one backward pass per distinct partition: g_j is then the same computation, bit for bit, whatever
            # else the call holds (a repeated partition is computed once)
            torch = self.torch
            uniq, inverse = np.unique(parts, return_inverse=True)
            if batch is not None:
                idx = torch.from_numpy(self._batch_indices(t, uniq, n_parts, batch, bounds))
            self._set_params(flat)
            rows = torch.empty((len(uniq), self.dim), dtype=self.dtype)
            for k, j in enumerate(uniq.tolist()):
                if batch is None:
                    x, y = self._X[bounds[j]:bounds[j + 1]], self._y[bounds[j]:bounds[j + 1]]
                else:
                    x, y = self._X[idx[k]], self._y[idx[k]]
                grads = torch.autograd.grad(self._mean_loss(self.model(x), y) * x.shape[0], self._params)
                torch.cat([g.reshape(-1) for g in grads], out=rows[k])
            if len(uniq) == len(parts) and np.array_equal(uniq, parts):     # the usual call: no copy to reorder
                G[:] = rows.numpy()
            else:
                G[:] = rows.numpy()[inverse.reshape(-1)]
        G *= (sizes / (batch * self.n_samples))[:, None] if batch is not None else 1.0 / self.n_samples
        if self.reg:
            G += (sizes * (self.reg / self.n_samples))[:, None] * arr[None, :]
        return G

    def full_gradient(self, w) -> np.ndarray:
        """``grad F(w)``: the one partition of ``n_parts = 1``."""
        return self.gradients(w, 0, range(1), 1)[0]

    def _sum_over(self, flat, X, y) -> float:
        with self.torch.no_grad():
            return sum(float(self._loss_sum(flat, X[lo:lo + _EVAL_ROWS], y[lo:lo + _EVAL_ROWS]))
                       for lo in range(0, X.shape[0], _EVAL_ROWS))

    def loss(self, w) -> float:
        """``F(w) = (1/N) sum_i l(x_i; w) + (reg/2) ||w||^2`` on the training samples."""
        arr, flat = self._flat(w)
        return self._sum_over(flat, self._X, self._y) / self.n_samples + 0.5 * self.reg * float(arr @ arr)

    def scores(self, w, X) -> np.ndarray:
        """The model's outputs on the rows of ``X`` (numpy), float64."""
        _, flat = self._flat(w)
        X = X if hasattr(X, "dtype") and not isinstance(X, np.ndarray) else self._tensor(np.asarray(X))
        with self.torch.no_grad():
            out = [self._forward(flat, X[lo:lo + _EVAL_ROWS]) for lo in range(0, X.shape[0], _EVAL_ROWS)]
        return self.torch.cat(out).to(self.torch.float64).numpy().reshape(X.shape[0], -1)

    def accuracy(self, w) -> float | None:
        """Training accuracy for class labels (largest output = label), None for real-valued targets."""
        if self.task != "multiclass":
            return None
        return float(np.mean(np.argmax(self.scores(w, self._X), axis=1) == self.y))

    def heldout(self, w) -> dict[str, float | None] | None:
        """``test_loss`` (mean sample loss, no penalty) and, for class labels, ``test_accuracy``."""
        if self.X_test is None:
            return None
        _, flat = self._flat(w)
        out: dict[str, float | None] = {"test_loss": self._sum_over(flat, self._Xt, self._yt) / self._Xt.shape[0]}
        if self.task == "multiclass":
            out["test_accuracy"] = float(np.mean(np.argmax(self.scores(w, self._Xt), axis=1) == self.y_test))
        return out


# --- the built-in models: small enough that a 20-iteration run on the digits takes seconds ---------------------
def mlp_model(n_in: int = 64, hidden=(32,), n_out: int = 10, activation: str = "relu"):
    """``Linear -> act -> ... -> Linear``: the numpy ``mlp``'s architecture as an ``nn.Module``."""
    from torch import nn

    layers, width = [], n_in
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU() if activation == "relu" else nn.Tanh()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, n_out))


def cnn_model(side: int = 8, channels: int = 8, n_out: int = 10):
    """The 64 pixels as a ``side x side`` image: 3x3 convolution (``channels``), ReLU, 2x2 max-pool, linear."""
    from torch import nn

    return nn.Sequential(nn.Unflatten(1, (1, side, side)), nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(channels * (side // 2) ** 2, n_out))


def _hidden(hidden, who: str) -> list[int]:
    if isinstance(hidden, int | np.integer) and not isinstance(hidden, bool):
        hidden = [hidden]
    if not isinstance(hidden, list | tuple) or not all(isinstance(h, int | np.integer) and not isinstance(h, bool)
                                                       and h >= 1 for h in hidden):
        raise ConfigError(f"{who}: hidden must be a list of layer sizes (ints >= 1), e.g. [32]; got {hidden!r}")
    return [int(h) for h in hidden]


class TorchMLP(TorchWorkload):
    """A multilayer perceptron in PyTorch on the bundled digits (the numpy ``mlp``'s model, torch's gradients)."""

    name: ClassVar[str] = "torch_mlp"
    description: ClassVar[str] = ("PyTorch multilayer perceptron on the bundled digits (hidden sizes, relu/tanh); "
                                  "needs pip install gradcode[torch]")

    def __init__(self, hidden=(32,), activation: str = "relu", lr: float = 0.5, reg: float = 1e-4,
                 test_fraction: float = 0.2, n_samples: int | None = None, dtype: str = "float32",
                 threads: int = 1, vmap: bool = False, seed: int = 0):
        hidden = _hidden(hidden, self.name)
        if activation not in ("relu", "tanh"):
            raise ConfigError(f"{self.name}: activation must be relu or tanh, got {activation!r}")
        params = dict(hidden=hidden, activation=activation, lr=lr, reg=reg, test_fraction=test_fraction,
                      n_samples=n_samples, dtype=dtype, threads=threads, vmap=vmap, seed=seed)
        self._build(model=mlp_model, data=None, loss="cross_entropy", model_args=dict(hidden=hidden,
                    activation=activation), n_samples=n_samples, lr=lr, reg=reg, test_fraction=test_fraction,
                    dtype=dtype, threads=threads, vmap=vmap, seed=seed, params=params)


class TorchCNN(TorchWorkload):
    """A small convolutional network in PyTorch on the bundled digits as 8x8 images."""

    name: ClassVar[str] = "torch_cnn"
    description: ClassVar[str] = ("PyTorch convolutional network (3x3 conv, max-pool, linear) on the bundled digits "
                                  "as 8x8 images; needs pip install gradcode[torch]")

    def __init__(self, channels: int = 8, lr: float = 0.3, reg: float = 1e-4, test_fraction: float = 0.2,
                 n_samples: int | None = None, dtype: str = "float32", threads: int = 1, vmap: bool = False,
                 seed: int = 0):
        channels = check_int("channels", channels, low=1)
        params = dict(channels=channels, lr=lr, reg=reg, test_fraction=test_fraction, n_samples=n_samples,
                      dtype=dtype, threads=threads, vmap=vmap, seed=seed)
        self._build(model=cnn_model, data=None, loss="cross_entropy", model_args=dict(channels=channels),
                    n_samples=n_samples, lr=lr, reg=reg, test_fraction=test_fraction, dtype=dtype,
                    threads=threads, vmap=vmap, seed=seed, params=params)
