"""examples/tour.ipynb: it runs top to bottom (nbclient, a real Jupyter kernel) in under a minute, with the parameters
as shipped and with a student's changes, and the committed copy holds its outputs so it reads without running."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "tour.ipynb"
PARAMETERS = {"N": 6, "S": 2, "STRAGGLERS": [1, 4]}


def _execute(nb, folder: Path) -> float:
    start = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(folder)}},
                            allow_errors=False).execute()
    return time.perf_counter() - start


def _text(nb) -> str:
    return "\n".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                     for out in cell.get("outputs", []) if out.output_type == "stream")


def _images(nb) -> int:
    return sum("image/png" in out.get("data", {}) for cell in nb.cells if cell.cell_type == "code"
               for out in cell.get("outputs", []))


def _set(nb, **values) -> None:
    """Change the parameter cell as a student would: rewrite the assignments of N, S, STRAGGLERS."""
    cell = next(c for c in nb.cells if c.cell_type == "code" and re.search(r"^STRAGGLERS = ", c.source, re.M))
    for name, value in values.items():
        cell.source, count = re.subn(rf"^{name} = .*?(\s+#|$)", rf"{name} = {value!r}\1", cell.source, flags=re.M)
        assert count == 1, name


def test_the_notebook_runs_in_under_a_minute(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        cell.pop("outputs", None) if cell.cell_type == "code" else None
    seconds = _execute(nb, tmp_path)
    assert seconds < 60, f"the tour took {seconds:.0f} s"
    text = _text(nb)
    assert "NotDecodableError" in text and "DecodeFallbackWarning" in text
    assert "a^T B = [1. 1. 1. 1. 1. 1.]" in text
    assert re.search(r"residual = \d\.\de-1[4-6]", text)                         # the exact decode, to rounding
    assert "worker 4 holds partitions (0, 4, 5)" in text                         # code.support(i)
    assert _images(nb) == 4                                      # B, the costs, the timelines, the comparison
    report = Path(re.search(r"open (\S+report\.html) in a browser", text).group(1))
    assert report.is_file() and report.parent.name.startswith("gradcode-tour-")   # a folder of its own (OUT = None)
    shutil.rmtree(report.parent)
    assert not any(tmp_path.iterdir())                           # nothing written where the notebook runs
    assert text.count("first to the target:") == 2               # the reading, once for each delay model
    _check_verdicts(text)


def test_a_student_changes_n_s_and_the_stragglers(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    _set(nb, N=5, S=1, STRAGGLERS=[3], OUT=str(tmp_path / "comparison"))
    _execute(nb, tmp_path)
    text = _text(nb)
    assert "5 workers, code for S = 1 stragglers; late: [3]; the master hears from [0, 1, 2, 4]" in text
    assert "a^T B = [1. 1. 1. 1. 1.]" in text and "late [3, 0]: NotDecodableError" in text
    assert "fastest-k (k = 4, load 1)" in text and "code (k = 4, load 2)" in text
    _check_verdicts(text)
    assert (tmp_path / "comparison" / "report.html").is_file()


def _check_verdicts(text: str) -> None:
    """The sentences of section 4 say what its numbers say: faster than sync exactly when the ratio is below 1."""
    verdicts = re.findall(r"its load is \d+x\), ([\d.]+)x sync's: (faster|slower) than sync", text)
    assert len(verdicts) == 2, text
    for ratio, word in verdicts:
        assert (float(ratio) < 1) == (word == "faster"), (ratio, word)


def test_the_committed_notebook_holds_its_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))   # run top to bottom, once
    assert not any(out.output_type == "error" for c in code for out in c.outputs)
    assert _images(nb) == 4 and "NotDecodableError" in _text(nb)
    assert NOTEBOOK.stat().st_size < 1_500_000
