"""One registry for the four kinds of part a run is built from: codes, schemes, delay models and workloads.

Each kind is a :class:`Registry`: a public base class and a map from names to classes. The same three ways of naming
a class work for every kind, in the Python API and in a spec:

- a built-in name (``"cyclic_mds"``, ``"fastest_k"``, ``"pareto"``, ``"least_squares"``), imported on first use so
  that ``import gradcode`` stays fast;
- an import path ``"package.module:ClassName"``: a user's subclass of the public base class, with no edit to
  gradcode, in a module on ``sys.path`` or in a folder given to :func:`add_user_dirs` (a spec adds its own folder
  and the working directory; subprocesses and MPI ranks get them on ``PYTHONPATH``);
- the name of an installed plugin, declared as an entry point in the group ``gradcode.codes``,
  ``gradcode.schemes``, ``gradcode.delays`` or ``gradcode.workloads``.

A class describes itself: its ``description`` attribute (else the first line of its docstring), its constructor's
parameters and their defaults, its docstring's first paragraph (:meth:`Registry.describe`, ``gradcode describe``).
A wrong name, a wrong path or a class of the wrong kind is a :class:`~gradcode.errors.ConfigError`.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..errors import ConfigError
from .params import check_params, init_params


@dataclass(frozen=True)
class Param:
    """One constructor parameter: its name, its default (``required`` if none) and its annotation as written."""

    name: str
    default: object
    required: bool
    annotation: str

    def text(self) -> str:
        ann = f": {self.annotation}" if self.annotation else ""
        return f"{self.name}{ann}  ({'required' if self.required else f'default {self.default!r}'})"


@dataclass(frozen=True)
class Description:
    """What ``gradcode describe`` prints about one registered class."""

    kind: str
    name: str
    cls: type
    summary: str
    doc: str
    params: tuple[Param, ...]
    forwarded: str = ""    # what any other key is passed on to (a coded scheme's code), if anything

    def text(self) -> str:
        where = f"{self.cls.__module__}:{self.cls.__qualname__}"
        lines = [f"{self.name} ({self.kind}, {where})", f"  {self.summary}", "", "parameters:"]
        lines += ["  " + p.text() for p in self.params] or ["  (none)"]
        if self.forwarded:
            lines.append(f"  any other key: {self.forwarded}")
        if self.doc:
            lines += ["", *("  " + line if line else "" for line in self.doc.splitlines())]
        return "\n".join(lines)


class Registry:
    """Names -> classes for one kind of part.

    ``base`` and the ``builtins`` are ``"module:Class"`` strings, imported when first needed. ``positional`` names
    the constructor arguments a cluster or factory passes itself (``n`` and ``s`` of a code, ``n`` of a scheme):
    they are not spec keys, so they are left out of ``describe`` and of the parameter check.
    """

    def __init__(self, kind: str, base: str, builtins: dict[str, str], *, group: str,
                 positional: tuple[str, ...] = ()):
        self.kind, self._base, self._builtins, self.group = kind, base, dict(builtins), group
        self.positional = positional
        self._cache: dict[str, type] = {}

    # --- finding a class ------------------------------------------------------------------------------------
    @property
    def base(self) -> type:
        return _import(self._base, f"the {self.kind} base class")

    def names(self) -> list[str]:
        """Built-in names, then installed plugins' (entry points)."""
        return list(self._builtins) + [ep.name for ep in self._entry_points() if ep.name not in self._builtins]

    def get(self, name) -> type:
        """The class named ``name``: a registered name, an entry point or ``"package.module:ClassName"``."""
        if isinstance(name, type):
            return self._checked(name, name.__qualname__)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"a {self.kind} name must be a non-empty string, got {name!r}; "
                              f"accepted: {self._accepted()}")
        if name not in self._cache:
            self._cache[name] = self._checked(self._find(name), name)
        return self._cache[name]

    def get_or_base(self, name) -> type:
        """:meth:`get`, or the base class when ``name`` cannot be imported here (a user's module not on the path):
        how a report reads the attributes (``baseline``, ``adapts``, ...) of a run's class."""
        try:
            return self.get(name)
        except ConfigError:
            return self.base

    def _find(self, name: str) -> type:
        if name in self._builtins:
            return _import(self._builtins[name], f"built-in {self.kind} {name!r}")
        if ":" in name:
            return _import(name, f"{self.kind} {name!r}", hint=f"; {self._hint()}")
        for ep in self._entry_points():
            if ep.name == name:
                try:
                    return ep.load()
                except Exception as err:  # a broken plugin: say which one and why
                    raise ConfigError(f"{self.kind} {name!r}: the plugin entry point {ep.value!r} failed to load: "
                                      f"{type(err).__name__}: {err}") from None
        raise ConfigError(f"unknown {self.kind} {name!r}; {self._hint()}")

    def _checked(self, cls, name: str) -> type:
        base = self.base
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise ConfigError(f"{self.kind} {name!r} is {cls!r}, not a subclass of {self._base_name()}; "
                              f"a {self.kind} must derive from it")
        return cls

    def _entry_points(self):
        return metadata.entry_points(group=self.group)

    def _accepted(self) -> str:
        return ", ".join(self.names())

    def _hint(self) -> str:
        return (f"accepted: {self._accepted()}, or 'package.module:ClassName' naming a subclass of "
                f"{self._base_name()} in a module on sys.path, in the spec's folder or in the working directory")

    def _base_name(self) -> str:
        module, _, cls = self._base.partition(":")
        return f"gradcode.{cls}" if module.startswith("gradcode") else self._base

    # --- building -------------------------------------------------------------------------------------------
    def split(self, spec, params: dict) -> tuple[object, dict]:
        """``(name, params)`` from a name or a ``{"name": ..., **params}`` dict (keyword ``params`` win)."""
        if isinstance(spec, dict):
            if "name" not in spec:
                raise ConfigError(f"a {self.kind} spec needs a 'name' key (one of {self._accepted()}), "
                                  f"got keys {sorted(spec)}")
            rest = {k: v for k, v in spec.items() if k != "name"}
            return spec["name"], {**rest, **params}
        return spec, params

    def check(self, cls: type, params: dict, name: str, *, allow_unknown: bool = False) -> None:
        """Raise :class:`ConfigError` for a missing required or an unknown parameter, naming the accepted ones."""
        clash = [p for p in self.positional if p in params]
        if clash:
            raise ConfigError(f"{self.kind} {name!r}: {', '.join(clash)} is set by the cluster, not a parameter")
        check_params(cls, params, f"{self.kind} {name!r}", allow_unknown=allow_unknown)

    def build(self, spec, *args, **params):
        """An instance from a name or dict spec; an instance of the base class is returned as is."""
        if isinstance(spec, self.base):
            if params:
                raise ConfigError(f"{self.kind}: parameters {sorted(params)} given with an already built "
                                  f"{self.kind} {spec!r}")
            return spec
        name, params = self.split(spec, params)
        cls = self.get(name)
        self.check(cls, params, name)
        return cls(*args, **params)

    # --- describing -----------------------------------------------------------------------------------------
    def list(self) -> dict[str, str]:
        """Every name with its one-line description (a plugin that fails to load says why, in its place)."""
        return {name: self._summary(name) for name in self.names()}

    def _summary(self, name: str) -> str:
        try:
            return summary_of(self.get(name))
        except ConfigError as err:
            return f"(broken: {err})"

    def describe(self, name) -> Description:
        cls = self.get(name)
        label = name if isinstance(name, str) else getattr(cls, "name", cls.__name__)
        return Description(self.kind, label, cls, summary_of(cls),
                           inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].strip(),
                           tuple(p for p in params_of(cls) if p.name not in self.positional), forwarded_to(cls))


def summary_of(cls: type) -> str:
    """A class's one-line description: its ``description`` attribute, else its docstring's first line."""
    text = getattr(cls, "description", "") or (inspect.getdoc(cls) or "").strip().split("\n")[0]
    return text.strip()


def params_of(cls: type) -> list[Param]:
    """The keyword parameters of ``cls(...)`` with defaults (:func:`gradcode.plumbing.params.init_params`)."""
    out = []
    for p in init_params(cls).values():
        ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
        out.append(Param(p.name, None if p.default is p.empty else p.default, p.default is p.empty,
                         "" if p.annotation is p.empty else str(ann)))
    return out


def forwarded_to(cls: type) -> str:
    """What a class that ``forwards_params`` does with keys it does not name, from its ``**name_params``: a coded
    scheme's ``**code_params`` go to the code it builds."""
    if not getattr(cls, "forwards_params", False):
        return ""
    varkw = next((p.name for p in inspect.signature(cls.__init__).parameters.values() if p.kind is p.VAR_KEYWORD),
                 "kwargs")
    target = varkw.removesuffix("_params")
    if target in KINDS:
        return (f"passed on to the {target} (**{varkw}); `gradcode describe NAME --kind {target}` lists a "
                f"{target}'s parameters")
    return f"passed on (**{varkw})"


def _import(path: str, what: str, *, hint: str = "") -> type:
    """The object named by ``"package.module:Name"``; a :class:`ConfigError` (ending in ``hint``) for a malformed
    path, a module that cannot be imported (missing, or failing while it runs) or a missing attribute."""
    module, sep, attr = path.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"{what}: an import path must look like 'package.module:ClassName', got {path!r}{hint}")
    try:
        obj = importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(f"{what}: cannot import module {module!r}: {err}{hint}") from None
    except Exception as err:  # the user's module itself failed: name it and the error, no traceback
        raise ConfigError(f"{what}: importing module {module!r} failed: {type(err).__name__}: {err}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{what}: module {module!r} has no attribute {attr!r}{hint}") from None
    return obj


# --- where user modules are found ---------------------------------------------------------------------------
_USER_DIRS: list[str] = []


def add_user_dirs(*folders) -> None:
    """Let import paths find user modules in ``folders`` (a spec's folder, the working directory): they are appended
    to ``sys.path`` (installed packages keep precedence) and passed on to subprocesses and MPI ranks
    (:func:`pythonpath`), so every process of a run imports the same module."""
    for folder in folders:
        path = str(Path(folder).resolve())
        if path not in _USER_DIRS:
            _USER_DIRS.append(path)
        if path not in sys.path:
            sys.path.append(path)


def pythonpath(existing: str | None = None) -> str:
    """A ``PYTHONPATH``: ``existing`` (default: this process's) followed by the user folders."""
    current = os.environ.get("PYTHONPATH", "") if existing is None else existing
    paths = [p for p in current.split(os.pathsep) if p] + _USER_DIRS
    return os.pathsep.join(dict.fromkeys(paths))


CODES = Registry("code", "gradcode.codes._base:Code", {
    "uncoded": "gradcode.codes.repetition:Uncoded",
    "fractional_repetition": "gradcode.codes.repetition:FractionalRepetition",
    "cyclic_repetition": "gradcode.codes.cyclic:CyclicRepetition",
    "cyclic_mds": "gradcode.codes.cyclic:CyclicMDS",
    "reed_solomon": "gradcode.codes.reed_solomon:ReedSolomon",
    "reed_solomon_gf": "gradcode.codes.finite_field:ReedSolomonGF",
    "expander": "gradcode.codes.random_codes:Expander",
    "graph": "gradcode.codes.graph:GraphCode",
    "bernoulli": "gradcode.codes.random_codes:Bernoulli",
    "stochastic": "gradcode.codes.random_codes:Stochastic",
    "erasurehead": "gradcode.codes.repetition:ErasureHead",
}, group="gradcode.codes", positional=("n", "s"))

SCHEMES = Registry("scheme", "gradcode.schemes._base:Scheme", {
    "sync": "gradcode.schemes.uncoded:Sync",
    "fastest_k": "gradcode.schemes.uncoded:FastestK",
    "backup": "gradcode.schemes.uncoded:Backup",
    "adaptive_k": "gradcode.schemes.adaptive:AdaptiveK",
    "adaptive_k_load": "gradcode.schemes.adaptive:AdaptiveKLoad",
    "coded": "gradcode.schemes.coded:Coded",
    "dropcompute": "gradcode.schemes.dropcompute:DropCompute",
    "partial_coded": "gradcode.schemes.partial_coded:PartialCoded",
    "anytime": "gradcode.schemes.anytime:Anytime",
    "comm_efficient": "gradcode.schemes.comm_efficient:CommEfficient",
}, group="gradcode.schemes", positional=("n",))

DELAYS = Registry("delay model", "gradcode.delays:DelayModel", {
    name: f"gradcode.delays:{cls}" for name, cls in {
        "constant": "ConstantDelay", "none": "NoDelay", "shifted_exponential": "ShiftedExponentialDelay",
        "exponential": "ExponentialDelay", "pareto": "ParetoDelay", "lognormal": "LognormalDelay",
        "bimodal": "BimodalDelay", "persistent": "PersistentDelay", "mixture": "MixtureDelay",
        "unresponsive": "UnresponsiveDelay", "trace": "TraceDelay",
        "straggle": "StraggleDelay", "heterogeneous": "HeterogeneousDelay"}.items()
}, group="gradcode.delays")

WORKLOADS = Registry("workload", "gradcode.workloads:Workload", {
    "least_squares": "gradcode.workloads:LeastSquares",
    "logistic": "gradcode.workloads:Logistic",
    "softmax_digits": "gradcode.workloads:SoftmaxDigits",
    "mlp": "gradcode.workloads:MLP",
    # PyTorch models: the module imports torch only when one is built, so these are listed without it
    "torch": "gradcode.workloads.torch:TorchWorkload",
    "torch_mlp": "gradcode.workloads.torch:TorchMLP",
    "torch_cnn": "gradcode.workloads.torch:TorchCNN",
}, group="gradcode.workloads")

KINDS = {"code": CODES, "scheme": SCHEMES, "delay": DELAYS, "workload": WORKLOADS}


def describe(name: str, kind: str | None = None) -> list[Description]:
    """Describe ``name`` in every kind that has it (a plugin may give a code and a scheme one name); an import
    path is described as the kind whose base class it derives from."""
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"unknown kind {kind!r}; accepted: {', '.join(KINDS)}")
    registries = [KINDS[kind]] if kind is not None else list(KINDS.values())
    if ":" in name:
        cls = _import(name, name)
        found = [reg.describe(name) for reg in registries if isinstance(cls, type) and issubclass(cls, reg.base)]
        if not found:
            bases = " or ".join(reg._base_name() for reg in registries)
            raise ConfigError(f"{name!r} is {cls!r}, not a subclass of {bases}")
        return found
    found = [reg.describe(name) for reg in registries if name in reg.names()]
    if not found:
        every = sorted({n for reg in registries for n in reg.names()})
        raise ConfigError(f"nothing is registered as {name!r}" + (f" ({kind})" if kind else "")
                          + f"; accepted: {', '.join(every)}, or 'package.module:ClassName'")
    return found
