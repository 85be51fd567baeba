"""A user's own data set from a file, for the built-in models (``[workload] data = "path"``).

Accepted formats, by the file's extension:

- ``.npz``: arrays ``X`` (``N x p``) and ``y`` (``N``), as ``numpy.savez("f.npz", X=X, y=y)`` writes them;
- ``.csv``: numbers separated by commas, one sample a line, the label in the first column (a first line that is
  not numeric is a header and skipped);
- ``.svm``, ``.svmlight``, ``.libsvm``: the svmlight / libsvm text format, read by scikit-learn's
  :func:`sklearn.datasets.load_svmlight_file` into a ``scipy.sparse`` CSR matrix (kept sparse).

The labels must suit the model (``task``): any finite number for regression (``least_squares``), two classes
``{0, 1}`` or ``{-1, +1}`` for ``binary`` (``logistic``; mapped to 0 and 1), integers ``0..C-1`` for
``multiclass`` (``softmax_digits``, ``mlp``; ``C`` is the largest label plus one). A relative path is relative to
the working directory. The harness fingerprints the file's content, so a resume notices a changed file.

    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "d.npz")
    >>> np.savez(path, X=np.eye(3), y=np.array([0, 1, 1]))
    >>> X, y = load_data(path, "binary")
    >>> X.shape, y.tolist()
    ((3, 3), [0.0, 1.0, 1.0])
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse

from ..errors import ConfigError

FORMATS = {".npz": "npz", ".csv": "csv", ".svm": "svmlight", ".svmlight": "svmlight", ".libsvm": "svmlight"}
TASKS = ("regression", "binary", "multiclass")


def load_data(path, task: str):
    """``(X, y)`` from ``path`` (dense array or CSR matrix, float labels for regression and binary, int labels for
    multiclass), checked: a clear :class:`ConfigError` for a missing file, an unknown format, a wrong shape or
    labels that do not suit ``task``."""
    if not isinstance(path, str | os.PathLike) or not str(path):
        raise ConfigError(f"data must be the path of a data file ({', '.join(FORMATS)}), got {path!r}")
    path = str(path)
    kind = FORMATS.get(os.path.splitext(path)[1].lower())
    if kind is None:
        raise ConfigError(f"data file {path!r}: unknown format; accepted extensions: {', '.join(FORMATS)}")
    if not os.path.isfile(path):
        raise ConfigError(f"data file {path!r} does not exist (a relative path is relative to {os.getcwd()!r})")
    X, y = {"npz": _npz, "csv": _csv, "svmlight": _svmlight}[kind](path)
    _check_shapes(path, X, y)
    return X, _labels(path, y, task)


def _npz(path: str):
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in ("X", "y") if k not in f.files]
            if missing:
                raise ConfigError(f"data file {path!r} has no array {' or '.join(missing)} (it holds "
                                  f"{', '.join(f.files) or 'nothing'}); write it as numpy.savez(path, X=X, y=y)")
            return np.asarray(f["X"]), np.asarray(f["y"])
    except (OSError, ValueError) as err:
        raise ConfigError(f"data file {path!r} is not a readable .npz file: {err}") from None


def _csv(path: str):
    for skip in (0, 1):
        try:
            table = np.loadtxt(path, delimiter=",", ndmin=2, skiprows=skip, dtype=np.float64)
            break
        except ValueError as err:
            if skip:
                raise ConfigError(f"data file {path!r}: not a CSV of numbers (label first, then the features; "
                                  f"one header line allowed): {err}") from None
    if table.shape[1] < 2:
        raise ConfigError(f"data file {path!r}: a CSV line needs a label and at least one feature, "
                          f"got {table.shape[1]} column(s)")
    return table[:, 1:], table[:, 0]


def _svmlight(path: str):
    try:
        from sklearn.datasets import load_svmlight_file
    except ImportError:
        raise ConfigError("reading svmlight files needs scikit-learn: pip install gradcode[data]") from None
    try:
        X, y = load_svmlight_file(path)
    except ValueError as err:
        raise ConfigError(f"data file {path!r} is not a valid svmlight file: {err}") from None
    return scipy.sparse.csr_array(X), y


def _check_shapes(path: str, X, y) -> None:
    if X.ndim != 2 or y.ndim != 1:
        raise ConfigError(f"data file {path!r}: X must be 2-D (samples x features) and y 1-D, "
                          f"got X of shape {X.shape} and y of shape {y.shape}")
    if X.shape[0] != y.shape[0]:
        raise ConfigError(f"data file {path!r}: X has {X.shape[0]} rows but y has {y.shape[0]} labels; "
                          "accepted: one label per row")
    if X.shape[0] < 2 or X.shape[1] < 1:
        raise ConfigError(f"data file {path!r}: needs at least 2 samples and 1 feature, got X of shape {X.shape}")
    values = X.data if scipy.sparse.issparse(X) else X
    if not np.issubdtype(values.dtype, np.number) or not np.all(np.isfinite(values)):
        raise ConfigError(f"data file {path!r}: the features must be finite numbers")


def _labels(path: str, y: np.ndarray, task: str) -> np.ndarray:
    if not np.issubdtype(y.dtype, np.number) or not np.all(np.isfinite(y)):
        raise ConfigError(f"data file {path!r}: the labels must be finite numbers")
    y = y.astype(np.float64)
    if task == "regression":
        return y
    values = sorted(set(np.unique(y).tolist()))
    if task == "binary":
        if set(values) <= {0.0, 1.0}:
            return y
        if set(values) <= {-1.0, 1.0}:
            return (y > 0).astype(np.float64)
        raise ConfigError(f"data file {path!r}: a binary model needs labels in {{0, 1}} or {{-1, +1}}, "
                          f"got {_show(values)}")
    if task == "multiclass":
        if any(v != int(v) or v < 0 for v in values):
            raise ConfigError(f"data file {path!r}: a multiclass model needs integer labels 0..C-1, "
                              f"got {_show(values)}")
        return y.astype(np.int64)
    raise ValueError(f"unknown task {task!r}; accepted: {', '.join(TASKS)}")


def _show(values: list[float]) -> str:
    head = ", ".join(f"{v:g}" for v in values[:6])
    return f"{{{head}{', ...' if len(values) > 6 else ''}}} ({len(values)} distinct)"
