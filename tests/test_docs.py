"""The README and the pages under docs/ link to files and sections that exist (the README is mostly links now)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as code-hosting sites make it: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", lambda m: "_" if m.group(0) == "_" else "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue                      # http(s), mailto: not checked (no network here)
        path, _, anchor = target.partition("#")
        where = page if not path else (page.parent / path).resolve()
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(f"{target}: no such section")
    assert broken == []


def test_the_slug_follows_the_headings_rules():
    assert slug("Partial work: chunked workers and `partial_coded`") == "partial-work-chunked-workers-and-partial_coded"
    assert slug("Schemes, delays, workloads, the simulated cluster") == "schemes-delays-workloads-the-simulated-cluster"


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Title\n[ok](#title) [bad](#nowhere) [gone](missing.md)\n")
    found = [t for t in LINK.findall(page.read_text())]
    assert found == ["#title", "#nowhere", "missing.md"]
    assert "title" in anchors(page) and "nowhere" not in anchors(page)
