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
``label`` (used in reports, never passed to the factory). The ``[run]`` table and ``[cluster] late_workers`` are the
run's :class:`RunOptions`, one object that either cluster runs with.

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
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .deaths import FAULT_KEYS, check_die, check_die_random, planned_deaths
from .errors import ConfigError, check_float, check_int
from .optim import OPTIMIZERS, LRSchedule
from .plumbing.params import accepted_params
from .plumbing.registry import SCHEMES, WORKLOADS, add_user_dirs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TABLES = ("cluster", "workload", "delay", "delays", "scheme", "schemes", "run", "experiment", "network", "faults")

# what a worker still busy with an older plan does when a newer one is issued (gradcode.clusters.sim says how)
LATE_WORKERS = ("finish", "abandon", "between_chunks")


def _option(default, meaning: str, check: Callable[[str, Any], Any], table: str = "run"):
    """A field of :class:`RunOptions`: its default, what it means (listed when a spec has an unknown key), its check
    (``check(key, value)`` returns the value kept, or raises :class:`ConfigError`) and the spec table it is in."""
    return field(default=default, metadata={"meaning": meaning, "check": check, "table": table})


def _int(low: int):
    return lambda key, value: check_int(key, value, low=low)


def _float(low: float | None = None, *, low_open: bool = False):
    return lambda key, value: check_float(key, value, low=low, low_open=low_open)


def _network(key: str, value):
    """A ``[network]`` table as :class:`gradcode.network.Network` (its own checks and errors)."""
    from .network import Network

    return Network.of(value)


def _one_of(accepted: tuple[str, ...]):
    def check(key: str, value):
        if not isinstance(value, str) or value not in accepted:
            raise ConfigError(f"{key} = {value!r}: accepted: {', '.join(map(repr, accepted))}")
        return value
    return check


def _lr_schedule(key: str, value):
    """A ``[run] lr_schedule`` checked now (:class:`gradcode.optim.LRSchedule`), kept as written: a name, or a table."""
    return LRSchedule(value).spec["name"] if isinstance(value, str) else dict(LRSchedule(value).spec)


def _target(key: str, value):
    """A loss target: a number, or ``{relative = G}`` with ``0 < G < 1`` (resolved against the workload when the
    spec is loaded or the run starts: :func:`gradcode.workloads.optimum.resolve_target`)."""
    if isinstance(value, dict):
        if set(value) != {"relative"}:
            raise ConfigError(f"{key} = {value!r}: accepted: a number, or {{relative = G}} with 0 < G < 1 (the "
                              "fraction of the initial excess loss F(w0) - F* left)")
        return {"relative": check_float(f"{key} relative", value["relative"], low=0.0, low_open=True, high=1.0)}
    return check_float(key, value)


def _momentum(key: str, value) -> float:
    value = check_float(key, value, low=0.0)
    if value >= 1.0:
        raise ConfigError(f"{key} must be in [0, 1), got {value}")
    return value


@dataclass(frozen=True)
class RunOptions:
    """How a run goes, on either cluster: a spec's ``[run]`` table and ``[cluster] late_workers``, or the keywords
    of :func:`gradcode.simulate`. Every value is checked when the object is made (a spec's when it is loaded), so
    a run never starts with a bad one. The simulator carries the MPI-only options unused, so one object describes
    the run on both clusters.

    An option left at ``None`` takes the cluster's default: the workload's step size (``lr``), ``loss_every``
    (``eval_every``), the scheme's own mini-batch (``batch``), no stop but ``iterations`` (the targets, the budget).
    """

    iterations: int = _option(100, "number of iterations (int >= 1)", _int(1))
    seed: int = _option(0, "seed of the delays, the mini-batches and the codes (int >= 0; [workload] seed draws "
                           "the data)", _int(0))
    lr: float | None = _option(None, "step size (default: the workload's)", _float(0.0))
    target_loss: float | dict | None = _option(None, "stop when the loss reaches this: a number, or {relative = G}: "
                                                     "F* + G (F(w0) - F*), F* the workload's optimal loss",
                                               _target)
    time_budget: float | None = _option(None, "stop when this much (virtual) time is spent", _float(0.0, low_open=True))
    loss_every: int = _option(1, "evaluate the full loss every this many iterations", _int(1))
    late_workers: str = _option("finish", "'finish', 'abandon' or 'between_chunks'", _one_of(LATE_WORKERS),
                                table="cluster")
    optimizer: str = _option("sgd", "the update: 'sgd' (default), 'momentum' or 'nesterov'", _one_of(tuple(OPTIMIZERS)))
    momentum: float = _option(0.9, "momentum mu of 'momentum' and 'nesterov', in [0, 1) (default 0.9)", _momentum)
    lr_schedule: Any = _option("constant", "'constant' (default), 'step', 'cosine', '1/t', or a table "
                               "{name = \"step\", factor = 0.5, every = 100} ({name = \"1/t\", t0 = 10})",
                               _lr_schedule)
    eval_every: int | None = _option(None, "held-out metrics every this many iterations (default: loss_every)", _int(1))
    target_accuracy: float | None = _option(None, "stop when the held-out accuracy reaches this (on an "
                                                  "evaluated iteration, eval_every)", _float(0.0))
    batch: int | None = _option(None, "samples per partition mini-batch (default: whole partition)", _int(1))
    time_scale: float = _option(0.01, "MPI: wall-clock seconds per unit of model time", _float(0.0, low_open=True))
    grace: float = _option(10.0, "MPI: seconds to wait for an answer (a worker, the master, a collective) before "
                                 "naming the rank", _float(0.0, low_open=True))
    startup_timeout: float = _option(60.0, "MPI: seconds each start-up step may take (imports, building, set-up) "
                                           "before naming a rank", _float(0.0, low_open=True))
    inject: str = _option("wait", "MPI: 'wait' (default: wait out the emulated delay from the iteration's start) "
                                  "or 'add' (sleep it after the real compute)", _one_of(("wait", "add")))
    network: Any = _option(None, "the [network] table: links, latency, hosts (default: none, no bytes)", _network,
                           table="network")
    die: tuple[tuple[int, int], ...] | None = _option(None, FAULT_KEYS["die"], check_die, table="faults")
    die_random: tuple[int, int] | None = _option(None, FAULT_KEYS["die_random"], check_die_random, table="faults")

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if not (value is None and f.default is None):    # None: unset, the cluster's default
                object.__setattr__(self, f.name, f.metadata["check"](f.name, value))

    @classmethod
    def of(cls, options: RunOptions | None = None, **changes) -> RunOptions:
        """``options`` (default: every default) with ``changes``: the keyword form of :func:`gradcode.simulate`.
        An unknown name is a :class:`ConfigError` that lists the accepted ones."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(changes) - set(names))
        if unknown:
            raise ConfigError(f"unknown run option(s) {', '.join(unknown)}; accepted: {', '.join(names)}")
        if options is None:
            return cls(**changes)
        if not isinstance(options, cls):
            raise ConfigError(f"options must be a RunOptions, got {type(options).__name__}")
        return replace(options, **changes) if changes else options

    @classmethod
    def from_spec(cls, run: dict[str, Any], cluster: dict[str, Any],
                  faults: dict[str, Any] | None = None) -> RunOptions:
        """The options a spec's ``[run]``, ``[cluster]`` and ``[faults]`` tables set; an error names the table and
        the key."""
        values = {}
        tables = {"run": run, "cluster": cluster, "faults": faults or {}}
        for f in fields(cls):
            table = f.metadata["table"]
            given = tables.get(table, {})
            if f.name in given:   # checked here to name the table (the constructor's check then passes it as is)
                try:
                    values[f.name] = f.metadata["check"](f.name, given[f.name])
                except ConfigError as err:
                    raise ConfigError(f"[{table}] {err}") from None
        return cls(**values)


def _option_keys(table: str) -> dict[str, str]:
    return {f.name: f.metadata["meaning"] for f in fields(RunOptions) if f.metadata["table"] == table}


RUN_KEYS = {**_option_keys("run"), "seeds": "a list of seeds (comparisons)"}
CLUSTER_KEYS = {"workers": "number of workers n (int >= 1)", **_option_keys("cluster"),
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
    options: RunOptions = field(default_factory=RunOptions)      # [run] and [cluster] late_workers, checked


def load_spec(source: str | Path | dict, overrides: dict[str, Any] | None = None) -> Spec:
    """Read a TOML file (or take a dict of the same shape), apply ``overrides`` (:func:`with_run_overrides`), check
    it, and return a :class:`Spec`."""
    return load_spec_built(source, overrides)[0]


def load_spec_built(source: str | Path | dict, overrides: dict[str, Any] | None = None) -> tuple[Spec, Any]:
    """:func:`load_spec`, and the workload that checking the spec built (None without ``[workload]``): a caller that
    runs the spec once passes it to :func:`build` instead of building it again (an MPI rank: a large workload
    takes seconds). It is fresh: checking reads it but does not use it."""
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


def with_run_overrides(raw: dict[str, Any], iterations: int | None = None, seeds: list[int] | None = None,
                       seed: int | None = None) -> dict[str, Any]:
    """``raw`` with the command line's ``--iterations`` and ``--seeds`` (or ``--seed``) in its ``[run]`` table
    (``None``: keep the spec's). ``seeds`` or ``seed`` replaces both ``seed`` and ``seeds``; the values are checked
    with the rest of ``[run]``.

    >>> with_run_overrides({"run": {"iterations": 100, "seed": 3}}, iterations=5, seeds=[0, 1])["run"]
    {'iterations': 5, 'seeds': [0, 1]}
    """
    if iterations is None and seeds is None and seed is None:
        return raw
    run = dict(_table(raw, "run"))
    if iterations is not None:
        run["iterations"] = iterations
    if seeds is not None or seed is not None:
        run.pop("seed", None)
        run.pop("seeds", None)
        run.update({"seeds": list(seeds)} if seeds is not None else {"seed": seed})
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


def _check_spec(raw: dict[str, Any]) -> tuple[Spec, Any]:
    """``(spec, workload)``: the :class:`Spec` of a spec's tables, every table checked (every object is built
    once), and the workload it built."""
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
    faults = dict(_table(raw, "faults"))
    _check_keys(faults, FAULT_KEYS, "[faults]")
    options = RunOptions.from_spec(run, cluster, faults)
    planned_deaths(options, cluster["workers"])     # the workers and iterations named exist
    if "network" in raw:
        options = replace(options, network=raw["network"])
    _check_seeds(run)
    schemes = _entries(raw, "scheme", "a scheme", lambda: "spec: no scheme; add a [scheme] table (or [[schemes]]) "
                       "with name = one of " + ", ".join(SCHEMES.names()))
    delays = _entries(raw, "delay", "a delay model", lambda: "spec: no [delay] table; add one (or [[delays]] tables) "
                      "with name = a delay model")
    spec = Spec(workers=cluster["workers"], workload=dict(raw["workload"]) if "workload" in raw else None,
                delay=_unlabelled(delays[0]), schemes=schemes, run=run, cluster=cluster, raw=raw, delays=delays,
                options=options)
    workload = build(spec)[2]   # construct everything once: every error is raised now, before any work
    _check_against_workload(options, workload)
    _check_network(options, spec.workers, workload)
    if isinstance(options.target_loss, dict):     # {relative = G}: a number from here on (reports, every rank)
        from .workloads.optimum import resolve_target

        spec = replace(spec, options=replace(options, target_loss=resolve_target(options.target_loss, workload)))
    _check_other_delays(spec)
    return spec, workload


def _check_against_workload(options: RunOptions, workload) -> None:
    """``target_loss`` needs a workload, ``target_accuracy`` and ``eval_every`` held-out samples: say so rather than
    fail at the first run or never report them."""
    if options.target_loss is not None and workload is None:
        raise ConfigError("[run] target_loss needs a [workload] (a timing-only run has no loss)")
    asked = [k for k in ("target_accuracy", "eval_every") if getattr(options, k) is not None]
    if asked and getattr(workload, "X_test", None) is None:
        raise ConfigError(f"[run] {', '.join(asked)}: the workload holds out no samples; set [workload] "
                          "test_fraction (e.g. 0.2; the mlp holds out 0.2 by default)")


def _check_network(options: RunOptions, workers: int, workload) -> None:
    """A ``[network]`` that fits the run: its hosts hold every rank, its ``d`` only where there is no workload."""
    network = options.network
    if network is None:
        return
    if network.d is not None and workload is not None:
        raise ConfigError(f"[network] d = {network.d}: the model's size is the workload's ({workload.dim} floats); "
                          "leave d out, it is for timing-only runs")
    network.bind(workers, None if workload is None else workload.dim, options.time_scale)


def _entries(raw: dict, one: str, what: str, missing: Callable[[], str]) -> list[dict]:
    """The tables of ``[one]`` alone, or of a non-empty ``[[ones]]`` array (several schemes or delay models)."""
    many = one + "s"
    if one in raw and many in raw:
        raise ConfigError(f"spec: give either [{one}] or [[{many}]], not both")
    if many in raw:
        tables = raw[many]
        if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
            raise ConfigError(f"[[{many}]] must be a non-empty array of tables, each with name = {what}; got "
                              f"{tables!r}")
        return [dict(t) for t in tables]
    if one not in raw:
        raise ConfigError(missing())
    return [dict(_table(raw, one))]


def _unlabelled(table: dict) -> dict:
    return {k: v for k, v in table.items() if k != "label"}


def _check_other_delays(spec: Spec) -> None:
    from .delays import make_delay

    for idx, table in enumerate(spec.delays[1:], start=1):
        try:
            make_delay(_unlabelled(table)).check_workers(spec.workers)
        except ConfigError as err:
            raise ConfigError(f"[[delays]] {idx}: {err}") from None


def _check_seeds(run: dict) -> None:
    """A comparison's ``[run] seeds`` (each of its runs has one ``seed``, a :class:`RunOptions` field)."""
    if "seeds" not in run:
        return
    seeds = run["seeds"]
    if (not isinstance(seeds, list) or not seeds or len(set(map(repr, seeds))) != len(seeds)
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds)):
        raise ConfigError(f"[run] seeds must be a non-empty list of distinct integers >= 0, got {seeds!r}")
    if "seed" in run:   # one of them would be ignored
        raise ConfigError("[run] give either seed (one run) or seeds (a comparison over several), not both; "
                          f"got seed = {run['seed']!r} and seeds = {seeds!r}")


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
    batch = spec.options.batch
    for idx, table in enumerate(spec.schemes):
        if scheme_index is not None and idx != scheme_index:
            continue
        name, params = _named(table, f"[scheme {idx}]")
        try:
            # every `batch` parameter is the mini-batch size per partition (a scheme without one ignores [run]
            # batch; adaptive_k_load's largest per-worker batch is `max_batch`)
            if batch is not None and "batch" in accepted_params(SCHEMES.get(name)):
                params.setdefault("batch", batch)
            schemes.append(make_scheme(name, n=n, **params))
        except ConfigError as err:
            raise ConfigError(f"[scheme {name}] {err}") from None
    return schemes, delay, workload


_SHARED: dict[str, Any] = {}    # the last workload built from a spec table (see _shared_workload)


def _shared_workload(table: dict[str, Any], make_workload):
    """``make_workload(table)``, kept for the next build of the same table in this process when it is one of
    gradcode's own workloads generated from its parameters (no ``data`` file, which may change on disk): checking
    a spec, each run of a comparison and each sweep cell would build it again, 2-3 times per run. gradcode only
    reads a workload (a run copies ``init_params``; partition bounds are a cache), and a forked pool worker
    inherits the one the sweep built while checking its cells. One table is kept, so at most one workload outlives
    its runs."""
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

