"""The layout: every import in ``gradcode`` and ``mpi_runtime`` points down a layer or sideways without a cycle.

The layers, bottom to top, are listed in docs/design.md ("Layers"); :data:`LAYERS` is the same list as data. The
check parses the source (every ``import`` statement, including those inside functions and ``TYPE_CHECKING``
blocks, since each is a dependency at some point), resolves each to the module it names, and fails on

- an **upward import**: a module importing one of a higher layer;
- a **cycle**: modules that import each other, directly or through others (a package's ``__init__`` counts as a
  module: a submodule that imports its own package's ``__init__`` makes a cycle with it);
- a **module over 600 lines**, or a module that no layer claims (a new module must be placed).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 600

# (layer, module prefixes), bottom to top; the longest matching prefix places a module.
LAYERS = [
    ("plumbing", ["gradcode.errors", "gradcode.plumbing"]),
    ("core", ["gradcode.codes", "gradcode.delays", "gradcode.schemes", "gradcode.workloads", "gradcode.optim",
              "gradcode.network"]),
    ("spec", ["gradcode.spec"]),
    ("clusters", ["gradcode.clusters", "mpi_runtime"]),
    ("output", ["gradcode.output"]),
    ("study", ["gradcode.study"]),
    ("interface", ["gradcode", "gradcode.cli", "gradcode.__main__"]),
]


def modules() -> dict[str, Path]:
    """Every module of the two packages by dotted name (a package by its own name, for its ``__init__``)."""
    found = {}
    for top in ("gradcode", "mpi_runtime"):
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def layer_of(name: str) -> int | None:
    best = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and (best is None or len(p) > best[0]):
                best = (len(p), rank)
    return None if best is None else best[1]


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules that module ``name`` imports (``from X import y`` names ``X.y`` when that is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()

    def add(target: str) -> None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                where = ".".join(base + ([node.module] if node.module else []))
            else:
                where = node.module or ""
            subs = [f"{where}.{a.name}" for a in node.names if f"{where}.{a.name}" in known]
            if subs:
                found.update(s for s in subs if s != name)
            if len(subs) < len(node.names):
                add(where)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def test_every_module_has_a_layer():
    assert [m for m in modules() if layer_of(m) is None] == []


def test_no_import_runs_up_a_layer():
    up = [f"{m} ({LAYERS[layer_of(m)][0]}) -> {t} ({LAYERS[layer_of(t)][0]})"
          for m, targets in graph().items() for t in sorted(targets)
          if layer_of(m) is not None and layer_of(t) is not None and layer_of(t) > layer_of(m)]
    assert up == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_no_module_over_600_lines():
    long = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_the_cycle_finder_finds_cycles(edges, expected):
    assert cycles(edges) == expected


def test_the_import_reader_sees_function_level_and_relative_imports(tmp_path):
    (tmp_path / "pkg").mkdir()
    source = "from . import sib\nfrom .sub import thing\n\ndef f():\n    from ..other import x\n    import top.mod\n"
    path = tmp_path / "pkg" / "mod.py"
    path.write_text(source)
    known = {"top": path, "top.pkg": path, "top.pkg.sib": path, "top.pkg.sub": path, "top.other": path,
             "top.mod": path, "top.pkg.mod": path}
    assert imports("top.pkg.mod", path, known) == {"top.pkg.sib", "top.pkg.sub", "top.other", "top.mod"}
