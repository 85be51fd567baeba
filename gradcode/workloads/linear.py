"""The linear workloads, ``z = W x``: least squares, logistic regression and softmax regression on digits.

Each gives its residual ``r = dl/dz``; the base class turns residuals into partial gradients (``r x^T`` summed per
partition).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse

from ..errors import check_float, check_int, check_seed
from ._base import Workload
from .data import _check_data_bytes, _digits, _user_data


class LeastSquares(Workload):
    """Linear least squares on seeded synthetic data.

        F(w) = (1/2N) ||X w - y||^2

    with ``X`` Gaussian (column scales spaced geometrically so that the feature covariance has condition
    number ``condition``), ``y = X w* + noise * eps``, ``w* ~ N(0, I)``. The optimum ``w_opt`` is computed
    with :func:`scipy.linalg.lstsq` and ``optimal_loss = F(w_opt)``; ``lr = 1/L`` with ``L`` the largest
    eigenvalue of ``X^T X / N``. No regularization.

        >>> from gradcode.workloads import make_workload
        >>> ls = make_workload("least_squares", n_samples=500, dim=10, noise=0.1, seed=1)
        >>> w = ls.init_params()
        >>> for _ in range(300):
        ...     w = w - ls.lr * ls.full_gradient(w)
        >>> bool(ls.loss(w) - ls.optimal_loss < 1e-6)
        True
    """

    name: ClassVar[str] = "least_squares"
    description: ClassVar[str] = "least squares (1/2N)||Xw - y||^2 on seeded Gaussian data; known optimum"
    _curvature: ClassVar[float | None] = 1.0

    def __init__(self, n_samples: int = 2000, dim: int = 20, noise: float = 0.1, condition: float = 1.0,
                 seed: int = 0, data: str | None = None, test_fraction: float = 0.0):
        n_samples = check_int("n_samples", n_samples, low=1)
        dim = check_int("dim", dim, low=1)
        noise = check_float("noise", noise, low=0.0)
        condition = check_float("condition", condition, low=1.0)
        test_fraction = check_float("test_fraction", test_fraction, low=0.0, high=1.0)
        seed = check_seed(seed)
        self.params = dict(n_samples=n_samples, dim=dim, noise=noise, condition=condition, seed=seed, data=data,
                           test_fraction=test_fraction)
        if data is not None:       # a user's data: n_samples, dim, noise and condition do not apply
            X, y = _user_data(self.name, data, "regression")
        else:
            _check_data_bytes(self.name, n_samples, dim)
            rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
            scales = condition ** (-0.5 * np.linspace(0.0, 1.0, dim))
            X = rng.standard_normal((n_samples, dim)) * scales
            self.w_star = rng.standard_normal(dim)
            y = X @ self.w_star + noise * rng.standard_normal(n_samples)
        self._setup(X, y, seed=seed, reg=0.0, test_fraction=test_fraction)
        self.lr = 1.0 / self._gram_max_eig()
        if scipy.sparse.issparse(self.X):
            return                 # no optimum computed for sparse data (optimal_loss stays None)
        from scipy.linalg import lstsq

        # minimum-norm least-squares solution by pivoted QR (several times faster than the SVD at d = 1000)
        self.w_opt = lstsq(self.X, self.y, lapack_driver="gelsy", check_finite=False)[0]
        self.optimal_loss = self.loss(self.w_opt)

    def _residual(self, Z, y):
        return Z - y[..., None]

    def _sample_loss(self, Z, y):
        return 0.5 * (Z[:, 0] - y) ** 2


class Logistic(Workload):
    """Binary logistic regression with a small L2 penalty, on seeded synthetic data.

    Labels ``y in {0, 1}``: ``y = 1[x^T w* + noise * ||w*|| * eps > 0]`` with ``x, w*, eps`` standard Gaussian
    (no bias). ``noise`` is the ratio of label noise to signal: the best possible accuracy is
    ``1 - arctan(noise)/pi`` (0.85 at the default 0.5), so the classes overlap and the data are separable-ish.

        F(w) = (1/N) sum_i [log(1 + exp(z_i)) - y_i z_i] + (reg/2)||w||^2,   z_i = x_i^T w,

    evaluated as ``logaddexp(0, z)``; the small ``reg`` keeps the optimum finite. ``lr = 1/L`` with the
    Lipschitz bound ``L = lambda_max(X^T X / N) / 4 + reg``.

        >>> from gradcode.workloads import make_workload
        >>> lg = make_workload("logistic", n_samples=400, dim=5, seed=0)
        >>> w = lg.init_params()
        >>> for _ in range(100):
        ...     w = w - lg.lr * lg.full_gradient(w)
        >>> bool(lg.loss(w) < lg.loss(lg.init_params()) and lg.accuracy(w) > 0.8)
        True
    """

    name: ClassVar[str] = "logistic"
    description: ClassVar[str] = "binary logistic regression, L2 reg, on seeded synthetic separable-ish data"
    _curvature: ClassVar[float | None] = 0.25
    task: ClassVar[str] = "binary"

    def __init__(self, n_samples: int = 2000, dim: int = 20, noise: float = 0.5, reg: float = 1e-4,
                 seed: int = 0, data: str | None = None, test_fraction: float = 0.0):
        n_samples = check_int("n_samples", n_samples, low=1)
        dim = check_int("dim", dim, low=1)
        noise = check_float("noise", noise, low=0.0)
        reg = check_float("reg", reg, low=0.0)
        test_fraction = check_float("test_fraction", test_fraction, low=0.0, high=1.0)
        seed = check_seed(seed)
        self.params = dict(n_samples=n_samples, dim=dim, noise=noise, reg=reg, seed=seed, data=data,
                           test_fraction=test_fraction)
        if data is not None:       # a user's data, labels {0, 1} or {-1, +1}: n_samples, dim, noise do not apply
            X, y = _user_data(self.name, data, "binary")
        else:
            _check_data_bytes(self.name, n_samples, dim)
            rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
            X = rng.standard_normal((n_samples, dim))
            self.w_star = rng.standard_normal(dim)
            margin = X @ self.w_star + noise * np.linalg.norm(self.w_star) * rng.standard_normal(n_samples)
            y = (margin > 0).astype(np.float64)
        self._setup(X, y, seed=seed, reg=reg, test_fraction=test_fraction)
        self.lr = 1.0 / (self._gram_max_eig() / 4.0 + reg)

    def _residual(self, Z, y):
        return _expit(Z) - y[..., None]

    def _sample_loss(self, Z, y):
        z = Z[:, 0]
        return np.logaddexp(0.0, z) - y * z

    def accuracy(self, w) -> float:
        """Fraction of samples with ``1[x^T w > 0] == y``."""
        W = self._matrix(w)
        return float(np.mean((self.X @ W[0] > 0) == (self.y > 0.5)))


class SoftmaxDigits(Workload):
    """Multinomial logistic regression on scikit-learn's bundled ``digits`` (1797 images of 8x8, 10 classes).

    Features are the 64 pixels scaled to ``[0, 1]`` plus a constant 1 (bias), ``p = 65``; ``w`` is the
    ``(10, 65)`` weight matrix ``W`` flattened row by row (``d = 650``).

        F(W) = (1/N) sum_i [logsumexp(W x_i) - (W x_i)_{y_i}] + (reg/2)||W||^2,

    evaluated with the row maximum subtracted. ``lr = 1/L`` with ``L = lambda_max(X^T X / N) / 2 + reg`` (the
    Hessian of log-sum-exp is at most ``I/2``). ``accuracy`` is the training accuracy. The data ship inside
    scikit-learn (nothing is downloaded); install it with ``pip install gradcode[data]``.

        >>> from gradcode.workloads import make_workload
        >>> sm = make_workload("softmax_digits")
        >>> sm.dim, sm.n_samples
        (650, 1797)
    """

    name: ClassVar[str] = "softmax_digits"
    description: ClassVar[str] = ("softmax regression on scikit-learn's bundled digits (1797 x 64, "
                                  "10 classes); needs pip install gradcode[data]")
    _curvature: ClassVar[float | None] = 0.5
    n_classes: ClassVar[int] = 10
    task: ClassVar[str] = "multiclass"

    def __init__(self, reg: float = 1e-4, seed: int = 0, data: str | None = None, test_fraction: float = 0.0):
        reg = check_float("reg", reg, low=0.0)
        test_fraction = check_float("test_fraction", test_fraction, low=0.0, high=1.0)
        seed = check_seed(seed)
        self.params = dict(reg=reg, seed=seed, data=data, test_fraction=test_fraction)
        X, y = _digits(self.name) if data is None else _user_data(self.name, data, "multiclass")
        self.n_classes = int(y.max()) + 1           # 10 for the digits; a data file's largest label + 1
        ones = np.ones((X.shape[0], 1))
        X = scipy.sparse.hstack([X, ones], format="csr") if scipy.sparse.issparse(X) else np.hstack([X, ones])
        self._setup(X, y, seed=seed, reg=reg, test_fraction=test_fraction)
        self.lr = 1.0 / (self._gram_max_eig() / 2.0 + reg)

    def _residual(self, Z, y):
        return _softmax_residual(Z, y)

    def _sample_loss(self, Z, y):
        return _softmax_loss(Z, y)

    def accuracy(self, w) -> float:
        """Fraction of samples whose largest score is the true class."""
        W = self._matrix(w)
        return float(np.mean(np.argmax(self.X @ W.T, axis=1) == self.y))


def _softmax_residual(Z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``softmax(z) - onehot(y)`` row by row (the last axis holds the classes)."""
    P = np.exp(Z - Z.max(axis=-1, keepdims=True))
    P /= P.sum(axis=-1, keepdims=True)
    np.put_along_axis(P, y[..., None], np.take_along_axis(P, y[..., None], axis=-1) - 1.0, axis=-1)
    return P


def _softmax_loss(Z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``logsumexp(z) - z_y`` per row."""
    zmax = Z.max(axis=1)
    lse = zmax + np.log(np.exp(Z - zmax[:, None]).sum(axis=1))
    return lse - Z[np.arange(len(y)), y]


def _expit(z: np.ndarray) -> np.ndarray:
    """The logistic sigmoid ``1/(1 + exp(-z))`` without overflow."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
