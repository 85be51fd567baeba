"""Data for the workloads: the shipped ``digits`` set (scikit-learn), a user's file (:mod:`gradcode.plumbing.datafile`),
and the memory check made before a large synthetic set is generated.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError


def _digits(who: str) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits: pixels scaled to ``[0, 1]`` and the labels 0..9."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ConfigError(
            f"the {who} workload needs scikit-learn for its bundled digits data: pip install gradcode[data]"
        ) from None
    digits = load_digits()
    return digits.data / 16.0, digits.target.astype(np.int64)


def _check_data_bytes(who: str, n_samples: int, dim: int) -> None:
    """Refuse, before drawing it, a synthetic data set that cannot fit: ``n_samples x dim`` floats and a few copies
    (8 bytes each); ``n_samples = 2^70`` made numpy fail with "Maximum allowed dimension exceeded"."""
    from ..plumbing.memory import available_bytes, describe_bytes

    need, have = 3 * 8 * n_samples * (dim + 1), available_bytes()
    if have is not None and need > have[0]:
        raise ConfigError(f"{who}: n_samples x dim = {n_samples} x {dim} needs about {describe_bytes(need)}, but only "
                          f"{describe_bytes(max(have[0], 0))} is available ({have[1]}); use fewer samples or a "
                          "smaller dim")


def _user_data(who: str, path, task: str):
    """``(X, y)`` of a data file, its labels checked for ``task`` (:mod:`gradcode.plumbing.datafile`)."""
    from ..plumbing.datafile import load_data

    try:
        return load_data(path, task)
    except ConfigError as err:
        raise ConfigError(f"{who}: data: {err}") from None
