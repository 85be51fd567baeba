"""The sweep grammar: a ``[sweep]`` table turns one comparison spec into a grid of comparisons (cells).

    [sweep]
    "delay.alpha" = [1.5, 2.0, 3.0]          # a key of the [delay] table
    "schemes.coded.s" = [1, 2]               # key s of the [[schemes]] entry labelled (or named) "coded"
    # zip = true                             # pair the lists (equal lengths) instead of their product

Every key of ``[sweep]`` (but ``zip``) is a dotted path into the spec and its value a non-empty list. The grid is
the product of the lists, the first path varying slowest (``itertools.product``), so with ``m_j`` values per path
there are ``prod_j m_j`` cells; ``zip = true`` pairs the lists instead (``m`` cells, every list of length ``m``).

Paths (the first part names the table):

- ``delay.KEY``, ``cluster.KEY``, ``run.KEY``, ``workload.KEY``, ``scheme.KEY``: a key of that single table;
- ``schemes.LABEL_OR_NAME.KEY``: a key of one ``[[schemes]]`` entry, named by its label (its ``label`` key, or the
  label the reports give it, e.g. ``"fastest_k k=6"``) or, when only one entry has it, by its ``name``;
- ``delays.LABEL_OR_NAME.KEY``: the same for ``[[delays]]``;
- ``schemes.*.KEY`` / ``delays.*.KEY``: the key of every entry that sets it in the base spec, one value for all
  (``"schemes.*.s" = [1, 2, 3]`` moves every code's ``s`` together: one axis, not a product);
- ``KEY`` may go on into an inline table that the spec has (``delay.base.alpha`` for a mixture's component); the
  last key need not be in the spec (a parameter left at its default), the tables before it must.

A path that matches nothing, or a name two entries share, is a :class:`ConfigError` naming what exists, raised
before anything runs; each cell (the base spec with its values substituted) is then validated like any spec, so a
bad value fails up front for every cell.

**Labels are frozen.** Every scheme and delay model has the same label in every cell, so the rows of one scheme
line up across cells in ``sweep.csv`` and the regime map: its ``label`` key, else the label the reports give it
(name and parameters) without the keys a sweep sets, which are in their own columns: with ``"schemes.coded.s"``
swept, ``{name = "coded", code = "cyclic_repetition", s = 1}`` is ``"coded/cyclic_repetition"`` in every cell, not
``"... s=1"`` in a cell where ``s`` is 2. A path may name an entry by its label in the base spec.

Example::

    >>> from gradcode.study.sweep import expand
    >>> base = {"cluster": {"workers": 4}, "delay": {"name": "pareto", "alpha": 2.0},
    ...         "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 3}], "run": {"iterations": 5},
    ...         "sweep": {"delay.alpha": [1.5, 3.0], "schemes.fastest_k.k": [2, 3]}}
    >>> grid = expand(base)
    >>> [cell.values for cell in grid.cells]
    [{'delay.alpha': 1.5, 'schemes.fastest_k.k': 2}, {'delay.alpha': 1.5, 'schemes.fastest_k.k': 3}, \
{'delay.alpha': 3.0, 'schemes.fastest_k.k': 2}, {'delay.alpha': 3.0, 'schemes.fastest_k.k': 3}]
    >>> grid.cells[1].spec["schemes"][1]
    {'name': 'fastest_k', 'k': 3, 'label': 'fastest_k'}
"""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

OPTIONS = {"zip": "true: pair the lists (equal lengths) instead of taking their product"}
SINGLE = ("cluster", "workload", "delay", "scheme", "run", "network")   # single tables: TABLE.KEY
ARRAYS = ("schemes", "delays")                                # arrays of tables: TABLE.LABEL_OR_NAME.KEY


@dataclass(frozen=True)
class Cell:
    """One cell of the grid: its index, its swept values (path -> value) and its spec (a comparison spec)."""

    index: int
    values: dict[str, Any]
    spec: dict[str, Any]


@dataclass(frozen=True)
class Grid:
    """A sweep expanded: the base spec (without ``[sweep]``), the swept paths in order, and the cells."""

    base: dict[str, Any]
    paths: list[str]
    zipped: bool
    cells: list[Cell]


def read_sweep(source: str | Path | dict) -> dict[str, Any]:
    """The raw TOML table of a sweep spec file (or a dict, copied); user modules are looked up in its folder."""
    from ..plumbing.registry import add_user_dirs
    from ..spec import _read_toml

    if isinstance(source, dict):
        add_user_dirs(Path.cwd())
        return copy.deepcopy(source)
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"spec file {str(path)!r} does not exist")
    add_user_dirs(path.parent, Path.cwd())
    return _read_toml(path)


def expand(raw: dict[str, Any]) -> Grid:
    """The grid of a spec with a ``[sweep]`` table: every cell's spec, each checked as a comparison spec before
    anything runs. See the module docstring for the grammar."""
    if not isinstance(raw, dict) or "sweep" not in raw:
        raise ConfigError("spec: no [sweep] table; a sweep needs one, e.g. [sweep] \"delay.alpha\" = [1.5, 2, 3] "
                          "(to run a single comparison, use `gradcode compare`)")
    table = raw["sweep"]
    if not isinstance(table, dict):
        raise ConfigError(f"[sweep] must be a table of dotted paths to lists, got {type(table).__name__}")
    base = {k: copy.deepcopy(v) for k, v in raw.items() if k != "sweep"}
    zipped = table.get("zip", False)
    if not isinstance(zipped, bool):
        raise ConfigError(f"[sweep] zip must be true or false, got {zipped!r}")
    lists = {path: values for path, values in table.items() if path not in OPTIONS}
    if not lists:
        raise ConfigError("[sweep] names no path; add one, e.g. \"delay.alpha\" = [1.5, 2, 3]")
    for path, values in lists.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"[sweep] {path!r} must be a non-empty list of values, got {values!r}")
    targets = {path: locate_all(base, path) for path in lists}    # every path, before any cell is built
    _frozen_labels(base, [t for group in targets.values() for t in group])
    cells = []
    for i, combo in enumerate(_combinations(lists, zipped)):
        values = dict(zip(lists, combo, strict=True))
        cells.append(Cell(i, values, _substitute(base, targets, values)))
    for cell in cells:
        _check_cell(cell)
    return Grid(base=base, paths=list(lists), zipped=zipped, cells=cells)


def _combinations(lists: dict[str, list], zipped: bool) -> list[tuple]:
    if not zipped:
        return list(itertools.product(*lists.values()))
    lengths = {path: len(values) for path, values in lists.items()}
    if len(set(lengths.values())) > 1:
        raise ConfigError("[sweep] zip = true pairs the lists, so they must have equal lengths; got "
                          + ", ".join(f"{p!r}: {m}" for p, m in lengths.items()))
    return list(zip(*lists.values(), strict=True))


def _frozen_labels(base: dict[str, Any], targets) -> None:
    """Give every scheme and delay table a label that no cell changes (see "Labels are frozen"): its own, else the
    one the reports give it without the keys a sweep sets."""
    swept: dict[tuple[str, int | None], set[str]] = {}
    for t in targets:
        swept.setdefault((t.head, t.index), set()).add(t.keys[0])
    for head in ("scheme", "delay", "schemes", "delays"):
        tables = base.get(head)
        entries = list(enumerate(tables)) if isinstance(tables, list) else [(None, tables)]
        for index, table in entries:
            if isinstance(table, dict) and "name" in table and "label" not in table:
                drop = swept.get((head, index), set())
                table["label"] = _label(head, {k: v for k, v in table.items() if k not in drop})


def _check_cell(cell: Cell) -> None:
    from .harness import load_experiment

    try:
        load_experiment(cell.spec, mpi=(True, "checked"))
    except ConfigError as err:
        where = ", ".join(f"{p} = {_show(v)}" for p, v in cell.values.items())
        raise ConfigError(f"[sweep] cell {cell.index} ({where}): {err}") from None


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict, str)) else str(value)


# --- paths ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """Where a path points: the table (``head``), the entry of an array of tables (``index``, else None) and the
    keys inside it (the last one is the key set)."""

    head: str
    index: int | None
    keys: tuple[str, ...]

    def table(self, spec: dict[str, Any]) -> dict:
        """The (inline) table of ``spec`` that holds the key set."""
        table = spec[self.head] if self.index is None else spec[self.head][self.index]
        for part in self.keys[:-1]:
            table = table[part]
        return table

    def set(self, spec: dict[str, Any], value: Any) -> None:
        self.table(spec)[self.keys[-1]] = copy.deepcopy(value)


def locate_all(spec: dict[str, Any], path: str) -> list[Target]:
    """Every place ``path`` points to: one, or with ``*`` as the entry (``schemes.*.s``) every entry of the array
    that sets the key in ``spec`` (at least one, else a :class:`ConfigError` naming the entries)."""
    head, _, rest = path.partition(".") if isinstance(path, str) else ("", "", "")
    if head not in ARRAYS or not rest.startswith("*."):
        return [locate(spec, path)]
    key = rest[2:]
    entries = spec.get(head) if isinstance(spec.get(head), list) else []
    found = [i for i, e in enumerate(entries) if isinstance(e, dict) and _has(e, key)]
    if not found:
        raise ConfigError(f"[sweep] {path!r}: no [[{head}]] entry sets {key!r} (a '*' path moves the key of every "
                          f"entry that has it); the entries are {', '.join(repr(_label(head, e)) for e in entries)}")
    return [Target(head, i, _within(entries[i], key, path, f"[[{head}]] {_label(head, entries[i])!r}"))
            for i in found]


def _has(table: dict, dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(table, dict) or part not in table:
            return False
        table = table[part]
    return True


def locate(spec: dict[str, Any], path: str) -> Target:
    """Where ``path`` points in ``spec``; a :class:`ConfigError` naming what exists when the path matches nothing
    (or a name that several entries share)."""
    if not isinstance(path, str) or not path:
        raise ConfigError(f"[sweep] path {path!r}: a path is a non-empty dotted string, e.g. 'delay.alpha'")
    head, _, rest = path.partition(".")
    if head in SINGLE:
        table = spec.get(head)
        if not isinstance(table, dict):
            there = [t for t in (*SINGLE, *ARRAYS) if t in spec]
            raise ConfigError(f"[sweep] {path!r}: the spec has no [{head}] table; it has {', '.join(there)}")
        return Target(head, None, _within(table, rest, path, f"[{head}]"))
    if head in ARRAYS:
        index, rest = _entry(spec, head, rest, path)
        entry = spec[head][index]
        return Target(head, index, _within(entry, rest, path, f"[[{head}]] {_label(head, entry)!r}"))
    raise ConfigError(f"[sweep] {path!r}: a path starts with one of {', '.join(SINGLE + ARRAYS)} "
                      "(schemes and delays go on with an entry's label or name)")


def _label(head: str, table: dict) -> str:
    from .harness import delay_label, scheme_label

    return scheme_label(table) if head.startswith("scheme") else delay_label(table)


def _entry(spec: dict, head: str, rest: str, path: str) -> tuple[int, str]:
    """The index of the ``[[schemes]]`` / ``[[delays]]`` entry that ``rest`` starts with (by label, else by a
    unique name), and what follows it. Labels may hold dots ("pareto alpha=2.0"): the longest match wins."""
    entries = spec.get(head)
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(f"[sweep] {path!r}: the spec has no [[{head}]] tables"
                          + (f" (it has a single [{head[:-1]}] table: use '{head[:-1]}.KEY')"
                             if head[:-1] in spec else ""))
    labels = [_label(head, e) for e in entries]
    found = [(len(lab), i) for i, lab in enumerate(labels) if rest.startswith(lab + ".")]
    if found:
        _, index = max(found)
        return index, rest[len(labels[index]) + 1:]
    name, _, key = rest.partition(".")
    named = [i for i, e in enumerate(entries) if e.get("name") == name]
    if len(named) == 1 and key:
        return named[0], key
    if len(named) > 1:
        raise ConfigError(f"[sweep] {path!r}: {len(named)} [[{head}]] entries are named {name!r}; name one by its "
                          f"label: {', '.join(repr(labels[i]) for i in named)}")
    raise ConfigError(f"[sweep] {path!r} matches no [[{head}]] entry; accepted: '{head}.LABEL_OR_NAME.KEY' with the "
                      f"labels {', '.join(map(repr, labels))} or the names "
                      f"{', '.join(repr(n) for n in dict.fromkeys(str(e.get('name')) for e in entries))}")


def _within(table: dict, rest: str, path: str, where: str) -> tuple[str, ...]:
    """The keys of ``rest`` (``a.b.c``) down the inline tables of ``table``: every part but the last must be a
    table of the spec."""
    if not rest:
        raise ConfigError(f"[sweep] {path!r} names the table {where} but no key of it; accepted: "
                          f"'{path}.KEY', KEY one of {', '.join(_keys(table))}")
    *inner, key = rest.split(".")
    for i, part in enumerate(inner):
        if not isinstance(table.get(part), dict):
            raise ConfigError(f"[sweep] {path!r}: {where} has no inline table {'.'.join(inner[:i + 1])!r}; its keys "
                              f"are {', '.join(_keys(table))}")
        table, where = table[part], f"{where} {part}"
    if key in ("name", "label"):
        raise ConfigError(f"[sweep] {path!r}: the key {key!r} cannot be swept (labels are frozen, and a cell sweeps "
                          "the parameters of one model); sweep a parameter, or list the models as [[delays]] or "
                          "[[schemes]] entries")
    return (*inner, key)


def _keys(table: dict) -> list[str]:
    return [repr(k) for k in table] or ["(none)"]


def _substitute(base: dict[str, Any], targets: dict[str, list[Target]], values: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(base)
    for path, value in values.items():
        for target in targets[path]:
            target.set(spec, value)
    return spec
