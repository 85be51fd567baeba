"""The loss a relative target is measured from, computed once by a full-batch solver and cached per workload.

- **Convex workloads** (logistic, softmax regression): ``optimal_loss = F(w*)`` with ``w*`` from L-BFGS
  (:func:`scipy.optimize.minimize`) on the full-batch loss ``F`` and its gradient, started at ``init_params``.
  ``F`` is strongly convex (``reg > 0``), so L-BFGS converges to the one minimum; the solver's residual
  ``||grad F(w*)||`` is kept as ``optimal_residual`` (how far from stationary the reported optimum is).
- **The mlp** (not convex): ``reference_loss``, the loss after a long full-batch L-BFGS run from ``init_params``
  (:data:`REFERENCE_ITERATIONS` iterations). It is a *reference*, not an optimum: a different start or a longer
  run may go lower, and a scheme's run may end below it.

A solution is cached by the workload's class and parameters when its data are generated from them (no ``data``
file, which may change on disk): in this process, and as a small JSON file under ``$XDG_CACHE_HOME/gradcode/optimum``
(default ``~/.cache``; ``GRADCODE_CACHE=0`` turns the file cache off), so another process (every MPI rank, the next
command) reads it instead of solving again (the softmax digits take seconds, the mlp's reference tens of seconds).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

REFERENCE_ITERATIONS = 500     # the mlp's reference run (L-BFGS steps)
_CACHE: dict[str, Solution] = {}
_SOLVER = "L-BFGS-B gtol 1e-7 v1"   # part of every cache key: a changed solver never reads an old file


@dataclass(frozen=True)
class Solution:
    """``loss = F(w)`` at the solver's last point ``w``; ``residual = ||grad F(w)||``; ``iterations`` it took."""

    loss: float
    residual: float
    iterations: int


def full_batch_minimum(workload, *, max_iter: int = 10_000) -> Solution:
    """L-BFGS on ``F`` from ``workload.init_params()`` until no gradient component exceeds 1e-7 (or ``max_iter``
    steps): for ``F`` ``reg``-strongly convex, a loss within ``||g||^2 / (2 reg)`` of the optimum. Cached per
    workload spec (see the module docstring)."""
    import scipy.optimize  # slow to import: only when a target needs it

    key = _key(workload, max_iter)
    if key is not None and key in _CACHE:
        return _CACHE[key]
    stored = _read(key)
    if stored is not None:
        _CACHE[key] = stored
        return stored
    res = scipy.optimize.minimize(lambda w: (workload.loss(w), workload.full_gradient(w)),
                                  np.asarray(workload.init_params(), dtype=float), jac=True, method="L-BFGS-B",
                                  options={"maxiter": max_iter, "gtol": 1e-7, "ftol": 1e-15, "maxcor": 20})
    solution = Solution(float(workload.loss(res.x)), float(np.linalg.norm(workload.full_gradient(res.x))),
                        int(res.nit))
    if key is not None:
        _CACHE[key] = solution
        _write(key, solution)
    return solution


def _file(key: str) -> Path | None:
    if os.environ.get("GRADCODE_CACHE") == "0":
        return None
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "gradcode" / "optimum" / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")


def _read(key: str | None) -> Solution | None:
    path = None if key is None else _file(key)
    try:
        entry = json.loads(path.read_text()) if path is not None and path.is_file() else None
        return Solution(**entry["solution"]) if entry and entry.get("key") == key else None
    except (OSError, ValueError, TypeError, KeyError):
        return None      # unreadable or from another version: solve again


def _write(key: str, solution: Solution) -> None:
    path = _file(key)
    if path is None:
        return
    try:              # written whole then renamed: a rank reading at the same time sees all of it or nothing
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "solution": asdict(solution)}))
        tmp.replace(path)
    except OSError:
        pass              # a read-only home: the in-process cache still holds it


def _key(workload, max_iter: int) -> str | None:
    params = getattr(workload, "params", None)
    if not isinstance(params, dict) or params.get("data") is not None:
        return None
    try:
        return json.dumps([_SOLVER, type(workload).__qualname__, params, max_iter], sort_keys=True)
    except (TypeError, ValueError):
        return None


class SolvedOptimum:
    """Mixin of a convex workload: ``optimal_loss`` and ``optimal_residual`` from :func:`full_batch_minimum`,
    computed the first time they are asked for."""

    @property
    def optimal_loss(self) -> float:
        return full_batch_minimum(self).loss

    @property
    def optimal_residual(self) -> float:
        """``||grad F||`` at the point whose loss is ``optimal_loss``."""
        return full_batch_minimum(self).residual


def reference_of(workload) -> tuple[float, str] | None:
    """``(F*, what it is)``: the workload's ``optimal_loss``, else its ``reference_loss`` (the mlp), else None."""
    optimum = getattr(workload, "optimal_loss", None)
    if optimum is not None:
        return float(optimum), "optimal loss"
    reference = getattr(workload, "reference_loss", None)
    return None if reference is None else (float(reference), "reference loss (a long full-batch run, not an optimum)")


def resolve_target(target, workload):
    """``[run] target_loss`` as a number: a number as is; ``{relative = G}`` is ``F* + G (F(w0) - F*)`` with ``F*``
    from :func:`reference_of` and ``w0 = init_params()``; a :class:`ConfigError` if the workload has no ``F*``."""
    if not isinstance(target, dict):
        return target
    from ..errors import ConfigError

    found = None if workload is None else reference_of(workload)
    if found is None:
        raise ConfigError(f"[run] target_loss = {target!r}: a relative target needs a workload that knows its optimal "
                          "or reference loss (least_squares, logistic, softmax_digits, mlp); give a number instead")
    optimum, start = found[0], float(workload.loss(workload.init_params()))
    return optimum + target["relative"] * (start - optimum)
