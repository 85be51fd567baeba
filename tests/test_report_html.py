"""report.html: one self-contained page, read back with Python's HTML parser: every figure embedded, every scheme in
the sortable table, every link to a file that exists, nothing loaded from elsewhere, the text escaped."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gradcode.output.plots import PLOTS
from gradcode.output.report_html import to_html
from gradcode.study.harness import compare
from gradcode.study.sweep_run import sweep

SPEC = {
    "experiment": {"name": "html-test", "description": "a tiny comparison <with markup>"},
    "cluster": {"workers": 4},
    "workload": {"name": "least_squares", "n_samples": 120, "dim": 4},
    "delay": {"name": "pareto", "alpha": 2.5},
    "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 3}, {"name": "adaptive_k_load", "max_batch": 8},
                {"name": "coded", "code": "cyclic_repetition", "s": 1}],
    "run": {"iterations": 6, "seeds": [0, 1], "batch": 8},
}


class Page(HTMLParser):
    """What the tests look at: images, links, table headers and cells, scripts and style sheets, figure captions."""

    def __init__(self, text: str):
        super().__init__()
        self.images, self.links, self.tables, self.external, self.captions = [], [], [], [], []
        self._cell: list[str] | None = None
        self._caption: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs)
        elif tag == "a":
            self.links.append(attrs["href"])
        elif tag == "table":
            self.tables.append({"class": attrs.get("class"), "head": [], "rows": []})
        elif tag == "tr":
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "figcaption":
            self._caption = []
        if tag in ("script", "link") and (attrs.get("src") or attrs.get("href")):
            self.external.append(attrs)

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            text = "".join(self._cell).strip()
            (self.tables[-1]["head"] if tag == "th" else self.tables[-1]["rows"][-1]).append(text)
            self._cell = None
        elif tag == "figcaption":
            self.captions.append("".join(self._caption))
            self._caption = None

    def handle_data(self, data):
        for part in (self._cell, self._caption):
            if part is not None:
                part.append(data)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html") / "out"
    compare(SPEC, out, progress=False, mpi=(False, "not in this test"))
    return out


def _png(img: dict) -> bytes:
    head, _, data = img["src"].partition(",")
    assert head == "data:image/png;base64", img["src"][:40]
    return base64.b64decode(data)


def test_every_figure_is_embedded_with_a_reading(folder):
    page = Page((folder / "report.html").read_text())
    by_name = {img["title"]: _png(img) for img in page.images}
    assert set(by_name) == {f"plots/{name}" for name in PLOTS}     # adaptive_k_load adapts: all five drawn
    for name in PLOTS:
        assert by_name[f"plots/{name}"] == (folder / "plots" / name).read_bytes(), name
    assert len(page.captions) == len(PLOTS) and all(c.startswith("Reading: ") for c in page.captions)
    loss = page.captions[PLOTS.index("loss_vs_time.png")]
    assert "fastest" in loss and any(s in loss for s in ("sync", "fastest_k", "adaptive", "coded"))


def test_every_scheme_is_in_the_sortable_summary_table(folder):
    page = Page((folder / "report.html").read_text())
    summary = next(t for t in page.tables if "scheme" in t["head"] and "mean it. time" in t["head"])
    assert summary["class"] == "sortable"
    column = summary["head"].index("scheme")
    shown = {row[column] for row in summary["rows"] if row}
    expected = {row["scheme"] for row in json.loads((folder / "summary.json").read_text())}
    assert shown == expected and len(expected) == 4
    assert all(t["class"] == "sortable" for t in page.tables)
    assert "addEventListener" in (folder / "report.html").read_text()   # the sorting script is inline


def test_links_point_to_files_that_exist_and_nothing_is_external(folder):
    text = (folder / "report.html").read_text()
    page = Page(text)
    assert not page.external and "http://" not in text and "https://" not in text
    records = [href for href in page.links if href.endswith("records.jsonl")]
    assert len(records) == 2 * 4                                      # one per run
    for href in page.links:
        assert not href.startswith("/") and (folder / href).is_file(), href
    assert "## " not in text and "MPI vs simulator" in text             # every heading converted


def test_text_is_escaped(folder):
    text = (folder / "report.html").read_text()
    assert "a tiny comparison &lt;with markup&gt;" in text and "<with markup>" not in text
    page = to_html("# a <b> & c\n\n| x | y |\n|---|---|\n| <i> | `<code>` **<s>** |\n", folder)
    assert "<b>" not in page and "<i>" not in page and "&lt;code&gt;" in page and "<strong>&lt;s&gt;</strong>" in page
    assert Page(page).tables[0]["rows"][1] == ["<i>", "<code> <s>"]


def test_a_missing_figure_is_said_not_dropped(tmp_path):
    page = to_html("# r\n\n![gone](plots/gone.png)\nReading: nothing.\n", tmp_path)
    assert "plots/gone.png is missing" in page and "<figcaption>Reading: nothing.</figcaption>" in page


def test_a_sweep_writes_report_html_with_its_figures_and_cell_links(tmp_path):
    spec = {key: value for key, value in SPEC.items() if key != "schemes"}
    spec.update(schemes=[{"name": "sync"}, {"name": "fastest_k", "k": 3}], run={"iterations": 4, "seeds": [0]},
                sweep={"delay.alpha": [1.5, 3.0]})
    out = tmp_path / "sweep"
    sweep(spec, out, jobs=1, progress=False)
    page = Page((out / "report.html").read_text())
    assert page.images and all(_png(img)[:8] == b"\x89PNG\r\n\x1a\n" for img in page.images)
    assert len(page.captions) == len(page.images)
    cells = [href for href in page.links if href.startswith("cells/")]
    assert cells == ["cells/000/report.html", "cells/001/report.html"]
    assert all((out / href).is_file() for href in page.links)
    winners = next(t for t in page.tables if "winner" in t["head"])
    assert {row[winners["head"].index("winner")] for row in winners["rows"] if row} <= {"sync", "fastest_k k=3"}
