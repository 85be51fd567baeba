"""Shared plumbing of the examples: command line, markdown tables, figures. Nothing here is part of a lesson."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # the examples are small: threads only fight each other

import matplotlib

matplotlib.use("Agg")   # files only, no display needed


def parse_args(name: str, doc: str, argv=None) -> argparse.Namespace:
    """``--out DIR`` (default ``results/examples/<name>``) and ``--quick`` (the reduced version)."""
    parser = argparse.ArgumentParser(prog=f"examples/{name}.py", description=(doc or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=f"results/examples/{name}", help="output folder (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="the reduced version (seconds instead of minutes)")
    return parser.parse_args(argv)


def table(headers: list[str], rows: list[list]) -> str:
    """A GitHub markdown table; floats get 4 significant digits."""
    def cell(x) -> str:
        if isinstance(x, float):
            return f"{x:.4g}"
        return str(x)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def write_report(out: str | Path, name: str, text: str) -> Path:
    """Print ``text`` and write it to ``<out>/<name>.md``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.md"
    path.write_text(text.rstrip() + "\n")
    print(text)
    print(f"\nwrote {path}")
    return path


def save_figure(fig, out: str | Path, name: str) -> Path:
    """Save ``fig`` as ``<out>/<name>.png`` and close it."""
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")
    return path
