"""Workloads: the models that distributed gradient descent trains, with their data, partitions and gradients.

A workload holds ``N`` samples (``n_samples``; ``N`` means the number of samples throughout the package) and a loss
``F(w) = (1/N) sum_i l(x_i; w) + R(w)`` over a parameter vector ``w`` of length ``d``; ``test_fraction`` more are
held out (:meth:`Workload.heldout`), and ``data = "path"`` replaces the built-in data by a file
(:mod:`gradcode.datafile`; ``scipy.sparse`` CSR features are kept sparse). Every model but :class:`MLP` is linear in
its features: the predictions of a sample are ``z = W x`` with ``W`` the parameter vector viewed as a ``(C, p)``
matrix (``C = 1`` for least squares and logistic regression, ``C = 10`` for the softmax workload), so the gradient
of one sample is the outer product ``r x^T`` of a residual ``r = dl/dz`` and the features.

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
requested partitions at once (creating one :class:`numpy.random.Generator` per partition would cost about
13 us each, more than the whole gradient computation of a typical call). A subset without replacement is drawn
uniformly by Floyd's algorithm when ``b*b <= |P_j|`` and by the ``b`` smallest of ``|P_j|`` random keys
otherwise; both are uniform over the ``b``-subsets, and which one is used depends only on ``(|P_j|, b)``.
``batch=None`` means the whole partition (deterministic). The mini-batch partial gradient is an unbiased
estimate of the full-batch one.

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

from typing import ClassVar

import numpy as np
import scipy.sparse

from .errors import ConfigError, check_float, check_int, check_seed

# Largest temporary (in float64 elements) the full-batch path materialises at once.
_CHUNK_ELEMENTS = 1 << 22

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer, elementwise on a uint64 array (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _stream_keys(seed: int, t: int, parts: np.ndarray, n_parts: int) -> np.ndarray:
    """One 64-bit key per partition, a hash of ``(seed, t, j, n_parts)``."""
    x = np.full(parts.shape, seed & _MASK64, dtype=np.uint64)
    for v in (np.uint64(t & _MASK64), parts.astype(np.uint64), np.uint64(n_parts & _MASK64)):
        x = _mix(x + _GAMMA) ^ v
    return _mix(x + _GAMMA)


def _draws(keys: np.ndarray, count: int) -> np.ndarray:
    """``(len(keys), count)`` uint64 draws: the splitmix64 stream of each key."""
    ctr = (np.arange(1, count + 1, dtype=np.uint64) * _GAMMA)[None, :]
    return _mix(keys[:, None] + ctr)


def _uniform(bits: np.ndarray) -> np.ndarray:
    """Uniform doubles in [0, 1) from the top 53 bits."""
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def _sample_local(keys: np.ndarray, sizes: np.ndarray, b: int) -> np.ndarray:
    """``(m, b)`` local indices: row ``i`` a batch of ``b`` from ``range(sizes[i])``, drawn from ``keys[i]``.
    """
    m = len(keys)
    out = np.empty((m, b), dtype=np.int64)
    if m == 0:
        return out
    replace = sizes < b
    floyd = ~replace & (b * b <= sizes)
    bykeys = ~replace & ~floyd
    if replace.any() or floyd.any():
        rows = np.flatnonzero(replace | floyd)
        u = _uniform(_draws(keys[rows], b))
        n = sizes[rows]
        rep = replace[rows]
        # with replacement: b independent uniform indices
        if rep.any():
            out[rows[rep]] = np.minimum((u[rep] * n[rep, None]).astype(np.int64), n[rep, None] - 1)
        # Floyd's algorithm: for i = n-b .. n-1 draw r in [0, i]; take i instead if r is already taken.
        fl = ~rep
        if fl.any():
            uf, nf = u[fl], n[fl]
            chosen = np.empty((len(nf), b), dtype=np.int64)
            for step in range(b):
                i = nf - b + step
                r = np.minimum((uf[:, step] * (i + 1)).astype(np.int64), i)
                if step:
                    r = np.where((chosen[:, :step] == r[:, None]).any(axis=1), i, r)
                chosen[:, step] = r
            out[rows[fl]] = chosen
    if bykeys.any():
        rows = np.flatnonzero(bykeys)
        n = sizes[rows]
        width = int(n.max())
        bits = _draws(keys[rows], width)
        bits[np.arange(width)[None, :] >= n[:, None]] = np.uint64(_MASK64)   # padding never wins
        order = np.argpartition(bits, b - 1, axis=1) if b < width else np.argsort(bits, axis=1)
        out[rows] = order[:, :b]
    return out


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

    def _gram_max_eig(self) -> float:
        """Largest eigenvalue of ``X^T X / N`` (Lipschitz constants): dense if small, else Lanczos."""
        X, n = self.X, self.n_samples
        if min(X.shape) <= 100 and not _sparse(X):
            M = X.T @ X if X.shape[1] <= X.shape[0] else X @ X.T
            return float(np.linalg.eigvalsh(M / n)[-1])
        import scipy.sparse.linalg  # lazily: keeps ``import gradcode`` fast

        op = scipy.sparse.linalg.LinearOperator((X.shape[1],) * 2, matvec=lambda v: X.T @ (X @ v) / n,
                                                dtype=np.float64)
        v0 = np.ones(X.shape[1])       # deterministic start
        return float(scipy.sparse.linalg.eigsh(op, k=1, which="LA", v0=v0, return_eigenvectors=False)[0])

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
        penalty), and for classifiers ``test_accuracy``, for binary ones ``test_auc`` (:mod:`gradcode.metrics`)."""
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
        t = check_int("t", t, low=0)
        bounds = self.partition_bounds(n_parts)
        parts = self._check_parts(parts, n_parts)
        batch = check_int("batch", batch, low=1)
        return self._batch_indices(t, parts, n_parts, batch, bounds)

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
                if batch == 1:     # an outer product: numpy's stacked matmul over an inner size 1 is ~5x slower
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
        if _sparse(self.X):
            return                 # no optimum computed for sparse data (optimal_loss stays None)
        import scipy.linalg

        # minimum-norm least-squares solution by pivoted QR (several times faster than the SVD at d = 1000)
        self.w_opt = scipy.linalg.lstsq(self.X, self.y, lapack_driver="gelsy", check_finite=False)[0]
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
        X = scipy.sparse.hstack([X, ones], format="csr") if _sparse(X) else np.hstack([X, ones])
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

    Cost (measured on this 2-core machine under load, one thread): a full gradient of the 1,438 training samples with
    ``hidden = [32]`` takes about 2.4 ms, the 8 partitions of 8 workers about 0.6 ms each; ``hidden = [256, 256]``
    (``d = 85,002``) about 50 ms, about 6 ms a partition of 8: choose the sizes to make compute matter.

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
            gW = (a.T @ delta).T if _sparse(a) else delta.T @ a           # sparse input: X^T delta
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
    from .memory import available_bytes, describe_bytes

    need, have = 3 * 8 * n_samples * (dim + 1), available_bytes()
    if have is not None and need > have[0]:
        raise ConfigError(f"{who}: n_samples x dim = {n_samples} x {dim} needs about {describe_bytes(need)}, but only "
                          f"{describe_bytes(max(have[0], 0))} is available ({have[1]}); use fewer samples or a "
                          "smaller dim")


def _user_data(who: str, path, task: str):
    """``(X, y)`` of a data file, its labels checked for ``task`` (:mod:`gradcode.datafile`)."""
    from .datafile import load_data

    try:
        return load_data(path, task)
    except ConfigError as err:
        raise ConfigError(f"{who}: data: {err}") from None


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


def _sparse(X) -> bool:
    return scipy.sparse.issparse(X)


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


def _expit(z: np.ndarray) -> np.ndarray:
    """The logistic sigmoid ``1/(1 + exp(-z))`` without overflow."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def list_workloads() -> dict[str, str]:
    """Names of the workloads with a one-line description of each."""
    from .registry import WORKLOADS

    return WORKLOADS.list()


def make_workload(name, **params) -> Workload:
    """Build the workload ``name`` (a name, an import path or a ``{"name": ..., **params}`` dict; keyword ``params``
    override its entries); a built :class:`Workload` is returned as is.

        >>> make_workload({"name": "least_squares", "dim": 3}, n_samples=50).dim
        3
    """
    from .registry import WORKLOADS

    return WORKLOADS.build(name, **params)


__all__ = ["MLP", "LeastSquares", "Logistic", "SoftmaxDigits", "Workload", "list_workloads", "make_workload"]
