"""Readable figures and report numbers: legends outside the points, panels wrapped, a timeline
that says what it shows, no empty adaptive.png, numbers to the digits their CI warrants, plain progress lines in a
log, and equal work per worker-step by default (DropCompute's ``micro_load = 1/M``)."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tomli_w

from gradcode.output import plots
from gradcode.output.report import cell, load_runs, mean_ci, reading, table
from gradcode.plumbing.progress import PlainProgress, progress_bar
from gradcode.schemes import make_scheme
from gradcode.study.harness import compare

ROOT = Path(__file__).resolve().parent.parent
NO_MPI = (False, "not in this test")
DELAYS = [{"label": "exp", "name": "exponential"}, {"label": "pareto", "name": "pareto", "alpha": 2.5},
          {"label": "shifted", "name": "shifted_exponential", "a": 1.0, "mu": 1.0},
          {"label": "lognormal", "name": "lognormal"}, {"label": "bimodal", "name": "bimodal", "p": 0.2}]
SPEC = {
    "experiment": {"name": "figures"},
    "cluster": {"workers": 4},
    "workload": {"name": "least_squares", "n_samples": 96, "dim": 3},
    "delays": DELAYS,
    "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 3}, {"name": "adaptive_k", "k0": 2, "burn_in": 1},
                {"name": "coded", "code": "cyclic_repetition", "s": 1},
                {"name": "dropcompute", "M": 2, "tau": "auto", "warmup": 1, "record_steps": 2}],
    "run": {"iterations": 4, "seeds": [0]},
}


@pytest.fixture(scope="module")
def five(tmp_path_factory) -> Path:
    """A comparison of five schemes under five delay models."""
    return compare(SPEC, tmp_path_factory.mktemp("fig") / "out", progress=False, mpi=NO_MPI)


@pytest.fixture
def figures(monkeypatch) -> list:
    """The figures the plots draw, kept open instead of closed after saving."""
    kept = []

    def keep(fig, path):
        fig.canvas.draw()   # lay out as when saved, without closing
        kept.append(fig)

    monkeypatch.setattr(plots, "_save", keep)
    yield kept
    import matplotlib.pyplot as plt

    for fig in kept:
        plt.close(fig)


def png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def columns(fig) -> int:
    """Panels per row: distinct left edges of the visible axes."""
    return len({round(ax.get_position().x0, 3) for ax in fig.axes if ax.get_visible()})


# --- 1. the trade-off legend never covers a point ----------------------------------------------------------------
def _tradeoff_rows(schemes: int, delays: int = 1) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"cluster": "sim", "delay": f"delay {d}", "scheme": f"scheme number {s}", "speedup_target": None,
             "speedup_iteration": float(rng.uniform(0.5, 2.0)), "samples_computed": float(rng.uniform(1e3, 5e3))}
            for d in range(delays) for s in range(schemes)]


@pytest.mark.parametrize("delays", [1, 5])
def test_tradeoff_legend_is_outside_the_axes(figures, tmp_path, delays):
    plots.tradeoff(_tradeoff_rows(9, delays), tmp_path / "t.png")
    (fig,) = figures
    renderer = fig.canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends
    frame = fig.bbox
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            if ax.get_visible():
                assert not box.overlaps(ax.get_window_extent(renderer)), "the legend covers an axes"
        assert frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1, "the legend is cut off"
    assert len(legends[0].get_texts()) == 9        # each scheme once
    assert columns(fig) <= plots.MAX_COLUMNS


# --- 2. adaptive.png only when something adapts --------------------------------------------------------------------
def test_adaptive_png_is_skipped_without_an_adaptive_scheme(tmp_path):
    spec = {**SPEC, "delays": DELAYS[:1], "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 3}]}
    out = compare(spec, tmp_path / "out", progress=False, mpi=NO_MPI)
    written = sorted(p.name for p in (out / "plots").iterdir())
    assert "adaptive.png" not in written
    assert written == sorted(p for p in plots.PLOTS if p != "adaptive.png")
    report = (out / "report.md").read_text()
    assert "adaptive.png" not in report and all(f"plots/{p}" in report for p in written)


def test_adaptive_fields_follow_the_schemes(five):
    runs = load_runs(five)
    assert plots.adapted_fields(runs) == ["k", "tau"]   # adaptive_k adapts k, dropcompute tau; nothing the load
    assert plots.adapted_fields([r for r in runs if r.meta["scheme_name"] in ("sync", "coded")]) == []


# --- 3. the timeline says which cluster and which schemes -----------------------------------------------------------
def test_timeline_title_names_cluster_delay_and_schemes(five, figures, tmp_path):
    plots.timeline(load_runs(five), tmp_path / "t.png", panels=4)
    (fig,) = figures
    title = fig._suptitle.get_text().replace("\n", " ")
    assert "simulated cluster" in title and "delay exp" in title and "seed 0" in title
    shown = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 4 and all(label in title for label in shown)
    assert "(4 of 5 schemes)" in title


# --- 4. multi-panel figures wrap -------------------------------------------------------------------------------------
def test_every_multi_panel_figure_wraps_at_three_panels(five):
    for name in plots.PLOTS:
        width, height = png_size(five / "plots" / name)
        assert 0.4 <= width / height <= 3.0, f"{name}: {width}x{height}"
        assert width <= 1500, f"{name}: {width}x{height}"


@pytest.mark.slow
def test_panels_per_row(five, figures, tmp_path):
    runs = load_runs(five)
    plots.loss_vs_time(runs, tmp_path / "a.png")
    plots.iteration_time_cdf(runs, tmp_path / "b.png")
    plots.adaptive(runs, tmp_path / "c.png")
    for fig in figures:
        assert columns(fig) == 3 and sum(ax.get_visible() for ax in fig.axes) in (5, 10)   # 5 panels (x2: k, tau)
    assert [plots._columns(c) for c in range(1, 8)] == [1, 2, 3, 2, 3, 3, 3]   # 4 panels: 2x2, not 3 + 1


# --- 5. numbers by magnitude ----------------------------------------------------------------------------------------
def _rows(key: str, values) -> list[dict]:
    return [{key: v} for v in values]


def test_cells_show_the_digits_their_ci_warrants():
    """report.md's cells are gradcode.output.numfmt's (whose own rules are tested with it): checked here on typical
    cases, so that a report never shows noise to 4 digits."""
    from gradcode.output.numfmt import fmt_ci

    for values in ([2.017e-14 - 2.0e-14, 2.017e-14, 2.017e-14 + 2.0e-14], [1.20, 1.234, 1.268], [1000.0, 1400.0]):
        assert cell(_rows("x", values), "x") == fmt_ci(*mean_ci(values))
    noise = cell(_rows("x", [2.017e-14 - 2.0e-14, 2.017e-14, 2.017e-14 + 2.0e-14]), "x")
    assert noise == "2e-14 ± 5e-14" and "2.017" not in noise and "4.968" not in noise
    assert "1.234" not in cell(_rows("x", [1.20, 1.234, 1.268]), "x")       # half-width 0.0845: 1.23 at most
    assert cell(_rows("x", [3.14159265]), "x").startswith("3.14")           # no CI: at least 3 significant figures
    assert cell(_rows("x", [None, 2.0, 2.5]), "x").endswith("(2/3)")


def test_reading_gives_the_winner_with_its_ci():
    from gradcode.output.numfmt import fmt_ci

    rows = []
    for scheme, times in (("sync", [10.0, 11.0, 12.0]), ("fast", [5.0, 5.1, 5.2])):
        for seed, t in enumerate(times):
            rows.append({"cluster": "sim", "delay": "d", "scheme": scheme, "seed": seed, "status": "complete",
                         "mean_iteration_time": t, "speedup_iteration": 11.0 / t, "samples_computed": 100.0 * t,
                         "bytes": None})
    (line,) = reading(rows, None)
    assert f"fast ({fmt_ci(*mean_ci([5.0, 5.1, 5.2]))}" in line and "± " in line and "x sync" in line


# --- 6. progress: plain lines in a log ------------------------------------------------------------------------------
@pytest.mark.slow
def test_progress_to_a_pipe_has_no_carriage_returns(tmp_path):
    spec = {**SPEC, "delays": DELAYS[:2], "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 3}]}
    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "gradcode", "compare", str(path), "--out", str(tmp_path / "out")],
                          capture_output=True, env=env, timeout=120)   # bytes: text mode would turn \r into \n
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert b"\r" not in proc.stderr and b"\r" not in proc.stdout
    lines = [line for line in err.splitlines() if "run" in line and "/4" in line]
    assert lines and lines[-1].startswith("figures: 4/4 run")


def test_plain_progress_writes_a_line_per_tenth():
    buf = io.StringIO()
    bar = PlainProgress(1000, desc="x", unit="it", file=buf)
    for _ in range(1000):
        bar.update(1)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 10 and lines[-1] == "x: 1000/1000 it" and "\r" not in buf.getvalue()
    resumed = io.StringIO()
    PlainProgress(4, desc="y", unit="run", initial=4, file=resumed)
    assert resumed.getvalue() == "y: 4/4 run (already done)\n"
    silent = io.StringIO()
    with progress_bar(5, disable=True, file=silent) as off:
        off.update(5)
    assert silent.getvalue() == ""


def test_progress_bar_is_tqdm_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    bar = progress_bar(3, file=Terminal())
    assert type(bar).__name__ == "tqdm"
    bar.close()
    assert isinstance(progress_bar(3, file=io.StringIO()), PlainProgress)


# --- 7. equal work by default ---------------------------------------------------------------------------------------
DEFAULTS = {"sync": {}, "fastest_k": {"k": 3}, "backup": {"b": 1}, "adaptive_k": {}, "dropcompute": {"M": 4},
            "coded": {"code": "cyclic_repetition", "s": 2}}


def test_every_default_worker_step_is_syncs_work():
    """A step is one unit of load for every scheme whose load is not the method itself (a code's ``s + 1``)."""
    for name, params in DEFAULTS.items():
        scheme = make_scheme(name, n=6, **params)
        load = np.asarray(scheme.plan(0).load, dtype=float)
        expected = scheme.code.s + 1 if name == "coded" else 1.0
        np.testing.assert_allclose(load, expected, err_msg=name)
        assert scheme.work_note is None, name


def test_dropcompute_default_micro_load_is_one_over_m():
    from gradcode.delays import make_delay

    scheme = make_scheme("dropcompute", n=3, M=4)
    assert scheme.micro_load == 0.25
    delay = make_delay("exponential")
    micro, _ = scheme.micro_times(delay, 0, 0)
    raw, _ = delay.sample_micro(0, 0, 3, 4)
    np.testing.assert_allclose(micro, raw[0] / 4)
    paper = make_scheme("dropcompute", n=3, M=4, micro_load=1.0)
    assert paper.plan(0).load.tolist() == [4.0] * 3
    assert "M x micro_load = 4 x 1 = 4 units" in paper.work_note and "1/M" in paper.work_note


def test_report_marks_unequal_work_next_to_the_scheme(tmp_path):
    spec = {**SPEC, "delays": DELAYS[:1],
            "schemes": [{"name": "sync"}, {"label": "drop equal", "name": "dropcompute", "M": 2, "tau": 1.0},
                        {"label": "drop heavy", "name": "dropcompute", "M": 2, "micro_load": 1.0, "tau": 1.0}]}
    from gradcode.output.report import work_notes

    out = compare(spec, tmp_path / "out", progress=False, figures=False, mpi=NO_MPI)
    report = (out / "report.md").read_text()
    assert "| sim | exp | drop heavy † | 1 |" in report and "| sim | exp | drop equal | 1 |" in report
    assert "† drop heavy: unequal work: a step is M x micro_load = 2 x 1 = 2 units" in report
    assert "drop equal:" not in report
    runs = load_runs(out)
    assert list(work_notes(runs)) == ["drop heavy"]
    rows = json.loads((out / "summary.json").read_text())
    assert table(rows)[-1].startswith("|")   # no notes, no footnote


@pytest.mark.parametrize("batch", [None, 4])
def test_dropcompute_without_dropping_computes_what_sync_computes(tmp_path, batch):
    """Equal work by default, in samples too: whole partitions (no batch) or mini-batches of ``batch`` samples."""
    drop = {"name": "dropcompute", "M": 3, "tau": 1e9, "warmup": 0}
    run = {**SPEC["run"], **({} if batch is None else {"batch": batch * 3})}
    schemes = [{"name": "sync"}, drop if batch is None else {**drop, "batch": batch}]
    out = compare({**SPEC, "delays": DELAYS[:1], "schemes": schemes, "run": run}, tmp_path / "out", progress=False,
                  figures=False, mpi=NO_MPI)
    sync, dropcompute = json.loads((out / "summary.json").read_text())
    assert dropcompute["computed_units"] == pytest.approx(sync["computed_units"])
    assert dropcompute["samples_computed"] == pytest.approx(sync["samples_computed"])


def test_an_outside_legend_widens_the_figure_not_the_panel():
    """With long labels, a one-panel figure's axes keep most of a panel's width: the legend adds its own."""
    from gradcode.output import plots

    plt = plots._pyplot()
    fig, ((ax,),) = plots._grid(plt, 1)
    for i in range(5):
        ax.plot([0, 1], [i, i + 1], label=f"coded/cyclic_mds s={i} with a long label")
    plots._outside_legend(fig, [ax])
    fig.canvas.draw()
    panel = ax.get_window_extent().width / fig.dpi
    plt.close(fig)
    assert panel > 0.7 * plots.PANEL[0], panel
