"""Workers that die: a spec's ``[faults]`` table, read by both clusters (``docs/guide.md#workers-that-die``).

A dead worker is a straggler that never answers again: from the first plan ``t >= at`` it takes up it sends
nothing, so the iteration ends without it while the scheme's stop rule can still hold, and the run ends with an
error naming the dead the first iteration it cannot. ::

    [faults]
    die = {worker = 3, at = 10}                   # or a list: [{worker = 3, at = 10}, {worker = 5, at = 20}]
    die_random = {count = 2, seed = 7}            # 2 distinct workers, each at a uniform iteration in 0..iterations-1

The simulator gives a dead worker an infinite delay from ``at`` on; the MPI cluster kills the worker's process
(``SIGKILL``) when it takes up its first plan ``t >= at``, and the master learns of the death as it would of any
other (``mpi_runtime/peers.py``), so ``gradcode simulate`` predicts the run ``gradcode run`` makes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ConfigError, check_int

FAULT_KEYS = {"die": "{worker = i, at = t} or a list of them: worker i dies at its first plan t >= at",
              "die_random": "{count = m, seed = s}: m distinct workers die, each at a uniform iteration"}


def check_die(key: str, value) -> tuple[tuple[int, int], ...]:
    """``die`` as ``((worker, at), ...)``: a table or a list of tables with the integer keys ``worker`` and ``at``
    (>= 0), each worker at most once."""
    items = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for item in items:
        if isinstance(item, tuple) and len(item) == 2:     # already checked: (worker, at)
            item = {"worker": item[0], "at": item[1]}
        if not isinstance(item, dict) or set(item) != {"worker", "at"}:
            raise ConfigError(f"{key} must be {{worker = i, at = t}} or a list of them, got {value!r}")
        out.append((check_int(f"{key} worker", item["worker"], low=0), check_int(f"{key} at", item["at"], low=0)))
    workers = [w for w, _ in out]
    if len(set(workers)) < len(workers):
        raise ConfigError(f"{key}: a worker dies once; {sorted(w for w in set(workers) if workers.count(w) > 1)} "
                          "given twice")
    return tuple(sorted(out))


def check_die_random(key: str, value) -> tuple[int, int]:
    """``die_random`` as ``(count, seed)``: a table with the integer keys ``count`` (>= 1) and ``seed`` (>= 0)."""
    if isinstance(value, tuple) and len(value) == 2:     # already checked: (count, seed)
        value = {"count": value[0], "seed": value[1]}
    if not isinstance(value, dict) or set(value) != {"count", "seed"}:
        raise ConfigError(f"{key} must be {{count = m, seed = s}} (m workers die at random iterations, drawn with "
                          f"seed s), got {value!r}")
    return check_int(f"{key} count", value["count"], low=1), check_int(f"{key} seed", value["seed"], low=0)


def planned_deaths(options, n: int) -> dict[int, int]:
    """``{worker: at}`` of the run ``options`` (:class:`gradcode.spec.RunOptions`) with ``n`` workers: ``die`` and
    ``die_random`` (``count`` workers drawn without replacement among those ``die`` leaves alive, each ``at``
    uniform in ``0..iterations-1``, from ``numpy.random.default_rng(seed)``). A :class:`ConfigError` for a worker
    outside ``0..n-1``, an ``at`` outside the run, or more deaths than workers."""
    die = dict(options.die or ())
    for worker, at in die.items():
        if worker >= n:
            raise ConfigError(f"[faults] die: worker {worker} is not one of the {n} workers (0..{n - 1})")
        if at >= options.iterations:
            raise ConfigError(f"[faults] die: at = {at} is not an iteration of this run (0..{options.iterations - 1})")
    if options.die_random is not None:
        count, seed = options.die_random
        alive = np.setdiff1d(np.arange(n), list(die))
        if count > len(alive):
            raise ConfigError(f"[faults] die_random: count = {count}, but only {len(alive)} of the {n} workers are "
                              "left alive by die")
        rng = np.random.default_rng(seed)
        workers = rng.choice(alive, size=count, replace=False)
        ats = rng.integers(0, options.iterations, size=count)
        die.update(zip(workers.tolist(), ats.tolist(), strict=True))
    return die


def dead_field(dead: dict[int, int]) -> dict[str, Any]:
    """A record's ``dead``: the workers dead by its iteration, when there are any (no field otherwise)."""
    return {"dead": sorted(dead)} if dead else {}


def deaths_summary(dead: dict[int, int], notes: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """A summary's ``deaths``: ``[{worker, at, ...}]`` (``at`` the iteration it was found dead in; ``notes`` what
    the cluster knows more: rank, host, why), when there are any."""
    notes = notes or {}
    if not dead:
        return {}
    return {"deaths": [{"worker": w, "at": t, **notes.get(w, {})} for w, t in sorted(dead.items())]}


def name_dead(worker: int, at: int, note: dict[str, Any] | None = None) -> str:
    """``'worker 3 (rank 4, host h) at iteration 10: its process is gone'``, from what the cluster knows."""
    note = note or {}
    where = ", ".join(f"{key} {note[key]}" for key in ("rank", "host") if key in note)
    return f"worker {worker}{f' ({where})' if where else ''} at iteration {at}" + (
        f": {note['why']}" if note.get("why") else "")


def unmet_text(scheme, t: int, dead: dict[int, int], notes: dict[int, dict[str, Any]] | None = None) -> str:
    """The error of a run whose stop rule can no longer hold: the iteration, the scheme, the dead (:func:`name_dead`
    with the cluster's ``notes``)."""
    return (f"iteration {t}: the stop rule of {scheme.name} can no longer hold with {scheme.n - len(dead)} of "
            f"{scheme.n} workers alive; dead: {_names(dead, notes)}")


def all_reduce_text(scheme, t: int, dead: dict[int, int]) -> str:
    """The error of a decentralized run (an All-Reduce a step) that lost a worker."""
    return (f"iteration {t}: the All-Reduce of {scheme.name} needs every worker; dead: {_names(dead)} (Open MPI with "
            "ULFM could shrink its communicator and go on with the survivors; the MPI cluster ends here too)")


def _names(dead: dict[int, int], notes: dict[int, dict[str, Any]] | None = None) -> str:
    notes = notes or {}
    return "; ".join(name_dead(w, at, notes.get(w)) for w, at in sorted(dead.items()))
