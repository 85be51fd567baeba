"""Source checks ruff does not make: the pieces of an implicitly concatenated string, left by line wrapping.

ruff's F541 flags an f-string without placeholders only when no piece of the concatenation has one, so a wrapped
message keeps a useless ``f`` on a piece, or loses it on a piece that holds ``{name}`` (then printed literally).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("gradcode", "mpi_runtime", "examples", "benchmarks", "tests")
PLACEHOLDER = re.compile(r"(?<!\{)\{[A-Za-z_][\w.]*(\[[^\]]*\])?(![rsa])?(:[^{}]*)?\}(?!\})")


def concatenations(source: str) -> list[list[tokenize.TokenInfo]]:
    """Runs of two or more adjacent string tokens (line breaks and comments may sit between them)."""
    runs, run = [], []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.STRING:
            run.append(tok)
        elif tok.type not in (tokenize.NL, tokenize.COMMENT):
            runs += [run] if len(run) > 1 else []
            run = []
    return runs


def problems(source: str) -> list[str]:
    out = []
    for run in concatenations(source):
        has_f = any("f" in re.match(r"[A-Za-z]*", tok.string).group(0).lower() for tok in run)
        for tok in run:
            node = ast.parse(tok.string, mode="eval").body
            if isinstance(node, ast.JoinedStr) and not any(isinstance(v, ast.FormattedValue) for v in node.values):
                out.append(f"line {tok.start[0]}: f prefix without a placeholder: {tok.string}")
            elif has_f and isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and PLACEHOLDER.search(node.value):
                out.append(f"line {tok.start[0]}: placeholder without the f prefix: {tok.string}")
    return out


def test_the_check_finds_both_mistakes():
    assert len(problems('x = 1\nmsg = (f"a {x} "\n       f"b")\n')) == 1
    assert len(problems('x = 1\nmsg = (f"a {x} "\n       "b {x}")\n')) == 1
    assert problems('x = 1\nmsg = (f"a {x} "\n       "b {{x}}")\n') == []


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_string_fragments_left_by_wrapping(folder):
    found = [f"{path.relative_to(ROOT)}: {p}" for path in sorted((ROOT / folder).rglob("*.py"))
             for p in problems(path.read_text())]
    assert found == []
