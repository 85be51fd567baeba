"""The shared algorithm of every gradient code: validation, decoding by method, residuals, caching, combining.

A code is an ``(n, n_parts)`` encoding matrix ``B``. Worker ``i`` holds the partitions in the support of row ``i`` and
sends ``y_i = sum_j B[i, j] g_j``. From the responders ``F`` the master wants weights ``a`` with ``a^T B_F = 1^T``,
so that ``sum_{i in F} a_i y_i = sum_j g_j``. Every decoding reports its residual

    residual = ||B_F^T a - 1||_2 / sqrt(n_parts),

and an exact decode whose residual exceeds ``tol / ERROR_MARGIN`` raises :class:`IllConditionedError` instead of
returning a wrong gradient (floating-point decoding loses precision as ``n`` grows:
``docs/references.md#gradient-codes``). The margin is there because the residual is not the gradient's error: with
ill-conditioned weights (``|a| ~ 1e6``) the relative error of the decoded sum of random partial gradients can be
an order of magnitude above the residual (``benchmarks/probes/probe_decode.py`` measures it), so ``tol`` bounds the
gradient's relative error only if the residual is kept ``ERROR_MARGIN = 16`` times below it.

A concrete code (:class:`Code`) gives its construction and any decoder better than least squares; everything else
lives here. See ``docs/design.md#the-scheme-interface`` for how a scheme uses a code.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import ClassVar, NamedTuple

import numpy as np
import scipy.sparse

from ..errors import (
    ConfigError,
    DecodeFallbackWarning,
    IllConditionedError,
    NotDecodableError,
    check_float,
    check_int,
    check_numeric,
    check_seed,
    check_workers,
)

METHODS = ("auto", "exact", "optimal", "one_step")
ERROR_MARGIN = 16.0   # an exact decode is accepted only if ERROR_MARGIN * residual <= tol (module docstring)


class Decoding(NamedTuple):
    """The result of decoding one responder set.

    ``weights`` is ``(n,)``, zero outside the responders; ``method`` is the method actually used (``auto``
    resolves to ``exact``, to ``optimal`` on an approximate code, or to ``fallback``: least-squares weights because
    an exact code's exact decode failed, with a :class:`~gradcode.errors.DecodeFallbackWarning`); ``residual`` is
    ``||B_F^T a - 1||_2 / sqrt(n_parts)``.
    """

    weights: np.ndarray
    residual: float
    method: str


class Code:
    r"""A gradient code: an ``(n, n_parts)`` encoding matrix ``B`` (workers x data partitions) for ``s`` stragglers
    (the algebra: module docstring).

    A subclass sets ``name``, ``description`` (one line, ending in ``(exact)`` or ``(approximate)``) and ``exact``,
    and implements ``_build(rng) -> B``; it may add ``_check`` (a :class:`ConfigError` for bad parameters) and a
    decoder better than least squares (``_exact_weights``, ``_optimal_weights``, ``_one_step_weights``). A spec
    or :func:`gradcode.make_code` names a user's subclass by import path, ``"package.module:ClassName"``.

    Examples
    --------
    >>> import numpy as np
    >>> from gradcode.codes import Code
    >>> class Pairs(Code):          # worker i holds partitions i and i + 1 (mod n), each with coefficient 1/2
    ...     name, description, exact = "pairs", "each partition on two neighbours (approximate)", False
    ...     def _build(self, rng):
    ...         return (np.eye(self.n) + np.roll(np.eye(self.n), 1, axis=1)) / 2
    >>> code = Pairs(4, 1)
    >>> code.support(3)
    (0, 3)
    >>> np.round(code.decode([0, 2], "optimal"), 9).tolist()      # 2 y_0 + 2 y_2 = g_0 + g_1 + g_2 + g_3
    [2.0, 0.0, 2.0, 0.0]
    >>> code.residual([0, 1], "optimal") > 0                          # partition 3 is missing
    True
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    exact: ClassVar[bool] = True
    # True if some sets of fewer than n - s responders may decode exactly (the coded scheme then looks for the
    # earliest decodable prefix, as the MPI master does by asking after every arrival); False only for a code that
    # never decodes fewer than n - s (its decoder refuses them, or almost surely with random coefficients). The
    # safe default: a code that says False but decodes early makes the simulator wait longer than MPI
    # (tests/test_codes_exact.py checks every registered code).
    early_decoding: ClassVar[bool] = True

    def __init__(self, n: int, s: int, *, seed: int = 0, tol: float = 1e-8, cache_size: int = 4096):
        self.n = check_int("n", n, low=1)
        self.s = check_int("s", s, low=0)
        if self.s >= self.n:
            raise ConfigError(
                f"{self.name}: s must be smaller than n (s = {self.s} stragglers among n = {self.n} workers); "
                f"accepted: 0 <= s <= {self.n - 1}"
            )
        self.tol = check_float("tol", tol, low=0.0, low_open=True)
        self.seed = check_seed(seed)
        self._cache_size = check_int("cache_size", cache_size, low=1)
        self._check()
        self._check_memory()
        B = np.array(self._build(np.random.default_rng(seed)))
        B.setflags(write=False)
        self.B = B
        self.n_parts = B.shape[1]
        self._B_sparse = scipy.sparse.csr_array(B)
        self._supports = tuple(tuple(int(j) for j in np.flatnonzero(B[i])) for i in range(self.n))
        self._cache: OrderedDict = OrderedDict()
        self._warned: set[frozenset] = set()  # responder sets already warned about (fallback)

    # --- construction hooks --------------------------------------------------------------------------------

    def _check_memory(self) -> None:
        """Refuse, before building, an ``n x n`` encoding matrix that cannot fit (16 bytes an entry: complex codes;
        at ``n = 2^70`` the build would otherwise run for ever): the figure and what is available."""
        from ..plumbing.memory import available_bytes, describe_bytes

        need, have = 16 * self.n * self.n, available_bytes()
        if have is not None and need > have[0]:
            raise ConfigError(
                f"{self.name}: the n x n encoding matrix at n = {self.n} workers needs about {describe_bytes(need)}, "
                f"but only {describe_bytes(max(have[0], 0))} is available ({have[1]}); use fewer workers (codes "
                "build n x n matrices; fastest_k, backup, sync and DropCompute do not)")

    def _check(self) -> None:
        """Raise :class:`ConfigError` for parameter combinations the code cannot be built with."""

    def _build(self, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    # --- what a worker holds and sends ---------------------------------------------------------------------
    @property
    def is_complex(self) -> bool:
        """True if ``B`` is complex: every message is then two real vectors (twice the communication)."""
        return np.iscomplexobj(self.B)

    def support(self, i: int) -> tuple[int, ...]:
        """Partitions that worker ``i`` computes."""
        i = check_int("worker", i, low=0, high=self.n - 1)
        return self._supports[i]

    @property
    def load(self) -> float:
        """Mean number of partitions a worker computes."""
        return float(np.mean([len(sup) for sup in self._supports]))

    def encode(self, partials: np.ndarray) -> np.ndarray:
        """``(n_parts, d)`` partial gradients -> ``(n, d)`` messages, row ``i`` = ``sum_j B[i, j] partials[j]``."""
        partials = self._check_partials(partials)
        return self._B_sparse @ partials

    def encode_row(self, i: int, partials: np.ndarray) -> np.ndarray:
        """Worker ``i``'s message from the partial gradients of its support only (``(len(support(i)), d)``)."""
        sup, partials = self._row_partials(i, partials)
        return self.B[i, sup] @ partials

    def _row_partials(self, i: int, partials) -> tuple[list[int], np.ndarray]:
        """Worker ``i``'s support and its partial gradients, checked to be one per partition of the support."""
        sup = self.support(i)
        partials = check_numeric("partials", partials)
        if partials.shape[:1] != (len(sup),):
            raise ConfigError(
                f"worker {i} holds partitions {sup}: expected {len(sup)} partial gradients, got shape "
                f"{partials.shape}"
            )
        return list(sup), partials

    def _check_partials(self, partials) -> np.ndarray:
        partials = check_numeric("partials", partials)
        if partials.ndim not in (1, 2) or partials.shape[0] != self.n_parts:
            raise ConfigError(f"partials must have shape (n_parts, d) = ({self.n_parts}, d), got {partials.shape}")
        if not np.all(np.isfinite(partials)):
            raise ConfigError("partials contain NaN or infinity")
        return partials

    # --- decoding -------------------------------------------------------------------------------------------
    def decode(self, responders, method: str = "auto") -> np.ndarray:
        """``(n,)`` decoding weights, zero outside ``responders``, with ``a @ B ~ 1`` (read-only array)."""
        return self.decoding(responders, method).weights

    def residual(self, responders, method: str = "auto") -> float:
        """``||B_F^T a - 1||_2 / sqrt(n_parts)`` for the weights :meth:`decode` returns."""
        return self.decoding(responders, method).residual

    def is_decodable(self, responders) -> bool:
        """True if an exact decode of ``responders`` succeeds within ``tol`` (residual <= ``tol / ERROR_MARGIN``)."""
        try:
            self.decoding(responders, "exact")
        except NotDecodableError:
            return False
        return True

    def decoding(self, responders, method: str = "auto") -> Decoding:
        """Decode ``responders`` with ``method``; cached per (method, responder set), least recently used first out.

        Methods: ``exact`` (raise :class:`NotDecodableError` if the set cannot give the exact sum), ``optimal``
        (least-squares weights, any set), ``one_step`` (one fixed scaling), ``auto`` (``exact`` where the code is
        exact and the set decodable; on an approximate code ``optimal``; else least squares with ``method =
        "fallback"`` and a :class:`~gradcode.errors.DecodeFallbackWarning`, once per responder set).
        """
        # Fast path: the same responder list seen before costs one dictionary lookup.
        fast_key = self._fast_key(responders, method)
        hit = self._cache.get(fast_key) if fast_key is not None else None
        if hit is not None:
            self._cache.move_to_end(fast_key)
            if isinstance(hit, NotDecodableError):
                # Strip the traceback of earlier raises: re-raising the cached exception object appends
                # frames to it every time (unbounded growth, keeping every raising frame's locals alive).
                raise hit.with_traceback(None)
            return hit
        if method not in METHODS:
            raise ConfigError(f"unknown decoding method {method!r}; accepted: {', '.join(METHODS)}")
        F = self._responders(responders)
        key = self._fast_key(F, method)     # the sorted int64 set's own key
        if key in self._cache:
            result = self._cache[key]
        else:
            try:
                result = self._decode(F, method)
            except NotDecodableError as err:
                result = err
            self._remember(key, result)
        if fast_key is not None and fast_key != key:
            self._remember(fast_key, result)
        if isinstance(result, NotDecodableError):
            raise result.with_traceback(None)
        return result

    @staticmethod
    def _fast_key(responders, method: str):
        """A hashable key for the responders exactly as given (order and type), or None if there is none."""
        if isinstance(responders, np.ndarray):
            if responders.ndim != 1:
                return None
            return (method, responders.dtype.str, responders.tobytes())
        if isinstance(responders, (list, tuple)):
            # 1.0 == 1 and True == 1 hash alike: without this check [0.0, 1.0] would hit the entry of [0, 1] and
            # skip validation. Non-integers get no fast key, so they reach _responders and are rejected there.
            if not all(type(r) is int or isinstance(r, np.integer) for r in responders):
                return None
            try:
                key = (method, tuple(responders))
                hash(key)
            except TypeError:
                return None
            return key
        return None

    def _remember(self, key, value) -> None:
        self._cache[key] = value
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def full_weights(self, F: np.ndarray, a) -> np.ndarray:
        """``(n,)`` read-only decoding weights: ``a`` on the responders ``F``, zero elsewhere."""
        weights = np.zeros(self.n, dtype=np.result_type(self.B.dtype, np.asarray(a).dtype))
        weights[F] = a
        weights.setflags(write=False)
        return weights

    def remember_exact(self, F: np.ndarray, decoding: Decoding) -> None:
        """Keep ``decoding``, an exact decode of the sorted int64 responders ``F`` found elsewhere (a stop rule's
        verdict), as this set's ``exact`` and ``auto`` decode; its residual must be within ``tol``."""
        if not self.exact or decoding.method != "exact" or not self._within_tol(decoding.residual):
            raise ValueError(f"not an exact decode within tol: {decoding.method}, residual {decoding.residual:.3g}")
        for method in ("exact", "auto"):
            self._remember(self._fast_key(F, method), decoding)

    def _responders(self, responders) -> np.ndarray:
        """Validate a responder set (:func:`~gradcode.errors.check_workers`); return it sorted as int64."""
        return np.sort(check_workers(responders, self.n))

    def _decode(self, F: np.ndarray, method: str) -> Decoding:
        if method == "auto":
            if self.exact:
                try:
                    return self._decode(F, "exact")
                except NotDecodableError as err:
                    # not decodable, or ill-conditioned: fall back to the best approximation, and say so
                    return self._fallback(F, err)
            method = "optimal"
        if method == "exact":
            if not self.exact:
                raise NotDecodableError(f"{self.name} is an approximate code: it has no exact decoder; use "
                                        "method='optimal' or 'one_step'")
            a = self._exact_weights(F)
        elif method == "optimal":
            a = self._optimal_weights(F)
        else:
            a = self._one_step_weights(F)
        weights = self.full_weights(F, a)
        r = self._residual_of(F, weights[F])
        if method == "exact" and not self._within_tol(r):
            if len(F) < self.n - self.s:
                raise self._not_decodable(F)
            raise IllConditionedError(
                f"{self.name}(n={self.n}, s={self.s}): exact decode of {len(F)} responders has residual {r:.3g} > "
                f"tol / {ERROR_MARGIN:g} = {self.tol / ERROR_MARGIN:.3g} (ill-conditioned: the gradient's error "
                "can be several times the residual); wait for more workers or decode with method='optimal'",
                residual=r,
            )
        return Decoding(weights, r, method)

    def _fallback(self, F: np.ndarray, why: NotDecodableError) -> Decoding:
        """``auto`` on an exact code whose exact decode failed: least-squares weights, ``method = "fallback"``,
        and a :class:`DecodeFallbackWarning` the first time this code object sees the responder set."""
        dec = self._decode(F, "optimal")
        if self._within_tol(dec.residual):
            return dec  # the code's exact decoder refused a set that least squares decodes within tol: exact enough
        key = frozenset(F.tolist())
        if key not in self._warned:
            if len(self._warned) >= self._cache_size:
                self._warned.pop()  # bounded like the cache: at worst a set is warned about twice
            self._warned.add(key)
            stragglers = np.setdiff1d(np.arange(self.n), F).tolist()
            shown = stragglers if len(stragglers) <= 10 else stragglers[:10] + ["..."]
            reason = "ill-conditioned" if isinstance(why, IllConditionedError) else "not a decodable set"
            warnings.warn(
                f"{self.name}(n={self.n}, s={self.s}): no exact decode from {len(F)} responders ({reason}; "
                f"stragglers {shown}): least-squares weights with residual {dec.residual:.3g} > tol "
                f"{self.tol:.3g} / {ERROR_MARGIN:g}, the gradient is approximate", DecodeFallbackWarning, stacklevel=4)
        return Decoding(dec.weights, dec.residual, "fallback")

    def _within_tol(self, residual: float) -> bool:
        """True if a decode with this residual gives a gradient within ``tol``: ``ERROR_MARGIN * residual <= tol``."""
        return ERROR_MARGIN * residual <= self.tol

    def _residual_of(self, F: np.ndarray, a: np.ndarray) -> float:
        v = self.B[F].T @ a - 1.0
        return float(np.linalg.norm(v) / np.sqrt(self.n_parts))

    def _not_decodable(self, F: np.ndarray) -> NotDecodableError:
        need = self.n - self.s
        missing = tuple(int(i) for i in np.setdiff1d(np.arange(self.n), F)[: need - len(F)])
        return NotDecodableError(
            f"{self.name}(n={self.n}, s={self.s}) needs at least n - s = {need} responders for an exact decode, "
            f"got {len(F)}; for example add workers {list(missing)}",
            needed=need,
            missing=missing,
        )

    # --- decoders (override where a code knows better) ------------------------------------------------------
    def _exact_weights(self, F: np.ndarray) -> np.ndarray:
        """Solve ``B_F^T a = 1`` by least squares; the caller checks the residual."""
        if len(F) == 0:
            raise self._not_decodable(F)
        return self._optimal_weights(F)

    def _optimal_weights(self, F: np.ndarray) -> np.ndarray:
        """``argmin_a ||B_F^T a - 1||_2`` (minimum-norm solution)."""
        if len(F) == 0:
            return np.zeros(0)
        ones = np.ones(self.n_parts, dtype=self.B.dtype)
        a, *_ = np.linalg.lstsq(self.B[F].T, ones, rcond=None)
        return a

    def _one_step_weights(self, F: np.ndarray) -> np.ndarray:
        """One fixed scaling ``c`` for every responder, chosen so the mean coefficient of ``B_F^T a`` is 1."""
        total = self.B[F].sum()
        c = self.n_parts / total if len(F) and total != 0 else 0.0
        return np.full(len(F), c)

    # --- combining ------------------------------------------------------------------------------------------
    def combine(self, messages: np.ndarray, responders, method: str = "auto") -> np.ndarray:
        """``(len(responders), d)`` messages -> ``(d,)`` estimate of ``partials.sum(axis=0)``.

        Row ``r`` of ``messages`` is the message of worker ``responders[r]``.
        """
        weights = self.decode(responders, method)
        messages = self._one_row_each(check_numeric("messages", messages), responders)
        w = weights[np.asarray(responders, dtype=np.int64)]
        # A non-finite message poisons the output (even with weight 0, 0 * inf = nan), so checking the (d,) result
        # finds every bad message at a fraction of the cost of scanning all of them. The error below reports it;
        # numpy's "invalid value" warning would only be noise.
        with np.errstate(invalid="ignore", over="ignore"):
            out = w @ messages
        if not np.all(np.isfinite(out)):
            bad = [int(r) for r, m in zip(responders, messages, strict=True) if not np.all(np.isfinite(m))]
            raise ConfigError(f"non-finite values (NaN or infinity) in the messages of workers {bad}")
        return out.real if np.iscomplexobj(out) else out

    @staticmethod
    def _one_row_each(messages: np.ndarray, responders) -> np.ndarray:
        if messages.ndim not in (1, 2) or messages.shape[0] != len(responders):
            raise ConfigError(f"messages must have one row per responder: expected shape ({len(responders)}, d), "
                              f"got {messages.shape}")
        return messages

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, s={self.s}, n_parts={self.n_parts}, seed={self.seed})"
