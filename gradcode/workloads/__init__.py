"""Workloads: the models that distributed gradient descent trains, with their data, partitions and gradients.

A workload holds ``N`` samples (``n_samples``; ``N`` means the number of samples throughout the package) and a loss
``F(w) = (1/N) sum_i l(x_i; w) + R(w)`` over a parameter vector ``w`` of length ``d``; ``test_fraction`` more are
held out (:meth:`Workload.heldout`), and ``data = "path"`` replaces the built-in data by a file
(:mod:`gradcode.plumbing.datafile`; ``scipy.sparse`` CSR features are kept sparse). Every model but :class:`MLP` is
linear in its features: the predictions of a sample are ``z = W x`` with ``W`` the parameter vector viewed as a
``(C, p)`` matrix (``C = 1`` for least squares and logistic regression, ``C = 10`` for the softmax workload), so the
gradient of one sample is the outer product ``r x^T`` of a residual ``r = dl/dz`` and the features.

**Partitions.** The samples are stored once, in the order of a fixed seeded permutation. Partition ``j`` of
``n_parts`` (chosen per call: the scheme decides it, e.g. ``n`` workers or ``n*M`` micro-batches) is the
``j``-th contiguous slice of that order as :func:`numpy.array_split` cuts it: the first ``N mod n_parts``
partitions hold ``floor(N/n_parts) + 1`` samples, the others ``floor(N/n_parts)``.

**Scaling.** The partial gradient of partition ``j`` is

    g_j = (|P_j| / N) * ( mean_{x in batch} grad l(x; w) + grad R(w) ),

so with full batches ``sum_j g_j`` is exactly the gradient of ``F`` (``g = sum_j g_j``, see
``docs/references.md#gradient-codes``), for every ``n_parts``.

**Mini-batch determinism.** With a mini-batch size ``b`` the batch of partition ``j`` at iteration ``t`` is
drawn from ``P_j`` (without replacement if ``b <= |P_j|``, else with replacement) by a counter-based random
stream that is a pure function of ``(seed, t, j, n_parts)``: every worker that holds partition ``j`` computes the
same ``g_j``, whatever else it computes in the same call and in whatever order, which is what keeps gradient
codes exact under SGD. The stream is a splitmix64 hash of ``(seed, t, j, n_parts, counter)`` evaluated for all
requested partitions at once (creating one :class:`numpy.random.Generator` per partition would cost more than
the whole gradient computation of a typical call). A subset without replacement is drawn
uniformly by Floyd's algorithm when ``b*b <= |P_j|`` and by the ``b`` smallest of ``|P_j|`` random keys
otherwise; both are uniform over the ``b``-subsets, and which one is used depends only on ``(|P_j|, b)``.
``batch=None`` means the whole partition (deterministic). The mini-batch partial gradient is an unbiased
estimate of the full-batch one.

The package: :mod:`._base` (the :class:`Workload` base class), :mod:`._sampling` (the random streams),
:mod:`.linear` (least squares, logistic, softmax), :mod:`.mlp`, :mod:`.data` (digits and user files),
:mod:`.metrics` (held-out accuracy and AUC).

    >>> import numpy as np, gradcode.workloads as wl
    >>> ls = wl.make_workload("least_squares", n_samples=100, dim=3, seed=0)
    >>> w = ls.init_params()
    >>> G = ls.gradients(w, t=0, parts=range(7), n_parts=7)                # full batches
    >>> bool(np.allclose(G.sum(axis=0), ls.full_gradient(w)))
    True
    >>> a = ls.gradients(w, t=5, parts=[3, 1], n_parts=7, batch=4)
    >>> b = ls.gradients(w, t=5, parts=[1], n_parts=7, batch=4)
    >>> bool(np.array_equal(a[1], b[0]))
    True
"""

from __future__ import annotations

from ._base import Workload
from .linear import LeastSquares, Logistic, SoftmaxDigits
from .mlp import MLP


def list_workloads() -> dict[str, str]:
    """Names of the workloads with a one-line description of each."""
    from ..plumbing.registry import WORKLOADS

    return WORKLOADS.list()


def make_workload(name, **params) -> Workload:
    """Build the workload ``name`` (a name, an import path or a ``{"name": ..., **params}`` dict; keyword ``params``
    override its entries); a built :class:`Workload` is returned as is.

        >>> make_workload({"name": "least_squares", "dim": 3}, n_samples=50).dim
        3
    """
    from ..plumbing.registry import WORKLOADS

    return WORKLOADS.build(name, **params)


__all__ = ["MLP", "LeastSquares", "Logistic", "SoftmaxDigits", "Workload", "list_workloads", "make_workload"]
