"""Experiment specs: TOML files that describe a run, validated as a whole before anything runs.

    [cluster]
    workers = 16                 # n
    late_workers = "finish"      # or "abandon", "between_chunks"

    [workload]
    name = "least_squares"       # every other key is a parameter of the workload
    dim = 20

    [delay]
    name = "shifted_exponential"
    mu = 0.5

    [scheme]                     # or several [[schemes]] tables, for a comparison
    name = "coded"
    code = "cyclic_repetition"
    s = 3

    [run]
    iterations = 200
    seed = 0                     # or seeds = [0, 1, 2] (comparisons)

A comparison (``gradcode compare``) may sweep delay models with several ``[[delays]]`` tables instead of ``[delay]``,
each with a ``label``; ``[cluster] kind`` is ``"sim"``, ``"mpi"`` or ``"both"``; any scheme or delay table may carry a
``label`` (used in reports, never passed to the factory).

Inside each table ``name`` selects the factory entry (``make_workload``, ``make_delay``, ``make_scheme``) and the
other keys are its parameters, so anything the Python API accepts a spec accepts too (``gradcode describe NAME``
lists them). ``name`` may also be ``"package.module:ClassName"``, a user's subclass of the public base class
(:class:`gradcode.Workload`, :class:`gradcode.DelayModel`, :class:`gradcode.Scheme`, :class:`gradcode.Code`), in
nested tables too (a delay model's ``base``, a coded scheme's ``code``); the module is looked up on ``sys.path``,
then in the spec's folder and the working directory. Every error names the table and the key, and is raised when
the spec is loaded, before anything runs.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError, check_int

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TABLES = ("cluster", "workload", "delay", "delays", "scheme", "schemes", "run", "experiment")
# every [run] key: (what it means, its number rule (kind, lower bound, bound open?) checked at load, or None)
_RUN = {
    "iterations": ("number of iterations (int >= 1)", ("int", 1, False)),
    "seed": ("seed of the delays, the data and the codes (int >= 0)", ("int", 0, False)),
    "seeds": ("a list of seeds (comparisons)", None),
    "lr": ("step size (default: the workload's)", ("float", 0.0, False)),
    "target_loss": ("stop when the loss reaches this", ("float", None, False)),
    "time_budget": ("stop when this much (virtual) time is spent", ("float", 0.0, True)),
    "loss_every": ("evaluate the full loss every this many iterations", ("int", 1, False)),
    "time_scale": ("MPI: wall-clock seconds per unit of model time", ("float", 0.0, True)),
    "grace": ("MPI: seconds to wait for an answer (a worker, the master, a collective) before naming the rank",
              ("float", 0.0, True)),
    "startup_timeout": ("MPI: seconds each start-up step may take (imports, building, set-up) before naming a rank",
                        ("float", 0.0, True)),
    "inject": ("MPI: 'wait' (default: wait out the emulated delay from the iteration's start) or 'add' (sleep it "
               "after the real compute)", None),
    "batch": ("samples per partition mini-batch (default: whole partition)", ("int", 1, False)),
    "optimizer": ("the update: 'sgd' (default), 'momentum' or 'nesterov' (gradcode.optim)", None),
    "momentum": ("momentum mu of 'momentum' and 'nesterov', in [0, 1) (default 0.9)", ("float", 0.0, False)),
    "eval_every": ("held-out metrics every this many iterations and the last (default: loss_every)",
                   ("int", 1, False)),
    "target_accuracy": ("report the time to this held-out accuracy (time_to_target_accuracy)",
                        ("float", 0.0, False)),
}
INJECT_MODES = ("wait", "add")   # how an MPI worker injects its emulated delay ([run] inject)
TRAINING_KEYS = ("optimizer", "momentum", "eval_every", "target_accuracy")   # passed on to the cluster's Driver
RUN_KEYS = {key: meaning for key, (meaning, _) in _RUN.items()}
RUN_NUMBERS = {key: rule for key, (_, rule) in _RUN.items() if rule is not None}
CLUSTER_KEYS = {"workers": "number of workers n (int >= 1)", "late_workers": "'finish', 'abandon' or 'between_chunks'",
                "kind": "'sim', 'mpi' or 'both'"}
CLUSTER_KINDS = ("sim", "mpi", "both")
EXPERIMENT_KEYS = {"name": "a short name of the experiment", "description": "free text"}


@dataclass
class Spec:
    """A validated spec: plain dicts, ready for the factories."""

    workers: int
    workload: dict[str, Any] | None
    delay: dict[str, Any]
    schemes: list[dict[str, Any]]
    run: dict[str, Any] = field(default_factory=dict)
    cluster: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    delays: list[dict[str, Any]] = field(default_factory=list)   # every delay model, ``label`` included


def load_spec(source: str | Path | dict, overrides: dict[str, Any] | None = None) -> Spec:
    """Read a TOML file (or take a dict of the same shape), apply ``overrides`` (:func:`with_run_overrides`), check
    it, and return a :class:`Spec`."""
    return load_spec_built(source, overrides)[0]


def load_spec_built(source: str | Path | dict, overrides: dict[str, Any] | None = None) -> tuple[Spec, Any]:
    """:func:`load_spec`, and the workload that checking the spec built (None without ``[workload]``): a caller that
    runs the spec once passes it to :func:`build` instead of building it again (an MPI rank: a large workload
    takes seconds). It is fresh: checking reads it but does not use it."""
    from .plumbing.registry import add_user_dirs

    if isinstance(source, dict):
        raw = drop_none(source)
        add_user_dirs(Path.cwd())   # user modules named by import path
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"spec file {str(path)!r} does not exist")
        raw = _read_toml(path)
        add_user_dirs(path.parent, Path.cwd())
    return _check_spec(with_run_overrides(raw, **(overrides or {})))


def drop_none(raw):
    """``raw`` without the table entries whose value is None, at every depth: a spec given as a dict (e.g. from
    :meth:`gradcode.delays.DelayModel.spec`, which lists unset parameters as None) means "the default" by None,
    which TOML cannot write (a run's ``spec.toml``).

    >>> drop_none({"delay": {"name": "persistent", "workers": None}, "run": {"seeds": [0, 1]}})
    {'delay': {'name': 'persistent'}, 'run': {'seeds': [0, 1]}}
    """
    if isinstance(raw, dict):
        return {k: drop_none(v) for k, v in raw.items() if v is not None}
    if isinstance(raw, list):
        return [drop_none(v) for v in raw]
    return raw


def with_run_overrides(raw: dict[str, Any], iterations: int | None = None,
                       seeds: list[int] | None = None) -> dict[str, Any]:
    """``raw`` with the command line's ``--iterations`` and ``--seeds`` in its ``[run]`` table (``None``: keep the
    spec's). ``seeds`` replaces both ``seed`` and ``seeds``; the values are checked with the rest of ``[run]``.

    >>> with_run_overrides({"run": {"iterations": 100, "seed": 3}}, iterations=5, seeds=[0, 1])["run"]
    {'iterations': 5, 'seeds': [0, 1]}
    """
    if iterations is None and seeds is None:
        return raw
    run = dict(_table(raw, "run"))
    if iterations is not None:
        run["iterations"] = iterations
    if seeds is not None:
        run.pop("seed", None)
        run["seeds"] = list(seeds)
    return {**raw, "run": run}


def _read_toml(path: Path) -> dict[str, Any]:
    """The TOML table of a spec file; a clear error for a file that cannot be read, is not UTF-8 text (a binary
    file, another encoding) or is not TOML."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"spec file {str(path)!r} cannot be read: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"spec file {str(path)!r} is not a UTF-8 text file (byte {err.start} is not UTF-8); "
                          "a spec is a TOML file in UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None


def check_spec(raw: dict[str, Any]) -> Spec:
    """The :class:`Spec` of a spec's tables, every table checked (every object is built once)."""
    return _check_spec(raw)[0]


def _check_spec(raw: dict[str, Any]) -> tuple[Spec, Any]:
    """``(spec, workload)``: :func:`check_spec` and the workload it built."""
    if "sweep" in raw:
        raise ConfigError("spec: a [sweep] table makes this spec a grid of comparisons: run it with "
                          "`gradcode sweep SPEC --out DIR` (or remove [sweep] to run one comparison)")
    unknown = [key for key in raw if key not in TABLES]
    if unknown:
        raise ConfigError(f"spec: unknown table(s) {unknown}; accepted: {', '.join(TABLES)}")
    cluster = dict(_table(raw, "cluster"))
    _check_keys(cluster, CLUSTER_KEYS, "[cluster]")
    if "workers" not in cluster:
        raise ConfigError("[cluster] workers is missing: the number of workers n (int >= 1)")
    cluster["workers"] = check_int("[cluster] workers (n)", cluster["workers"], low=1)
    if cluster.get("kind", "sim") not in CLUSTER_KINDS:
        raise ConfigError(f"[cluster] kind must be one of {', '.join(CLUSTER_KINDS)}, got {cluster['kind']!r}")
    experiment = _table(raw, "experiment")
    _check_keys(experiment, EXPERIMENT_KEYS, "[experiment]")
    for key in EXPERIMENT_KEYS:
        if key in experiment and not isinstance(experiment[key], str):
            raise ConfigError(f"[experiment] {key} must be a string ({EXPERIMENT_KEYS[key]}), got "
                              f"{experiment[key]!r}")
    run = dict(_table(raw, "run"))
    _check_keys(run, RUN_KEYS, "[run]")
    check_run(run)
    if "scheme" in raw and "schemes" in raw:
        raise ConfigError("spec: give either [scheme] or [[schemes]], not both")
    if "scheme" in raw:
        schemes = [dict(_table(raw, "scheme"))]
    elif "schemes" in raw:
        if (not isinstance(raw["schemes"], list) or not raw["schemes"]
                or not all(isinstance(s, dict) for s in raw["schemes"])):
            raise ConfigError("[[schemes]] must be a non-empty array of tables, each with name = a scheme; got "
                              f"{raw['schemes']!r}")
        schemes = [dict(s) for s in raw["schemes"]]
    else:
        raise ConfigError("spec: no scheme; add a [scheme] table (or [[schemes]]) with name = one of "
                          + ", ".join(_scheme_names()))
    delays = _delays(raw)
    spec = Spec(workers=cluster["workers"], workload=dict(raw["workload"]) if "workload" in raw else None,
                delay=_unlabelled(delays[0]), schemes=schemes, run=run, cluster=cluster, raw=raw, delays=delays)
    workload = build(spec)[2]   # construct everything once: every error is raised now, before any work
    _check_heldout(spec.run, workload)
    _check_other_delays(spec)
    return spec, workload


def _check_heldout(run: dict, workload) -> None:
    """``target_accuracy`` and ``eval_every`` need held-out samples: say so rather than never report them."""
    asked = [k for k in ("target_accuracy", "eval_every") if k in run]
    if asked and getattr(workload, "X_test", None) is None:
        raise ConfigError(f"[run] {', '.join(asked)}: the workload holds out no samples; set [workload] "
                          "test_fraction (e.g. 0.2; the mlp holds out 0.2 by default)")


def _delays(raw: dict) -> list[dict]:
    """The delay tables: ``[delay]`` alone, or a non-empty ``[[delays]]`` array (a sweep)."""
    if "delay" in raw and "delays" in raw:
        raise ConfigError("spec: give either [delay] or [[delays]], not both")
    if "delays" in raw:
        if not isinstance(raw["delays"], list) or not raw["delays"] or not all(
                isinstance(d, dict) for d in raw["delays"]):
            raise ConfigError("[[delays]] must be a non-empty array of tables, each with name = a delay model")
        return [dict(d) for d in raw["delays"]]
    if "delay" not in raw:
        raise ConfigError("spec: no [delay] table; add one (or [[delays]] tables) with name = a delay model")
    return [dict(_table(raw, "delay"))]


def _unlabelled(table: dict) -> dict:
    return {k: v for k, v in table.items() if k != "label"}


def _check_other_delays(spec: Spec) -> None:
    from .delays import make_delay

    for idx, table in enumerate(spec.delays[1:], start=1):
        try:
            make_delay(_unlabelled(table)).check_workers(spec.workers)
        except ConfigError as err:
            raise ConfigError(f"[[delays]] {idx}: {err}") from None


def check_run(run: dict) -> None:
    """Every [run] key's type and range (``docs``: :data:`RUN_KEYS`), so that nothing fails mid-run."""
    from .errors import check_float, check_seed

    try:
        for key, (kind, low, low_open) in RUN_NUMBERS.items():
            if key not in run:
                continue
            if key == "seed":
                check_seed(run[key])
            elif kind == "int":
                check_int(key, run[key], low=low)
            else:
                check_float(key, run[key], low=low, low_open=low_open)
        if "optimizer" in run or "momentum" in run:
            from .optim import Optimizer

            Optimizer(run.get("optimizer", "sgd"), run.get("momentum", 0.9))
    except ConfigError as err:
        raise ConfigError(f"[run] {err}") from None
    if run.get("inject", "wait") not in INJECT_MODES:
        raise ConfigError(f"[run] inject = {run['inject']!r}: accepted: {', '.join(map(repr, INJECT_MODES))} "
                          "(wait out the emulated delay from the iteration's start, or add it after the real compute)")
    if "seeds" in run:
        seeds = run["seeds"]
        if (not isinstance(seeds, list) or not seeds or len(set(map(repr, seeds))) != len(seeds)
                or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds)):
            raise ConfigError(f"[run] seeds must be a non-empty list of distinct integers >= 0, got {seeds!r}")
        if "seed" in run:   # one of them would be ignored
            raise ConfigError("[run] give either seed (one run) or seeds (a comparison over several), not both; "
                              f"got seed = {run['seed']!r} and seeds = {seeds!r}")


def _scheme_names() -> list[str]:
    from .schemes import list_schemes

    return list(list_schemes())


def _table(raw: dict, name: str) -> dict:
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{name}] must be a table, got {type(value).__name__}")
    return value


def _check_keys(table: dict, accepted: dict[str, str], where: str) -> None:
    for key in table:
        if key not in accepted:
            raise ConfigError(f"{where}: unknown key {key!r}; accepted: "
                              + "; ".join(f"{k} ({v})" for k, v in accepted.items()))


def _named(table: dict, where: str) -> tuple[str, dict]:
    if "name" not in table:
        raise ConfigError(f"{where}: 'name' is missing")
    params = _unlabelled(table)
    name = params.pop("name")
    if not (isinstance(name, str) and name or isinstance(name, type)):   # a class itself: from the Python API
        raise ConfigError(f"{where}: name must be a string, a registered name or 'package.module:ClassName', "
                          f"got {name!r}")
    return name, params


def build(spec: Spec, *, scheme_index: int | None = None, delay_index: int = 0, workload=None):
    """Construct ``(schemes, delay, workload)`` from a spec, each error prefixed with its table; ``delay_index``
    picks one of several ``[[delays]]`` (default the first, ``spec.delay``). ``workload``: one already built from
    ``spec.workload`` and not used yet (:func:`load_spec_built`), returned instead of a new one."""
    from .delays import make_delay
    from .plumbing.registry import SCHEMES
    from .schemes import make_scheme
    from .workloads import make_workload

    n = spec.workers
    try:
        delay = make_delay(spec.delay if delay_index == 0 else _unlabelled(spec.delays[delay_index]))
        delay.check_workers(n)
    except ConfigError as err:
        raise ConfigError(f"[delay] {err}") from None
    if workload is None and spec.workload is not None:
        try:
            workload = _shared_workload(spec.workload, make_workload)
        except ConfigError as err:
            raise ConfigError(f"[workload] {err}") from None
    schemes = []
    batch = spec.run.get("batch")
    for idx, table in enumerate(spec.schemes):
        if scheme_index is not None and idx != scheme_index:
            continue
        name, params = _named(table, f"[scheme {idx}]")
        try:
            if batch is not None and _takes_run_batch(SCHEMES.get(name)):
                params.setdefault("batch", batch)
            schemes.append(make_scheme(name, n=n, **params))
        except ConfigError as err:
            raise ConfigError(f"[scheme {name}] {err}") from None
    return schemes, delay, workload


_SHARED: dict[str, Any] = {}    # the last workload built from a spec table (see _shared_workload)


def _shared_workload(table: dict[str, Any], make_workload):
    """``make_workload(table)``, kept for the next build of the same table in this process when it is one of
    gradcode's own workloads generated from its parameters (no ``data`` file, which may change on disk): checking
    a spec, each run of a comparison and each sweep cell built it again, 2-3 times per run (issue 30: 480
    least-squares optima, 14 s of a 40 s sweep of 24 cells). gradcode only reads a workload (a run copies
    ``init_params``; partition bounds are a cache), and a forked pool worker inherits the one the sweep built
    while checking its cells. One table is kept, so at most one workload outlives its runs."""
    from .plumbing.registry import WORKLOADS

    name = table.get("name")
    try:
        key = json.dumps(table, sort_keys=True)
        own = isinstance(name, str) and WORKLOADS.get(name).__module__.startswith("gradcode.")
    except (TypeError, ValueError, ConfigError):
        own = False
    if not own or table.get("data") is not None:
        return make_workload(table)
    if key not in _SHARED:
        built = make_workload(table)
        _SHARED.clear()
        _SHARED[key] = built
    return _SHARED[key]


def _takes_run_batch(cls) -> bool:
    """Does the scheme take ``[run] batch``? Every ``batch`` parameter is the mini-batch size per partition (a scheme
    without one ignores it; adaptive_k_load's largest per-worker batch is ``max_batch``)."""
    from .plumbing.params import accepted_params

    return "batch" in accepted_params(cls)


def training_kwargs(spec: Spec) -> dict[str, Any]:
    """The [run] keys of the optimizer and of the held-out evaluation that a spec sets (:data:`TRAINING_KEYS`):
    keyword arguments of :class:`gradcode.clusters.driver.Driver`, which both clusters run."""
    return {k: spec.run[k] for k in TRAINING_KEYS if k in spec.run}


def run_kwargs(spec: Spec) -> dict[str, Any]:
    """The keyword arguments of :func:`gradcode.simulate` that a spec sets."""
    keys = ("iterations", "seed", "lr", "target_loss", "time_budget", "loss_every")
    kwargs = {k: spec.run[k] for k in keys if k in spec.run}
    if "late_workers" in spec.cluster:
        kwargs["late_workers"] = spec.cluster["late_workers"]
    return kwargs
