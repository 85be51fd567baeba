"""Sweeps: the [sweep] grammar (products, zip, label paths, bad paths), the cells' results whatever the executor,
resuming an interrupted sweep, and the command line's errors."""

from __future__ import annotations

import copy
import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomli_w
from helpers import cli, mpi_env

from gradcode.errors import ConfigError
from gradcode.output import regimes
from gradcode.study.harness import compare, load_experiment
from gradcode.study.sweep import expand
from gradcode.study.sweep_run import WALL, sweep
from mpi_runtime.launch import find_mpiexec

TIMEOUT = 240


def base(**sweep_table) -> dict:
    """A small comparison (4 workers, 3 schemes, 2 seeds) with the given [sweep] table."""
    return {
        "experiment": {"name": "tiny"},
        "cluster": {"workers": 4},
        "workload": {"name": "least_squares", "n_samples": 200, "dim": 5},
        "delay": {"name": "pareto", "alpha": 2.0},
        "schemes": [{"name": "sync"}, {"name": "fastest_k", "k": 3},
                    {"name": "coded", "code": "cyclic_repetition", "s": 1}],
        "run": {"iterations": 8, "seeds": [0, 1], "target_loss": 0.05},
        "sweep": sweep_table,
    }


FOUR = {"delay.alpha": [1.5, 3.0], "schemes.coded.s": [1, 2]}


# --- the grammar ----------------------------------------------------------------------------------------------
def test_product_of_the_lists_first_path_slowest():
    grid = expand(base(**{"delay.alpha": [1.5, 2.5, 3.0], "schemes.coded.s": [1, 2], "cluster.workers": [4, 6]}))
    assert len(grid.cells) == 12
    assert grid.paths == ["delay.alpha", "schemes.coded.s", "cluster.workers"]
    assert [c.index for c in grid.cells] == list(range(12))
    assert [c.values["delay.alpha"] for c in grid.cells[:5]] == [1.5, 1.5, 1.5, 1.5, 2.5]
    assert [c.values["cluster.workers"] for c in grid.cells[:4]] == [4, 6, 4, 6]
    cell = grid.cells[7]                 # alpha 2.5, s 2, workers 6
    assert cell.values == {"delay.alpha": 2.5, "schemes.coded.s": 2, "cluster.workers": 6}
    assert cell.spec["delay"]["alpha"] == 2.5 and cell.spec["cluster"]["workers"] == 6
    assert cell.spec["schemes"][2]["s"] == 2 and cell.spec["schemes"][1]["k"] == 3
    assert "sweep" not in cell.spec
    assert grid.base["delay"]["alpha"] == 2.0          # the base is not changed by its cells


def test_zip_pairs_the_lists_and_needs_equal_lengths():
    grid = expand(base(**{"delay.alpha": [1.5, 3.0], "run.iterations": [4, 9], "zip": True}))
    assert [c.values for c in grid.cells] == [{"delay.alpha": 1.5, "run.iterations": 4},
                                              {"delay.alpha": 3.0, "run.iterations": 9}]
    assert grid.cells[1].spec["run"]["iterations"] == 9 and grid.zipped
    with pytest.raises(ConfigError, match="equal lengths.*'delay.alpha': 2.*'run.iterations': 3"):
        expand(base(**{"delay.alpha": [1.5, 3.0], "run.iterations": [4, 9, 10], "zip": True}))


def test_entries_by_label_by_generated_label_and_by_unique_name():
    raw = base(**{"schemes.fast.k": [2, 3]})
    raw["schemes"][1]["label"] = "fast"
    assert [c.spec["schemes"][1]["k"] for c in expand(raw).cells] == [2, 3]
    # the label the reports give an unlabelled entry, dots and spaces included
    raw = base(**{"schemes.coded/cyclic_repetition s=1.s": [1, 2]})
    assert [c.spec["schemes"][2]["s"] for c in expand(raw).cells] == [1, 2]
    raw = base(**{"delays.heavy.alpha": [1.5, 2.5], "delays.pareto alpha=3.0.t_m": [1.0, 2.0]})
    del raw["delay"]
    raw["delays"] = [{"label": "heavy", "name": "pareto", "alpha": 2.0}, {"name": "pareto", "alpha": 3.0}]
    cells = expand(raw).cells
    assert [(c.spec["delays"][0]["alpha"], c.spec["delays"][1]["t_m"]) for c in cells] == [
        (1.5, 1.0), (1.5, 2.0), (2.5, 1.0), (2.5, 2.0)]
    assert cells[0].spec["delays"][1]["alpha"] == 3.0


def test_nested_key_inside_an_inline_table():
    raw = base(**{"delay.base.alpha": [1.5, 3.0]})
    raw["delay"] = {"name": "persistent", "base": {"name": "pareto", "alpha": 2.0}, "workers": [0], "slowdown": 2.0}
    cells = expand(raw).cells
    assert [c.spec["delay"]["base"] for c in cells] == [{"name": "pareto", "alpha": 1.5},
                                                         {"name": "pareto", "alpha": 3.0}]


def test_labels_are_frozen_across_cells_without_the_swept_keys():
    grid = expand(base(**FOUR))
    labels = {tuple(s["label"] for s in c.spec["schemes"]) for c in grid.cells}
    assert labels == {("sync", "fastest_k k=3", "coded/cyclic_repetition")}
    assert {c.spec["delay"]["label"] for c in grid.cells} == {"pareto"}
    raw = base(**{"schemes.fastest_k.k": [2, 3]})
    raw["schemes"][1]["label"] = "mine"
    assert {c.spec["schemes"][1]["label"] for c in expand(raw).cells} == {"mine"}   # a given label is kept


def test_a_star_moves_the_key_of_every_entry_that_sets_it():
    raw = base(**{"schemes.*.s": [1, 3], "delay.alpha": [1.5, 3.0]})
    raw["schemes"].append({"name": "coded", "code": "fractional_repetition", "s": 1})
    grid = expand(raw)
    assert len(grid.cells) == 4 and grid.paths == ["schemes.*.s", "delay.alpha"]
    for cell in grid.cells:
        s = cell.values["schemes.*.s"]
        assert [e.get("s") for e in cell.spec["schemes"]] == [None, None, s, s]
    # labels are frozen without s for both codes, so their rows line up across cells
    assert {tuple(e["label"] for e in c.spec["schemes"][2:]) for c in grid.cells} == {
        ("coded/cyclic_repetition", "coded/fractional_repetition")}
    with pytest.raises(ConfigError, match="no \\[\\[schemes\\]\\] entry sets 'b'.*'sync'"):
        expand(base(**{"schemes.*.b": [1, 2]}))


@pytest.mark.parametrize("path, message", [
    ("delay", "names the table \\[delay\\] but no key"),
    ("nothing.x", "a path starts with one of cluster, workload, delay, scheme, run, network, schemes, delays"),
    ("delays.pareto.alpha", "no \\[\\[delays\\]\\] tables \\(it has a single \\[delay\\] table"),
    ("scheme.k", "no \\[scheme\\] table; it has"),
    ("schemes.backup.b", "matches no \\[\\[schemes\\]\\] entry.*'sync', 'fastest_k k=3'.*names 'sync', 'fastest_k'"),
    ("delay.comm.mean", "no inline table 'comm'; its keys are 'name', 'alpha'"),
    ("delay.name", "the key 'name' cannot be swept"),
    ("schemes.coded", "matches no \\[\\[schemes\\]\\] entry"),
])
def test_a_path_that_matches_nothing_names_what_exists(path, message):
    with pytest.raises(ConfigError, match=message):
        expand(base(**{path: [1, 2]}))


def test_a_name_two_entries_share_is_ambiguous():
    raw = base(**{"schemes.fastest_k.k": [2, 3]})
    raw["schemes"].append({"name": "fastest_k", "k": 2})
    with pytest.raises(ConfigError, match="2 \\[\\[schemes\\]\\] entries are named 'fastest_k'.*'fastest_k k=3', "
                                          "'fastest_k k=2'"):
        expand(raw)
    raw["sweep"] = {"schemes.fastest_k k=2.k": [1, 2]}       # by its label: fine
    assert [c.spec["schemes"][3]["k"] for c in expand(raw).cells] == [1, 2]


@pytest.mark.parametrize("table, message", [
    ({}, "names no path"),
    ({"delay.alpha": 2.0}, "must be a non-empty list"),
    ({"delay.alpha": []}, "must be a non-empty list"),
    ({"delay.alpha": [2.0], "zip": "yes"}, "zip must be true or false"),
])
def test_bad_sweep_tables(table, message):
    with pytest.raises(ConfigError, match=message):
        expand(base(**table))


def test_a_bad_value_fails_up_front_naming_the_cell():
    with pytest.raises(ConfigError, match="cell 2 \\(schemes.fastest_k.k = 9\\).*k"):
        expand(base(**{"schemes.fastest_k.k": [2, 3, 9]}))
    with pytest.raises(ConfigError, match="cell 1 \\(cluster.workers = 2\\)"):
        expand(base(**{"cluster.workers": [4, 2]}))     # fastest_k k = 3 > n = 2


def test_compare_refuses_a_sweep_spec_and_a_spec_without_sweep_is_no_sweep():
    with pytest.raises(ConfigError, match="gradcode sweep"):
        load_experiment(base(**FOUR))
    raw = base()
    del raw["sweep"]
    with pytest.raises(ConfigError, match="no \\[sweep\\] table"):
        expand(raw)


# --- running --------------------------------------------------------------------------------------------------
def read_csv(path: Path, drop_wall: bool = True) -> list[dict]:
    rows = list(csv.DictReader(path.open()))
    assert rows, f"{path} is empty"
    return [{k: v for k, v in r.items() if not (drop_wall and k in WALL)} for r in rows]


@pytest.fixture(scope="module")
def serial(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("serial") / "out"
    sweep(base(**FOUR), out, jobs=1, progress=False)
    return out


def test_the_table_has_one_row_per_cell_cluster_delay_and_scheme(serial):
    rows = read_csv(serial / "sweep.csv")
    assert len(rows) == 4 * 3
    assert [r["cell"] for r in rows] == [str(i) for i in range(4) for _ in range(3)]
    assert [(r["delay.alpha"], r["schemes.coded.s"]) for r in rows[::3]] == [
        ("1.5", "1"), ("1.5", "2"), ("3.0", "1"), ("3.0", "2")]
    assert {r["scheme"] for r in rows} == {"sync", "fastest_k k=3", "coded/cyclic_repetition"}
    assert [r["baseline"] for r in rows[:3]] == ["true", "false", "false"]
    # the row of a cell is the mean over the seeds of that cell's comparison
    runs = json.loads((serial / "cells" / "003" / "summary.json").read_text())
    coded = [r["mean_iteration_time"] for r in runs if r["scheme"] == "coded/cyclic_repetition"]
    assert len(coded) == 2 and float(rows[11]["mean_iteration_time"]) == pytest.approx(sum(coded) / 2)
    assert float(rows[11]["mean_iteration_time_ci"]) > 0 and rows[11]["seeds"] == "2"
    # common random numbers: a scheme that no swept key touches is identical across the cells of one alpha
    assert rows[1]["mean_iteration_time"] == rows[4]["mean_iteration_time"]
    assert rows[1]["mean_iteration_time"] != rows[7]["mean_iteration_time"]
    info = json.loads((serial / "sweep.json").read_text())
    assert info["complete"] and info["paths"] == list(FOUR) and len(info["cells"]) == 4
    assert regimes.winners(info["rows"], info["paths"])          # the shape the regime map reads
    report = (serial / "report.md").read_text()
    assert "## Regime map" in report and "cells/003/report.md" in report
    assert 'href="cells/003/report.html"' in (serial / "report.html").read_text()    # the cell's page, not its text
    assert (serial / regimes.REGIME_MAP).is_file()
    assert not (serial / "cells" / "000" / "plots").exists()      # no cell figures unless asked for
    assert "Not drawn" in (serial / "cells" / "000" / "report.md").read_text()


def test_jobs_2_gives_the_serial_table(serial, tmp_path):
    out = sweep(base(**FOUR), tmp_path / "out", jobs=2, progress=False)
    assert read_csv(out / "sweep.csv") == read_csv(serial / "sweep.csv")
    assert read_csv(out / "sweep.csv", drop_wall=False)[0]["wall_seconds"]


@pytest.mark.slow
@pytest.mark.mpi
def test_mpi_executor_gives_the_serial_table(serial, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(tomli_w.dumps(base(**FOUR)))
    cmd = [find_mpiexec(), "-n", "3", sys.executable, "-m", "mpi4py.futures", "-m", "gradcode", "sweep", str(spec),
           "--out", str(tmp_path / "out"), "--executor", "mpi"]
    proc = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert read_csv(tmp_path / "out" / "sweep.csv") == read_csv(serial / "sweep.csv")


@pytest.mark.mpi
def test_mpi_executor_outside_mpi4py_futures_fails_fast_on_every_rank(tmp_path):
    """Under plain ``mpiexec`` every rank would run its own sweep: the pool check (public mpi4py only, no private
    ``mpi4py.futures._core``) refuses on the ranks other than 0, the job ends with the launch line, nothing hangs."""
    spec = tmp_path / "s.toml"
    spec.write_text(tomli_w.dumps(base(**FOUR)))
    cmd = [find_mpiexec(), "-n", "2", sys.executable, "-m", "gradcode", "sweep", str(spec), "--out",
           str(tmp_path / "out"), "--executor", "mpi"]
    proc = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode != 0
    assert "rank 1 of 2 is running the sweep too" in proc.stderr and "python -m mpi4py.futures" in proc.stderr


def test_an_interrupted_sweep_finishes_the_missing_cells_only(tmp_path):
    raw = base(**{"delay.alpha": [1.5, 2.0, 2.5, 3.0]})
    raw["run"]["iterations"] = 400
    reference = sweep(copy.deepcopy(raw), tmp_path / "ref", jobs=1, progress=False)
    spec = tmp_path / "s.toml"
    spec.write_text(tomli_w.dumps(raw))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "gradcode", "sweep", str(spec), "--out", str(out), "--jobs", "2"],
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:          # kill -9 as soon as a cell is done: its pool workers die with it
            if " done (" in line:
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=TIMEOUT)
    time.sleep(0.5)                       # the workers' parent-death SIGTERM is delivered at once; let them exit
    done = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("cells/*/CELL_COMPLETE")}
    assert 1 <= len(done) < 4 and not (out / "sweep.csv").exists()
    sweep(spec, out, jobs=2, progress=False)
    assert {name: (out / "cells" / name / "CELL_COMPLETE").stat().st_mtime_ns for name in done} == done  # kept
    assert read_csv(out / "sweep.csv") == read_csv(reference / "sweep.csv")


def test_cell_figures_on_request(tmp_path):
    out = sweep(base(**{"delay.alpha": [1.5]}), tmp_path / "out", jobs=1, progress=False, cell_figures=True)
    assert any((out / "cells" / "000" / "plots").glob("*.png"))


@pytest.mark.slow
@pytest.mark.mpi
def test_cells_of_the_mpi_cluster_run_one_at_a_time(tmp_path):
    raw = base(**{"delay.alpha": [1.5, 3.0]})
    raw["cluster"] = {"workers": 2, "kind": "mpi"}
    raw["schemes"] = [{"name": "fastest_k", "k": 1}]       # one MPI job a cell: two jobs, the second after the first
    raw["run"] = {"iterations": 3, "seeds": [0], "time_scale": 0.01}
    out = sweep(raw, tmp_path / "out", jobs=2, progress=False)
    rows = read_csv(out / "sweep.csv")
    assert [(r["cell"], r["cluster"], r["scheme"]) for r in rows] == [("0", "mpi", "fastest_k k=1"),
                                                                      ("1", "mpi", "fastest_k k=1")]
    finished = (out / "cells" / "000" / "CELL_COMPLETE").stat().st_mtime_ns
    started = min(p.stat().st_mtime_ns for p in (out / "cells" / "001" / "runs").glob("*/spec.json"))
    assert finished <= started


def test_another_spec_in_the_folder_needs_replace(serial, tmp_path):
    out = tmp_path / "out"
    sweep(base(**{"delay.alpha": [1.5, 3.0]}), out, jobs=1, progress=False)
    with pytest.raises(ConfigError, match="another sweep, whose spec differs in sweep"):
        sweep(base(**FOUR), out, jobs=1, progress=False)
    with pytest.raises(ConfigError, match="another sweep, whose spec differs in run"):
        sweep(base(**{"delay.alpha": [1.5, 3.0]}), out, jobs=1, progress=False, overrides={"iterations": 5})
    sweep(base(**FOUR), out, jobs=1, progress=False, replace=True)
    assert read_csv(out / "sweep.csv") == read_csv(serial / "sweep.csv")
    compare_out = tmp_path / "cmp"
    raw = base()
    del raw["sweep"]
    compare(raw, compare_out, progress=False, figures=False)
    with pytest.raises(ConfigError, match="results of a comparison"):
        sweep(base(**FOUR), compare_out, jobs=1, progress=False)


# --- the command line -----------------------------------------------------------------------------------------
def test_cli_errors_before_anything_runs(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(tomli_w.dumps(base(**{"schemes.nothing.k": [1, 2]})))
    proc = cli("sweep", str(spec), "--out", str(tmp_path / "o"), timeout=TIMEOUT)
    assert proc.returncode == 2 and "gradcode sweep: error:" in proc.stderr and "'sync'" in proc.stderr
    assert not (tmp_path / "o").exists()
    spec.write_text(tomli_w.dumps(base(**FOUR)))
    proc = cli("sweep", str(spec), "--out", str(tmp_path / "o"), "--jobs", "0", timeout=TIMEOUT)
    assert proc.returncode == 2 and "--jobs must be an integer >= 1" in proc.stderr
    proc = cli("sweep", str(spec), "--out", str(tmp_path / "o"), "--seeds", "1", "1", timeout=TIMEOUT)
    assert proc.returncode == 2 and "seeds must be a non-empty list of distinct" in proc.stderr
    proc = cli("compare", str(spec), "--out", str(tmp_path / "c"), timeout=TIMEOUT)
    assert proc.returncode == 2 and "gradcode sweep SPEC" in proc.stderr
    proc = cli("sweep", str(spec), "--out", str(tmp_path / "o"), "--executor", "mpi",     # not under mpiexec
               timeout=TIMEOUT)
    assert proc.returncode == 2 and "python -m mpi4py.futures -m gradcode sweep" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_cli_overrides_of_iterations_and_seeds(tmp_path):
    spec = tmp_path / "s.toml"
    raw = base(**{"delay.alpha": [1.5, 3.0]})
    del raw["run"]["target_loss"]            # every run goes to its last iteration
    spec.write_text(tomli_w.dumps(raw))
    proc = cli("sweep", str(spec), "--out", str(tmp_path / "o"), "--iterations", "3", "--seeds", "4", "5", "6",
               "--jobs", "1", timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(tmp_path / "o" / "sweep.csv")
    assert {r["seeds"] for r in rows} == {"3"} and {r["iterations"] for r in rows} == {"3.0"}
    del raw["sweep"]
    spec.write_text(tomli_w.dumps(raw))
    proc = cli("compare", str(spec), "--out", str(tmp_path / "c"), "--iterations", "2", "--seeds", "7", timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    runs = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert {(r["seed"], r["iterations"]) for r in runs} == {(7, 2)}


def test_ctrl_c_ends_the_pool_workers_found_by_a_public_api():
    """sweep_run._workers: the process pool's workers are the multiprocessing children that were not there before
    it (no private ``pool._processes``); another child of ours is left alone."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from gradcode.study.sweep_run import _workers

    bystander = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
    bystander.start()
    try:
        others = set(multiprocessing.active_children())
        with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("fork")) as pool:
            assert pool.submit(abs, -3).result() == 3
            found = _workers(others)
            assert bystander not in found and 1 <= len(found) <= 2
            assert all(p.is_alive() for p in found)
    finally:
        bystander.terminate()
        bystander.join()


def test_the_regime_map_caption_matches_its_figure():
    """One swept key draws lines, not a coloured map: the caption under it says so; two keys keep the map's."""
    from types import SimpleNamespace

    from gradcode.study.sweep_run import _figure_reading

    one, two = (_figure_reading(regimes.REGIME_MAP, [], SimpleNamespace(paths=paths)) for paths in (["x"], ["x", "y"]))
    assert "one line per scheme" in one and "colour" not in one
    assert "colour per scheme" in two
