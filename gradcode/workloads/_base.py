"""The :class:`Workload` base class: data stored once in a seeded order, partitions as contiguous slices, partial
gradients ``g_j = (|P_j| / N) (mean grad l + grad R)`` for a whole set of partitions in one pass, mini-batches drawn
by :mod:`._sampling`, held-out metrics. A concrete workload says only how to build its data and its residuals.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse

from ..errors import ConfigError, check_int
from ._sampling import _sample_local, _stream_keys

# Largest temporary (in float64 elements) the full-batch path materialises at once.
_CHUNK_ELEMENTS = 1 << 22


class Workload:
    """Base class of every workload (public as ``gradcode.Workload``): what a cluster calls, and the vectorised
    gradient algorithm of the linear models.

    **What a cluster calls.** The simulated cluster, every MPI rank and the comparison harness use exactly these,
    so a subclass (a user's, named in a spec as ``"mymodule:MyWorkload"``) provides exactly these:

    - ``dim`` (int): ``d``, the length of the parameter vector ``w``; a message is ``d`` floats.
    - ``n_samples`` (int): ``N``; the report counts the samples a worker computes as ``N / n_parts`` per partition
      when partitions are used whole.
    - ``lr`` (float): the default step size (``[run] lr`` overrides it).
    - ``init_params() -> ndarray (d,)``: the starting point (here: zeros).
    - ``gradients(w, t, parts, n_parts, batch=None) -> ndarray (len(parts), d)``: the partial gradients ``g_j`` of
      the partitions ``j`` in ``parts`` (a range or a tuple of ints) when the data are cut into ``n_parts``
      partitions (the scheme chooses ``n_parts``: ``n``, a code's ``n_parts``, ``n*M`` micro-batches). Row ``i``
      belongs to ``parts[i]``, and ``sum_{j<n_parts} g_j`` must be the gradient of ``F`` at ``w`` (``batch=None``:
      whole partitions) or an unbiased estimate of it (``batch`` samples per partition, drawn for iteration ``t``; a
      workload may ignore ``batch``).
      ``g_j`` must be a pure function of ``(w, t, j, n_parts, batch)``: every worker holding partition ``j`` must send
      the same ``g_j``, or a gradient code no longer decodes the exact sum.
    - ``loss(w) -> float``: ``F(w)`` on the whole data (the records' ``loss``, ``[run] target_loss``).
    - optional: ``X_test`` (not None) and ``heldout(w) -> dict`` (``test_loss``, ``test_accuracy``, ``test_auc``):
      the records' held-out metrics every ``[run] eval_every`` iterations; the built-in :meth:`heldout` uses
      :meth:`scores` and ``_sample_loss`` on ``X_test``, ``y_test``.

    A subclass may use :meth:`partition_bounds` (``n_parts`` contiguous partitions of ``range(n_samples)``, the first
    ``N mod n_parts`` one sample longer) once ``n_samples`` is set. ``name`` and ``description`` are shown by
    ``gradcode list``, ``params`` (a dict of the constructor's arguments) by ``repr``.

    **Linear models** (the built-in workloads) get all of the above from this class: they set ``n_classes``
    (``C``), call :meth:`_setup` in ``__init__`` with the features ``X`` (``N x p``), the targets ``y`` and the L2
    weight ``reg``, set ``lr``, and implement :meth:`_residual` (``dl/dz``) and :meth:`_sample_loss`;
    ``R(w) = (reg/2) ||w||^2``.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    n_classes: ClassVar[int] = 1
    task: ClassVar[str] = "regression"    # or "binary", "multiclass": which held-out metrics apply

    dim: int
    n_samples: int
    n_features: int
    lr: float
    reg: float
    seed: int
    params: dict
    optimal_loss: float | None = None
    X_test = None       # held-out samples (``test_fraction``), never trained on; None: no held-out evaluation
    y_test = None

    # --- construction ---------------------------------------------------------------------------------------
    def _setup(self, X, y: np.ndarray, *, seed: int, reg: float, test_fraction: float = 0.0) -> None:
        """Store the data in the order of the seeded permutation; the last ``round(test_fraction * N)`` samples of
        that order are held out (``X_test``, ``y_test``, never trained on). ``X`` may be a ``scipy.sparse`` matrix
        (kept as CSR: the gradients are the same as for the dense matrix)."""
        n = X.shape[0]
        perm = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED])).permutation(n)
        n_test = int(round(test_fraction * n))
        if test_fraction and not 1 <= n_test < n:
            raise ConfigError(f"{self.name}: test_fraction = {test_fraction} of {n} samples leaves "
                              f"{n - n_test} to train on and {n_test} to test on; accepted: both at least 1")
        perm, test = perm[:n - n_test], perm[n - n_test:]
        self.X = _rows(X, perm)
        self.y = np.ascontiguousarray(y[perm])
        self.X_test = _rows(X, test) if n_test else None
        self.y_test = np.ascontiguousarray(y[test]) if n_test else None
        self.y.setflags(write=False)
        self.perm = perm
        self.n_samples = n - n_test
        self.n_features = X.shape[1]
        self.dim = self.n_classes * self.n_features
        self.reg = reg
        self.seed = seed

    # a bound on the loss's second derivative in the prediction z (least squares 1, logistic 1/4, softmax 1/2):
    # with the rows' norms it bounds one sample's smoothness, for batch_lr; None: unknown (batch_lr is lr)
    _curvature: ClassVar[float | None] = None

    def batch_lr(self, samples: int) -> float:
        """The default step for mini-batches of ``samples`` samples: ``lr`` (``1/L``, the full batch's) while it is
        within the stability limit ``2 / L_B`` of such batches, else ``1 / L_B``. ``L_B`` is the expected
        smoothness of ``B``-sample batches (Gower et al., "SGD: General Analysis and Improved Rates", ICML 2019,
        b-nice sampling), ``L_B = (N (B - 1) L + (N - B) L_i) / (B (N - 1))``, with ``L_i`` one sample's mean
        smoothness (the curvature times the mean squared row norm, plus ``reg``). A model without such a bound (the
        MLP) keeps ``lr``. Least squares at its defaults: 8 samples need 0.28 (``lr`` 0.84 diverged), 64 keep
        ``lr``; the default experiment's workload (``condition = 10``) keeps ``lr`` from 8 samples up."""
        N = self.n_samples
        if self._curvature is None or N < 2:
            return self.lr
        B = min(max(int(samples), 1), N)
        if getattr(self, "_row_mean", None) is None:
            X = self.X
            sparse = scipy.sparse.issparse(X)
            sq = np.asarray(X.multiply(X).sum(axis=1)).ravel() if sparse else np.einsum("ij,ij->i", X, X)
            self._row_mean = float(sq.mean())
        L, L_i = 1.0 / self.lr, self._curvature * self._row_mean + self.reg
        L_B = (N * (B - 1) * L + (N - B) * L_i) / (B * (N - 1))
        return self.lr if self.lr * L_B <= 2.0 else 1.0 / L_B

    def _gram_max_eig(self) -> float:
        """Largest eigenvalue of ``X^T X / N`` (Lipschitz constants): dense if small, else Lanczos."""
        X, n = self.X, self.n_samples
        if min(X.shape) <= 100 and not scipy.sparse.issparse(X):
            M = X.T @ X if X.shape[1] <= X.shape[0] else X @ X.T
            return float(np.linalg.eigvalsh(M / n)[-1])
        from scipy.sparse.linalg import LinearOperator, eigsh  # lazily: keeps ``import gradcode`` fast

        op = LinearOperator((X.shape[1],) * 2, matvec=lambda v: X.T @ (X @ v) / n,
                                                dtype=np.float64)
        v0 = np.ones(X.shape[1])       # deterministic start
        return float(eigsh(op, k=1, which="LA", v0=v0, return_eigenvectors=False)[0])

    # --- model hooks ----------------------------------------------------------------------------------------
    def _residual(self, Z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``dl/dz`` for predictions ``Z`` (``(..., C)``) and targets ``y`` (``(...)``)."""
        raise NotImplementedError

    def _sample_loss(self, Z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``l`` per sample for predictions ``Z`` (``(N, C)``)."""
        raise NotImplementedError

    # --- public API -----------------------------------------------------------------------------------------
    def init_params(self) -> np.ndarray:
        """The starting point: zeros of length ``dim`` (float64)."""
        return np.zeros(self.dim, dtype=np.float64)

    def _matrix(self, w) -> np.ndarray:
        """``w`` validated and viewed as the ``(C, p)`` matrix ``W``."""
        arr = np.asarray(w, dtype=np.float64)
        if arr.shape != (self.dim,):
            raise ConfigError(
                f"{self.name}: w must be a vector of shape ({self.dim},) (dim = {self.dim}), "
                f"got shape {arr.shape}"
            )
        return arr.reshape(self.n_classes, self.n_features)

    def loss(self, w) -> float:
        """The full-data mean loss ``F(w) = (1/N) sum_i l(x_i; w) + (reg/2)||w||^2``."""
        W = self._matrix(w)
        total = 0.0
        for lo, hi in self._row_chunks():
            total += float(self._sample_loss(self.X[lo:hi] @ W.T, self.y[lo:hi]).sum())
        return total / self.n_samples + 0.5 * self.reg * float(W.ravel() @ W.ravel())

    def full_gradient(self, w) -> np.ndarray:
        """``grad F(w) = (1/N) sum_i r_i x_i^T + reg * w``, shape ``(dim,)``."""
        W = self._matrix(w)
        G = np.zeros((self.n_classes, self.n_features))
        for lo, hi in self._row_chunks():
            Xc = self.X[lo:hi]
            G += (Xc.T @ self._residual(Xc @ W.T, self.y[lo:hi])).T     # X^T R: dense or sparse X
        return (G / self.n_samples + self.reg * W).ravel()

    def accuracy(self, w) -> float | None:
        """Training accuracy for classifiers, ``None`` for regression."""
        return None

    def scores(self, w, X) -> np.ndarray:
        """The predictions ``z`` (``(rows, C)``) of the model ``w`` on the features ``X`` (dense or sparse)."""
        return X @ self._matrix(w).T

    def heldout(self, w) -> dict[str, float | None] | None:
        """Metrics on the held-out samples (None if there are none): ``test_loss`` (the mean sample loss, no
        penalty), and for classifiers ``test_accuracy``, for binary ones ``test_auc``
        (:mod:`gradcode.workloads.metrics`)."""
        if self.X_test is None:
            return None
        from .metrics import accuracy, roc_auc

        Z = self.scores(w, self.X_test)
        out: dict[str, float | None] = {"test_loss": float(self._sample_loss(Z, self.y_test).mean())}
        if self.task != "regression":
            out["test_accuracy"] = accuracy(Z, self.y_test)
        if self.task == "binary":
            out["test_auc"] = roc_auc(Z[:, 0], self.y_test)
        return out

    def partition_bounds(self, n_parts: int) -> np.ndarray:
        """``(n_parts + 1,)`` offsets: partition ``j`` of ``n_parts`` is rows ``bounds[j]:bounds[j+1]`` of ``X``."""
        n_parts = self._check_n_parts(n_parts)
        cache = self.__dict__.setdefault("_bounds_cache", {})   # also for subclasses that skip _setup
        bounds = cache.get(n_parts)
        if bounds is None:
            q, r = divmod(self.n_samples, n_parts)
            j = np.arange(n_parts + 1, dtype=np.int64)
            bounds = j * q + np.minimum(j, r)
            bounds.setflags(write=False)
            if len(cache) > 64:
                cache.clear()
            cache[n_parts] = bounds
        return bounds

    def partition_sizes(self, n_parts: int) -> np.ndarray:
        """``(n_parts,)`` number of samples in each partition of ``n_parts``."""
        return np.diff(self.partition_bounds(n_parts))

    def batch_indices(self, t: int, parts, n_parts: int, batch: int) -> np.ndarray:
        """``(len(parts), batch)`` row indices (into the permuted ``X``) of each part's mini-batch."""
        t, parts, bounds, _, _ = self._gradient_args(t, parts, n_parts, None)
        return self._batch_indices(t, parts, n_parts, check_int("batch", batch, low=1), bounds)

    def _batch_indices(self, t, parts, n_parts, batch, bounds) -> np.ndarray:
        keys = _stream_keys(self.seed, t, parts, n_parts)
        sizes = bounds[parts + 1] - bounds[parts]
        return _sample_local(keys, sizes, batch) + bounds[parts][:, None]

    def gradients(self, w, t: int, parts, n_parts: int, batch: int | None = None) -> np.ndarray:
        """Partial gradients ``g_j`` of the requested partitions of ``n_parts``, shape ``(len(parts), dim)``.

        ``g_j = (|P_j|/N) (mean_{x in batch_j} grad l(x; w) + reg * w)`` with ``batch_j`` the deterministic
        mini-batch of partition ``j`` at iteration ``t`` (the whole partition if ``batch`` is None); see the
        module docstring. Row ``i`` belongs to ``parts[i]``; repeated parts give identical rows.
        """
        W = self._matrix(w)
        t, parts, bounds, batch, sizes = self._gradient_args(t, parts, n_parts, batch)
        m = len(parts)
        if m == 0:
            return np.zeros((0, self.dim))
        if batch is None:
            G = self._full_batch_sums(W, parts, bounds) * (1.0 / self.n_samples)
        else:
            idx = self._batch_indices(t, parts, n_parts, batch, bounds)
            if scipy.sparse.issparse(self.X):      # CSR rows cannot be a 3-D array: one (m*b, p) block
                flat = idx.reshape(-1)
                Xb = self.X[flat]
                R = self._residual(Xb @ W.T, self.y[flat])                   # (m*b, C)
                G = np.empty((m, self.dim))
                _part_sums(R, Xb, np.arange(0, m * batch + 1, batch), G)
            else:
                Xb = self.X[idx]                                              # (m, b, p)
                R = self._residual(np.matmul(Xb, W.T), self.y[idx])          # (m, b, C)
                if batch == 1:     # an outer product: numpy's stacked matmul is slow over an inner size 1
                    G = np.multiply(R[:, 0, :, None], Xb[:, 0, None, :]).reshape(m, self.dim)    # same bits
                else:
                    G = np.matmul(R.transpose(0, 2, 1), Xb).reshape(m, self.dim)  # (m, C*p)
            G *= (sizes / (batch * self.n_samples))[:, None]
        if self.reg:
            G += (sizes * (self.reg / self.n_samples))[:, None] * W.ravel()[None, :]
        return G

    # --- internals ------------------------------------------------------------------------------------------
    def _gradient_args(self, t, parts, n_parts: int, batch):
        """:meth:`gradients`' arguments checked: ``(t, parts, bounds, batch, sizes)`` with ``sizes[i] = |P_j|`` of
        ``parts[i]`` (float)."""
        t = check_int("t", t, low=0)
        bounds = self.partition_bounds(n_parts)
        parts = self._check_parts(parts, n_parts)
        if batch is not None:
            batch = check_int("batch", batch, low=1)
        return t, parts, bounds, batch, (bounds[parts + 1] - bounds[parts]).astype(np.float64)

    def _full_batch_sums(self, W: np.ndarray, parts: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        """``(m, dim)``: ``sum_{x in P_j} r x^T`` per requested part, a sparse-dense product per chunk."""
        uniq, inverse = np.unique(parts, return_inverse=True)
        out = np.empty((len(uniq), self.dim))
        p = W.shape[1]
        sizes = bounds[uniq + 1] - bounds[uniq]
        offsets = np.cumsum(sizes) - sizes
        # chunks of whole partitions, each gathering at most about 2 * _CHUNK_ELEMENTS elements of X
        chunk_id = offsets // max(1, _CHUNK_ELEMENTS // p)
        edges = np.concatenate([[0], np.flatnonzero(np.diff(chunk_id)) + 1, [len(uniq)]])
        for i, j in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
            lo, hi, sz = bounds[uniq[i:j]], bounds[uniq[i:j] + 1], sizes[i:j]
            indptr = np.concatenate([[0], np.cumsum(sz)])
            if np.array_equal(lo[1:], hi[:-1]):          # a run of adjacent partitions: one slice, no copy
                Xc, yc = self.X[lo[0]:hi[-1]], self.y[lo[0]:hi[-1]]
            else:
                rows = np.arange(indptr[-1]) + np.repeat(lo - indptr[:-1], sz)
                Xc, yc = self.X[rows], self.y[rows]
            _part_sums(self._residual(Xc @ W.T, yc), Xc, indptr, out[i:j])
        return out[inverse.reshape(-1)]

    def _row_chunks(self):
        step = max(1, _CHUNK_ELEMENTS // max(1, self.n_features * self.n_classes))
        for lo in range(0, self.n_samples, step):
            yield lo, min(lo + step, self.n_samples)

    def _check_n_parts(self, n_parts) -> int:
        n_parts = check_int("n_parts", n_parts, low=1)
        if n_parts > self.n_samples:
            raise ConfigError(
                f"{self.name}: cannot split n_samples = {self.n_samples} samples into n_parts = {n_parts} partitions; "
                f"accepted: 1 <= n_parts <= n_samples = {self.n_samples}"
            )
        return n_parts

    def _check_parts(self, parts, n_parts: int) -> np.ndarray:
        if isinstance(parts, range):
            arr = np.arange(parts.start, parts.stop, parts.step, dtype=np.int64)
        else:
            raw = np.asarray(parts)
            if raw.size == 0:
                return np.zeros(0, dtype=np.int64)
            if raw.ndim != 1 or not (np.issubdtype(raw.dtype, np.integer)):
                raise ConfigError(
                    f"{self.name}: parts must be a 1-D sequence of integer partition indices, got {parts!r}"
                )
            arr = raw.astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= n_parts):
            bad = arr[(arr < 0) | (arr >= n_parts)]
            raise ConfigError(
                f"{self.name}: parts out of range: {bad[:5].tolist()}; "
                f"accepted: partition indices 0 <= j < n_parts = {n_parts}"
            )
        return arr

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={val!r}" for key, val in getattr(self, "params", {}).items())
        return f"make_workload({self.name!r}, {args})"


def _rows(X, idx: np.ndarray):
    """Rows ``idx`` of ``X`` as a read-only C-contiguous float64 array, or as a CSR array if ``X`` is sparse."""
    if scipy.sparse.issparse(X):
        out = scipy.sparse.csr_array(X)[idx].astype(np.float64)
        out.sort_indices()
        return out
    out = np.ascontiguousarray(np.asarray(X)[idx], dtype=np.float64)
    out.setflags(write=False)
    return out


def _part_sums(R: np.ndarray, X, indptr: np.ndarray, out: np.ndarray) -> None:
    """``out[j] = sum_{i in segment j} R[i] x_i^T`` (flattened ``(C, p)``) for rows ``indptr[j]:indptr[j+1]`` of
    ``R`` (``(rows, C)``) and ``X`` (``(rows, p)``, dense or sparse): one sparse-times-``X`` product per class, where
    ``S_c[j, i] = R[i, c]`` for row ``i`` in segment ``j``, so ``(S_c X)_j = sum_{i in j} R[i, c] x_i``."""
    rows, C = R.shape
    p = X.shape[1]
    cols = np.arange(rows)
    for c in range(C):
        S = scipy.sparse.csr_array((R[:, c], cols, indptr), shape=(len(indptr) - 1, rows))
        prod = S @ X
        out[:, c * p:(c + 1) * p] = prod.toarray() if scipy.sparse.issparse(prod) else prod
