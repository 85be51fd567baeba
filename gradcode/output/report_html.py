"""``report.html``: a report's ``report.md`` as one self-contained page to browse.

Design
------
One source of truth: the HTML is made from the text of ``report.md`` (written by :func:`gradcode.output.report.render`
for a comparison, by :mod:`gradcode.study.sweep_run` for a sweep), so both always say the same. That text uses a small
part of Markdown, and this module reads exactly that part:

- ``#`` / ``##`` headings; paragraphs (consecutive lines); ``- `` list items (a line indented by two spaces
  continues the item);
- tables (``| a | b |`` lines, the second one ``|---|``): every table becomes sortable, a click on a column's
  header sorts its rows by that column (numbers by value: ``6.1 ± 1.7`` sorts as 6.1; ``-`` last), a second click
  reverses; a few lines of inline JavaScript;
- an image alone on its line, ``![alt](plots/x.png)``: embedded as a base64 PNG (``data:`` URL, so the page needs
  no other file); a following paragraph that starts with ``Reading:`` is its caption;
- inline ``**bold**``, ```code``` (and RST's double backquotes, in the definitions copied from a docstring) and
  links ``[text](path)``: relative paths, kept relative (a link to a ``report.md`` whose ``report.html`` exists
  points to the latter).

Every piece of text is escaped with :func:`html.escape`; no external script, style sheet or font.

Example::

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "report.md").write_text("# Title\\n\\n| scheme | time |\\n|---|---|\\n| sync | 2 |\\n")
    >>> "<th" in write_html(folder / "report.md").read_text()
    True
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

INLINE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+)\)"      # an image
                    r"|\[(?P<text>[^\]]+)\]\((?P<href>[^)\s]+)\)"     # a link
                    r"|\*\*(?P<bold>.+?)\*\*"
                    r"|``(?P<code2>.+?)``|`(?P<code>[^`]+)`")
IMAGE_LINE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+)\)$")

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1400px; margin: 1.5em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; margin-top: 1.6em; }
div.wide { overflow-x: auto; }   /* a wide table scrolls, the page does not */
table { border-collapse: collapse; font-size: 0.8em; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; }
th { background: #f0f0f0; cursor: pointer; user-select: none; white-space: nowrap; }
th.asc::after { content: " \\25B2"; } th.desc::after { content: " \\25BC"; }
tr:nth-child(even) td { background: #fafafa; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #333; margin-top: 0.3em; }
code { background: #f4f4f4; padding: 0 0.2em; }
"""

SORT_SCRIPT = """
function sortKey(text) {
  const n = parseFloat(text.replace(/[^0-9eE.+-].*$/, ""));
  return isNaN(n) ? null : n;
}
document.querySelectorAll("table.sortable th").forEach((th, _) => th.addEventListener("click", () => {
  const table = th.closest("table"), body = table.tBodies[0], col = th.cellIndex;
  const up = !th.classList.contains("asc");
  table.querySelectorAll("th").forEach(h => h.classList.remove("asc", "desc"));
  th.classList.add(up ? "asc" : "desc");
  const rows = Array.from(body.rows).map(r => [r, r.cells[col].textContent.trim()]);
  rows.sort(([, a], [, b]) => {
    const x = sortKey(a), y = sortKey(b);
    if (x !== null && y !== null) return up ? x - y : y - x;
    if (x !== null || y !== null) return x === null ? 1 : -1;   // no number: last
    return up ? a.localeCompare(b) : b.localeCompare(a);
  });
  rows.forEach(([r]) => body.appendChild(r));
}));
"""


def inline(text: str, folder: Path) -> str:
    """One line of Markdown text as HTML: every piece escaped, links kept relative to ``folder``."""
    out, at = [], 0
    for m in INLINE.finditer(text):
        out.append(html.escape(text[at:m.start()]))
        if m["src"] is not None:
            out.append(image(m["alt"], m["src"], folder))
        elif m["href"] is not None:
            out.append(f'<a href="{html.escape(link(m["href"], folder))}">{html.escape(m["text"])}</a>')
        elif m["bold"] is not None:
            out.append(f"<strong>{html.escape(m['bold'])}</strong>")
        else:
            out.append(f"<code>{html.escape(m['code2'] or m['code'])}</code>")
        at = m.end()
    return "".join(out) + html.escape(text[at:])


def link(href: str, folder: Path) -> str:
    """A relative link as is, except that a ``report.md`` with a ``report.html`` beside it becomes the latter."""
    if href.endswith("report.md") and (folder / href).with_suffix(".html").is_file():
        return href[: -len(".md")] + ".html"
    return href


def image(alt: str, src: str, folder: Path) -> str:
    """An ``<img>`` holding the PNG itself (base64); a visible note when the file is missing."""
    path = folder / src
    if not path.is_file():
        return f'<em class="missing">(figure {html.escape(src)} is missing)</em>'
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" title="{html.escape(src)}" src="data:image/png;base64,{data}">'


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def table(lines: list[str], folder: Path) -> str:
    """A Markdown table (header, ``|---|`` line, rows) as a sortable HTML table."""
    head, rows = _cells(lines[0]), [_cells(line) for line in lines[2:]]
    out = ['<div class="wide"><table class="sortable"><thead><tr>']
    out += [f"<th>{inline(c, folder)}</th>" for c in head]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{inline(c, folder)}</td>" for c in row) + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    """The Markdown as (kind, lines) blocks: heading, table, list, image, paragraph."""
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        kind = ("blank" if not line.strip() else "heading" if line.startswith("#") else
                "table" if line.startswith("|") else "image" if IMAGE_LINE.match(line.strip()) else
                "list" if line.startswith("- ") else "more" if line.startswith("  ") and blocks
                and blocks[-1][0] == "list" else "paragraph")
        if kind == "more":
            blocks[-1][1][-1] += " " + line.strip()
        elif kind in ("table", "list", "paragraph") and blocks and blocks[-1][0] == kind:
            blocks[-1][1].append(line)
        elif kind != "blank":
            blocks.append((kind, [line]))
        elif blocks and blocks[-1][0] != "blank":
            blocks.append(("blank", []))
    return [b for b in blocks if b[0] != "blank"]


def to_html(text: str, folder: Path) -> str:
    """The whole page for the Markdown ``text`` of a report in ``folder``."""
    blocks, body = _blocks(text), []
    title = next((lines[0].lstrip("#").strip() for kind, lines in blocks if kind == "heading"), "report")
    i = 0
    while i < len(blocks):
        kind, lines = blocks[i]
        if kind == "heading":
            level = min(len(lines[0]) - len(lines[0].lstrip("#")), 3)
            body.append(f"<h{level}>{inline(lines[0].lstrip('#').strip(), folder)}</h{level}>")
        elif kind == "table":
            body.append(table(lines, folder))
        elif kind == "list":
            body.append("<ul>" + "".join(f"<li>{inline(item[2:], folder)}</li>" for item in lines) + "</ul>")
        elif kind == "image":
            m = IMAGE_LINE.match(lines[0].strip())
            caption = ""
            if i + 1 < len(blocks) and blocks[i + 1][0] == "paragraph" and blocks[i + 1][1][0].startswith("Reading"):
                caption = f"<figcaption>{inline(' '.join(blocks[i + 1][1]), folder)}</figcaption>"
                i += 1
            body.append(f"<figure>{image(m['alt'], m['src'], folder)}{caption}</figure>")
        else:
            body.append(f"<p>{inline(' '.join(lines), folder)}</p>")
        i += 1
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
            f"<style>{STYLE}</style>\n</head>\n<body>\n" + "\n".join(body)
            + f"\n<script>{SORT_SCRIPT}</script>\n</body>\n</html>\n")


def write_html(markdown: str | Path) -> Path:
    """Write ``report.html`` beside the report ``markdown`` (a ``report.md``), from its text; returns its path."""
    markdown = Path(markdown)
    path = markdown.with_suffix(".html")
    path.write_text(to_html(markdown.read_text(), markdown.parent))
    return path
