"""A small multi-layer perceptron (one hidden layer, ReLU or tanh), the non-linear workload: its gradient is
computed by backpropagation per partition, on synthetic data or digits.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse

from ..errors import ConfigError, check_float, check_seed
from ._base import Workload
from .data import _digits, _user_data
from .linear import _softmax_loss, _softmax_residual

_ACTIVATIONS = ("relu", "tanh")


class MLP(Workload):
    """A multilayer perceptron with a softmax output, on scikit-learn's bundled ``digits`` (or a user's data file).

    With ``a_0 = x`` (the 64 pixels scaled to ``[0, 1]``), hidden layers ``a_l = act(W_l a_{l-1} + b_l)`` of sizes
    ``hidden`` (``act`` = ``relu`` or ``tanh``) and logits ``z = W_L a_{L-1} + b_L`` over the ``C = 10`` classes,

        F(w) = (1/N) sum_i [logsumexp(z_i) - z_{i, y_i}] + (reg/2)||w||^2,

    with ``w`` every ``W_l`` (row by row) then its ``b_l``, layer after layer (``d = sum_l out_l (in_l + 1)``; 2,410
    for ``hidden = [32]``). The gradient is backpropagation: ``delta_L = softmax(z) - onehot(y)``,
    ``delta_{l-1} = (W_l^T delta_l) * act'(W_{l-1} a_{l-2} + b_{l-1})``, ``dF/dW_l = mean delta_l a_{l-1}^T``,
    ``dF/db_l = mean delta_l``. Partitions, scaling and mini-batches are the base class's (module docstring): a
    partition's mini-batch is a pure function of ``(seed, t, j, n_parts)``. ``test_fraction`` of the samples are
    held out (``heldout``: test loss and accuracy). ``init_params`` is seeded (He-scaled Gaussian weights for relu,
    Glorot for tanh, zero biases: a model of zeros would never break the symmetry of the hidden units).

    Cost grows with the parameter count: a gradient with ``hidden = [256, 256]`` (``d = 85,002``) costs about twenty
    times one with ``hidden = [32]`` (figures in ``docs/benchmarks.md#the-mlp-workload``): choose the sizes to make
    compute matter.

        >>> from gradcode.workloads import make_workload
        >>> mlp = make_workload("mlp", hidden=[16])
        >>> mlp.dim, mlp.n_samples, mlp.X_test.shape[0]
        (1210, 1438, 359)
        >>> w = mlp.init_params()
        >>> for _ in range(100):
        ...     w = w - mlp.lr * mlp.full_gradient(w)
        >>> bool(mlp.heldout(w)["test_accuracy"] > 0.8)
        True
    """

    name: ClassVar[str] = "mlp"
    description: ClassVar[str] = ("multilayer perceptron (hidden sizes, relu/tanh, softmax output) on the bundled "
                                  "digits or a data file; needs pip install gradcode[data] for digits")
    task: ClassVar[str] = "multiclass"

    def __init__(self, hidden=(32,), activation: str = "relu", reg: float = 1e-4, lr: float = 0.5,
                 test_fraction: float = 0.2, data: str | None = None, seed: int = 0):
        if isinstance(hidden, int | np.integer) and not isinstance(hidden, bool):
            hidden = [hidden]
        if not isinstance(hidden, list | tuple) or not all(isinstance(h, int | np.integer) and not isinstance(h, bool)
                                                           and h >= 1 for h in hidden):
            raise ConfigError(f"mlp: hidden must be a list of layer sizes (ints >= 1), e.g. [32]; got {hidden!r}")
        if activation not in _ACTIVATIONS:
            raise ConfigError(f"mlp: activation must be one of {', '.join(_ACTIVATIONS)}, got {activation!r}")
        reg = check_float("reg", reg, low=0.0)
        lr = check_float("lr", lr, low=0.0, low_open=True)
        test_fraction = check_float("test_fraction", test_fraction, low=0.0, high=1.0)
        seed = check_seed(seed)
        self.params = dict(hidden=[int(h) for h in hidden], activation=activation, reg=reg, lr=lr,
                           test_fraction=test_fraction, data=data, seed=seed)
        X, y = _digits("mlp") if data is None else _user_data("mlp", data, "multiclass")
        self.n_classes = int(y.max()) + 1
        self._setup(X, y, seed=seed, reg=reg, test_fraction=test_fraction)
        self.activation = activation
        self.sizes = [self.n_features, *self.params["hidden"], self.n_classes]
        self.shapes = list(zip(self.sizes[1:], self.sizes[:-1], strict=True))       # (out, in) per layer
        self.dim = sum(o * (i + 1) for o, i in self.shapes)
        self.lr = lr

    def init_params(self) -> np.ndarray:
        """Seeded weights ``N(0, gain / fan_in)`` (gain 2 for relu, 1 for tanh), zero biases."""
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 4]))
        gain = 2.0 if self.activation == "relu" else 1.0
        parts = []
        for out, fan_in in self.shapes:
            parts += [rng.standard_normal(out * fan_in) * np.sqrt(gain / fan_in), np.zeros(out)]
        return np.concatenate(parts)

    def _layers(self, w) -> list[tuple[np.ndarray, np.ndarray]]:
        """``w`` validated and cut into views ``(W_l, b_l)``."""
        arr = np.asarray(w, dtype=np.float64)
        if arr.shape != (self.dim,):
            raise ConfigError(f"mlp: w must be a vector of shape ({self.dim},), got shape {arr.shape}")
        layers, at = [], 0
        for out, fan_in in self.shapes:
            W = arr[at:at + out * fan_in].reshape(out, fan_in)
            at += out * fan_in
            layers.append((W, arr[at:at + out]))
            at += out
        return layers

    def _forward(self, layers, X) -> list[np.ndarray]:
        """The activations ``[a_0 = X, a_1, ..., a_{L-1}, z]`` (the last entry: the logits)."""
        acts = [X]
        for k, (W, b) in enumerate(layers):
            z = acts[-1] @ W.T + b
            if k < len(layers) - 1:
                z = np.maximum(z, 0.0) if self.activation == "relu" else np.tanh(z)
            acts.append(z)
        return acts

    def _grad_sum(self, layers, X, y) -> np.ndarray:
        """``sum_i grad l(x_i; w)`` over the rows of ``X`` (flattened like ``w``), by backpropagation."""
        acts = self._forward(layers, X)
        delta = _softmax_residual(acts[-1], y)                        # dl/dz, (rows, C)
        grads = []
        for k in range(len(layers) - 1, -1, -1):
            a = acts[k]
            gW = (a.T @ delta).T if scipy.sparse.issparse(a) else delta.T @ a           # sparse input: X^T delta
            grads.append(delta.sum(axis=0))
            grads.append(gW.ravel())
            if k:
                back = delta @ layers[k][0]
                delta = back * (a > 0) if self.activation == "relu" else back * (1.0 - a * a)
        return np.concatenate(grads[::-1])

    def gradients(self, w, t: int, parts, n_parts: int, batch: int | None = None) -> np.ndarray:
        """Partial gradients ``g_j = (|P_j|/N) (mean_{x in batch_j} grad l(x; w) + reg * w)``, see the module
        docstring; row ``i`` belongs to ``parts[i]``."""
        layers = self._layers(w)
        t, parts, bounds, batch, sizes = self._gradient_args(t, parts, n_parts, batch)
        G = np.empty((len(parts), self.dim))
        if len(parts) == 0:
            return G
        if batch is None:
            uniq, inverse = np.unique(parts, return_inverse=True)
            for k, j in enumerate(uniq.tolist()):
                lo, hi = bounds[j], bounds[j + 1]
                G[inverse.reshape(-1) == k] = self._grad_sum(layers, self.X[lo:hi], self.y[lo:hi]) / self.n_samples
        else:
            idx = self._batch_indices(t, parts, n_parts, batch, bounds)
            for k in range(len(parts)):
                G[k] = self._grad_sum(layers, self.X[idx[k]], self.y[idx[k]]) * (sizes[k] / (batch * self.n_samples))
        if self.reg:
            G += (sizes * (self.reg / self.n_samples))[:, None] * np.asarray(w, dtype=np.float64)[None, :]
        return G

    def full_gradient(self, w) -> np.ndarray:
        """``grad F(w)``: the one partition of ``n_parts = 1``."""
        return self.gradients(w, 0, range(1), 1)[0]

    def scores(self, w, X) -> np.ndarray:
        """The logits ``z`` of every row of ``X``."""
        return self._forward(self._layers(w), X)[-1]

    def loss(self, w) -> float:
        """``F(w)`` on the training samples."""
        w = np.asarray(w, dtype=np.float64)
        data = float(_softmax_loss(self.scores(w, self.X), self.y).mean())
        return data + 0.5 * self.reg * float(w @ w)

    def accuracy(self, w) -> float:
        """Training accuracy: fraction of samples whose largest logit is the true class."""
        return float(np.mean(np.argmax(self.scores(w, self.X), axis=1) == self.y))

    def _sample_loss(self, Z, y):
        return _softmax_loss(Z, y)
