"""Held-out metrics of a classifier: accuracy and the area under the ROC curve (AUC), from its scores.

``roc_auc`` is the rank (Mann-Whitney) form: with ``n1`` positives, ``n0`` negatives and ``R1`` the sum of the
positives' ranks among all scores (ties get their average rank),

    AUC = (R1 - n1 (n1 + 1) / 2) / (n1 n0),

the probability that a random positive scores above a random negative (ties count one half).

    >>> import numpy as np
    >>> roc_auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1]))
    0.75
"""

from __future__ import annotations

import numpy as np


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """The AUC of ``scores`` for binary ``labels`` (positive: ``labels > 0.5``); None if one class is absent."""
    from scipy.stats import rankdata

    pos = np.asarray(labels) > 0.5
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        return None
    ranks = rankdata(np.asarray(scores, dtype=float))      # average ranks for ties
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def accuracy(scores: np.ndarray, labels: np.ndarray) -> float:
    """Fraction correct: ``1[z > 0] == y`` for one score column (binary), ``argmax z == y`` for several."""
    scores = np.asarray(scores)
    if scores.shape[1] == 1:
        return float(np.mean((scores[:, 0] > 0) == (np.asarray(labels) > 0.5)))
    return float(np.mean(np.argmax(scores, axis=1) == labels))
