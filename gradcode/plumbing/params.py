"""Checking keyword parameters against a constructor, so that a typo in a spec is an error that lists the accepted
names instead of a ``TypeError`` traceback."""

from __future__ import annotations

import inspect

from ..errors import ConfigError


def init_params(cls) -> dict[str, inspect.Parameter]:
    """Keyword parameters of ``cls(...)`` by name, following ``**kwargs`` up the class hierarchy (a subclass's
    parameter hides its base's of the same name)."""
    found: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        for p in params:
            if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                found.setdefault(p.name, p)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return found


def accepted_params(cls) -> list[str]:
    """The names of :func:`init_params`."""
    return list(init_params(cls))


def check_params(cls, params: dict, what: str, *, allow_unknown: bool = False) -> None:
    """Raise :class:`ConfigError` if ``params`` lacks a required key or has one that ``cls`` does not accept."""
    accepted = accepted_params(cls)
    # the keyword-only parameters of cls.__init__ itself without a default
    required = [p.name for p in inspect.signature(cls.__init__).parameters.values()
                if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    missing = [name for name in required if name not in params]
    if missing:
        raise ConfigError(f"{what}: missing required parameter{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(map(repr, missing))}")
    unknown = [] if allow_unknown else [key for key in params if key not in accepted]
    if unknown:
        # a class may explain a name it does not take (one that means something else here, or its old name)
        hints = getattr(cls, "param_hints", {})
        raise ConfigError(
            f"{what}: unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"accepted: {', '.join(accepted)}" + "".join(f"; {key!r}: {hints[key]}" for key in unknown if key in hints)
        )
