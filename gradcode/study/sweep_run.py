"""Running a sweep: every cell of the grid (:mod:`gradcode.study.sweep`) as a comparison, in parallel, then one
tidy table.

Design
------
``gradcode sweep SPEC --out DIR`` expands the spec's ``[sweep]`` table into cells and checks every cell before
anything runs. Each cell is a comparison run by the compare harness (:func:`gradcode.study.harness.compare`: the same
seeds and schemes in every cell, common random numbers across the schemes) into ``DIR/cells/NNN/``; when it has
finished, ``DIR/cells/NNN/CELL_COMPLETE`` names the cell's fingerprint (:mod:`gradcode.plumbing.fingerprint`: its spec
and every input it reads) and its wall-clock time. A cell with that marker is never redone, so an interrupted sweep
finishes the missing cells only (and inside a cell, the harness resumes its runs). ``DIR`` holds one sweep: another spec
there is an error unless ``--replace`` (the ``--iterations`` / ``--seeds`` overrides are part of the spec).

**Parallel.** Cells are independent pure functions of their specs, so they run on any executor and give the same
numbers: ``--jobs N`` (default: every core) runs them in a :class:`concurrent.futures.ProcessPoolExecutor` (``1``:
in this process); ``--executor mpi`` in an ``mpi4py.futures.MPIPoolExecutor`` (:mod:`mpi_runtime.pool`), launched
on a cluster as ``mpiexec -n N python -m mpi4py.futures -m gradcode sweep SPEC --out DIR --executor mpi`` (rank 0
runs the sweep, the other N - 1 ranks run cells). Cells of the MPI cluster (``[cluster] kind = "mpi"`` or
``"both"``) run one at a time in this process: each is already a parallel ``mpiexec`` job. The table is assembled
from the cell folders in cell order once every cell is done, so it does not depend on the order cells finish in.

**Figures.** Drawing a comparison's figures costs about as much as simulating a small cell, so the cells draw none
by default; ``--cell-figures`` draws them (``gradcode report DIR/cells/NNN`` draws one cell's later).

Outputs
-------
- ``sweep.csv`` / ``sweep.json`` ``rows``: one row per cell x cluster x delay x scheme: ``cell``, one column per
  swept path (its value in that cell), ``cluster``, ``delay``, ``scheme`` (frozen labels), ``scheme_name``,
  ``baseline`` (sync: the reference of speedups), ``seeds``, ``status`` (``complete``, or ``partial`` when a run
  of that group is), then for each metric ``M`` of :data:`AGGREGATE` the mean over seeds and ``M_ci``, the
  half-width of its t-based 95% confidence interval (empty with one seed). A mean is given only when every seed
  has a value (``time_to_target``: ``reached`` says how many seeds reached the target loss). ``wall_seconds`` is
  the cell's wall-clock time, the only column that depends on the machine and the executor.
- ``sweep.json``: also the spec, the swept paths, the cells (values, folder, wall time) and the notes;
- ``report.md`` (the grid, :func:`gradcode.output.regimes.markdown`'s regime map, the figures, each with a one-line
reading),
  ``report.html`` (the same as one self-contained page, :mod:`gradcode.output.report_html`) and
  ``regime_map.png`` / ``computation_speedup.png`` (:func:`gradcode.output.regime_plots.write_figures`).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from ..errors import ConfigError, GradcodeError
from ..output.regimes import COMPUTATION, METRICS, REGIME_MAP
from ..output.report import write_csv
from ..output.report_html import write_html
from ..plumbing.fingerprint import fingerprint
from ..plumbing.outdir import FolderLock, remove_folders, remove_results, writable_folder, write_whole
from .harness import RESULTS, SWEEP_RESULTS, other_spec

CELL_DONE = "CELL_COMPLETE"
AGGREGATE = list(dict.fromkeys([*METRICS, "iterations", "wasted_units"]))   # the means (and _ci) of a row
WALL = ("wall_seconds",)          # columns that depend on the machine, not on the spec
EXECUTORS = ("process", "mpi")


# --- one cell -------------------------------------------------------------------------------------------------
def run_cell(task: dict[str, Any]) -> dict[str, Any]:
    """Run one cell (``task``: ``index``, ``values``, ``spec``, ``folder``, ``fingerprint``, ``figures``, ``dirs``) as a
    comparison and write its marker; a module-level function so that any executor can send it to a worker."""
    from ..plumbing.registry import add_user_dirs
    from .harness import compare

    add_user_dirs(*map(Path, task["dirs"]))      # user modules, in a worker process too
    start = time.perf_counter()
    folder = compare(task["spec"], task["folder"], progress=False, replace=True, figures=task["figures"])
    wall = time.perf_counter() - start
    notes = json.loads((folder / "experiment.json").read_text())["notes"]
    failures = [n for n in notes if n.startswith("run failed")]
    if not failures:
        marker = {"fingerprint": task["fingerprint"], "wall_seconds": wall}
        write_whole(folder / CELL_DONE, json.dumps(marker) + "\n")
    return {"index": task["index"], "wall_seconds": wall, "failures": failures}


def cell_done(task: dict[str, Any]) -> dict[str, Any] | None:
    """The marker of a finished cell whose fingerprint is this task's (``None``: to run)."""
    try:
        marker = json.loads((Path(task["folder"]) / CELL_DONE).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(marker, dict) and marker.get("fingerprint") == task["fingerprint"]
    return marker if ok and (Path(task["folder"]) / "summary.json").is_file() else None


def _is_mpi(spec: dict[str, Any]) -> bool:
    return spec.get("cluster", {}).get("kind", "sim") in ("mpi", "both")


# --- the executors --------------------------------------------------------------------------------------------
def default_jobs() -> int:
    """Every core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:      # pragma: no cover (macOS)
        return os.cpu_count() or 1


def _failed(task: dict, err: GradcodeError) -> dict[str, Any]:
    return {"index": task["index"], "wall_seconds": None, "failures": [f"cell {task['index']}: {err}"]}


def run_all(tasks: list[dict], *, jobs: int, executor: str, progress: bool, lock_fd: int | None = None) -> list[dict]:
    """Run ``tasks``: the MPI-cluster cells one at a time here, the others on the executor; the results in the
    order they finished (each names its cell). ``lock_fd``: the sweep folder's lock, which forked workers close."""
    mpi_cells = [t for t in tasks if _is_mpi(t["spec"])]
    pooled = [t for t in tasks if not _is_mpi(t["spec"])]
    total, results = len(tasks), []

    def done(result: dict) -> None:
        results.append(result)
        if progress:
            state = "FAILED" if result["failures"] else f"{result['wall_seconds']:.1f} s"
            print(f"sweep: cell {result['index']:03d} done ({state}); {len(results)}/{total}", file=sys.stderr)

    for task in mpi_cells:
        done(_guarded(task))
    if executor == "process" and (jobs == 1 or len(pooled) <= 1):
        for task in pooled:
            done(_guarded(task))
        return results
    if not pooled:
        return results
    others = set(multiprocessing.active_children())    # processes of ours that are not the pool's
    pool = _pool(executor, min(jobs, len(pooled)), lock_fd)
    try:
        pending = {pool.submit(run_cell, t): t for t in pooled}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                task = pending.pop(future)
                try:
                    done(future.result())
                except GradcodeError as err:
                    done(_failed(task, err))
    except BaseException:        # Ctrl-C: no new cell starts; finished cells keep their markers
        workers = _workers(others)    # before shutdown(), which joins them
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in workers:
            proc.terminate()
        raise
    pool.shutdown(wait=True)
    return results


def _workers(others: set) -> list:
    """The worker processes of the process pool, to end at once on Ctrl-C: a running cell would otherwise go on (its
    records stay, flushed per iteration; a resume redoes the cell), and the interpreter's exit would wait for it.
    They are this process's multiprocessing children (``multiprocessing.active_children()``, a public API) that
    were not there before the pool (``others``); an MPI pool has none here."""
    return [p for p in multiprocessing.active_children() if p not in others]


def _guarded(task: dict) -> dict:
    try:
        return run_cell(task)
    except GradcodeError as err:
        return _failed(task, err)


def _pool(executor: str, workers: int, lock_fd: int | None):
    if executor == "mpi":
        from mpi_runtime.pool import mpi_pool

        return mpi_pool(workers)
    return ProcessPoolExecutor(max_workers=workers, initializer=_worker_start, initargs=(os.getpid(), lock_fd))


def _worker_start(parent: int, lock_fd: int | None) -> None:
    """A pool worker dies with the sweep (even after ``kill -9``:
    :func:`gradcode.plumbing.children.die_with_parent`) and
    lets go of the sweep folder's lock that it inherited by ``fork``, so a resume can start as soon as the sweep is
    gone (each cell's folder is locked by the worker that writes it)."""
    from ..plumbing.children import die_with_parent

    # Ctrl-C reaches the whole process group: the sweep itself stops the workers (one line, exit 130), which must
    # not each print a KeyboardInterrupt traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent=parent)
    if lock_fd is not None:
        try:
            os.close(lock_fd)
        except OSError:          # not inherited (a spawned worker)
            pass


# --- the sweep ------------------------------------------------------------------------------------------------
def sweep(source: str | Path | dict, out: str | Path, *, jobs: int | None = None, executor: str = "process",
          overrides: dict[str, Any] | None = None, replace: bool = False, cell_figures: bool = False,
          progress: bool = True) -> Path:
    """Run every cell of a sweep spec that is not finished in ``out``, then write ``sweep.csv``, ``sweep.json``,
    ``report.md`` and the regime figures there; returns ``out``. Everything is checked first (the grid, every cell,
    the executor, that ``out`` is writable and holds no other sweep)."""
    from ..spec import with_run_overrides
    from .sweep import expand, read_sweep

    if executor not in EXECUTORS:
        raise ConfigError(f"--executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    jobs = default_jobs() if jobs is None else jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"--jobs must be an integer >= 1, got {jobs!r}")
    if executor == "mpi":
        from mpi_runtime.pool import check_pool

        check_pool()
    raw = with_run_overrides(read_sweep(source), **(overrides or {}))
    grid = expand(raw)
    out = writable_folder(out)
    dirs = [str(Path(source).resolve().parent)] if isinstance(source, (str, Path)) else []
    dirs.append(os.getcwd())
    tasks = [{"index": c.index, "values": c.values, "spec": c.spec, "folder": str(out / "cells" / f"{c.index:03d}"),
              "figures": cell_figures, "fingerprint": fingerprint(c.spec), "dirs": dirs} for c in grid.cells]
    with FolderLock(out) as lock:
        _claim(out, raw, len(tasks), replace)
        _write_json(out, raw, grid, tasks, [], [], complete=False)
        todo = [t for t in tasks if cell_done(t) is None]
        if progress:
            print(f"sweep: {len(tasks)} cells, {len(tasks) - len(todo)} already done in {out}; "
                  f"{executor} executor" + (f", {jobs} jobs" if executor == "process" else ""), file=sys.stderr)
        results = run_all(todo, jobs=jobs, executor=executor, progress=progress, lock_fd=lock.fd)
        failures = [f for r in sorted(results, key=lambda r: r["index"]) for f in r["failures"]]
        rows = collect(tasks, grid.paths)
        notes = [f"cell failed: {f}" for f in failures]
        _write_json(out, raw, grid, tasks, rows, notes, complete=not failures)
        write_csv(out / "sweep.csv", rows, columns(grid.paths))
        _write_report(out, raw, grid, tasks, rows, notes, jobs=jobs if executor == "process" else 1)
    return out


def _claim(out: Path, raw: dict, cells: int, replace: bool) -> None:
    """``out`` holds this sweep, or nothing yet; another sweep's (or a comparison's) results only with
    ``replace``, which deletes its results and the cell folders beyond this grid (a cell folder that stays is
    checked by its own fingerprints: runs of another spec are redone)."""
    other = _other(out, raw)
    if other is None:
        return
    if not replace:
        raise ConfigError(f"{out} holds {other}; give another --out folder, or --replace to delete its results and "
                          "run this sweep there")
    remove_results(out, SWEEP_RESULTS)
    remove_folders(out / "cells", lambda name: name.isdigit() and int(name) < cells)
    if (out / "experiment.json").is_file() or (out / "runs").is_dir():     # a comparison's folder
        remove_results(out, (*RESULTS, "runs"))


def _other(out: Path, raw: dict) -> str | None:
    if (out / "experiment.json").is_file() or (out / "runs").is_dir():
        return "the results of a comparison (`gradcode compare`), not a sweep"
    path = out / "sweep.json"
    if not path.is_file():
        return "cell folders of an unknown sweep" if (out / "cells").is_dir() else None
    return other_spec(path, raw, "another sweep, whose spec differs")


# --- the table ------------------------------------------------------------------------------------------------
def collect(tasks: list[dict], paths: list[str]) -> list[dict[str, Any]]:
    """The rows of ``sweep.csv`` from the cell folders (see the module docstring), in cell order."""
    from ..output.report import groups, mean_ci, scheme_class

    rows = []
    for task in tasks:
        folder = Path(task["folder"])
        try:
            runs = json.loads((folder / "summary.json").read_text())
        except (OSError, ValueError):
            continue            # a cell that failed before any run: named in the notes
        marker = cell_done(task) or {}
        for (cluster, delay, scheme), group in groups(runs).items():
            row = {"cell": task["index"], **task["values"], "cluster": cluster, "delay": delay, "scheme": scheme,
                   "scheme_name": group[0]["scheme_name"],
                   "baseline": bool(scheme_class({"scheme_name": group[0]["scheme_name"]}).baseline),
                   "seeds": len(group),
                   "status": "complete" if all(r["status"] == "complete" for r in group) else "partial",
                   "reached": sum(r["time_to_target"] is not None for r in group)}
            for key in AGGREGATE:
                got = [r[key] for r in group if r.get(key) is not None]
                mean, ci = mean_ci(got) if got and len(got) == len(group) else (None, None)
                row[key], row[key + "_ci"] = mean, ci
            row["wall_seconds"] = marker.get("wall_seconds")
            rows.append(row)
    return rows


def columns(paths: list[str]) -> list[str]:
    metrics = [name for key in AGGREGATE for name in (key, key + "_ci")]
    return ["cell", *paths, "cluster", "delay", "scheme", "scheme_name", "baseline", "seeds", "status", "reached",
            *metrics, *WALL]


def _write_json(out: Path, raw: dict, grid, tasks: list[dict], rows: list[dict], notes: list[str], *,
                complete: bool) -> None:
    name = str(raw.get("experiment", {}).get("name", "sweep"))
    cells = [{"cell": t["index"], "values": t["values"], "folder": f"cells/{t['index']:03d}",
              "fingerprint": t["fingerprint"], "wall_seconds": (cell_done(t) or {}).get("wall_seconds")}
             for t in tasks]
    info = {"name": name, "complete": complete, "paths": grid.paths, "zip": grid.zipped, "notes": notes,
            "spec": raw, "cells": cells, "rows": rows}
    (out / "sweep.json").write_text(json.dumps(info, indent=2, default=str) + "\n")


def _write_report(out: Path, raw: dict, grid, tasks: list[dict], rows: list[dict], notes: list[str], *,
                  jobs: int = 1) -> None:
    from ..output import regime_plots, regimes

    figures = regime_plots.write_figures(rows, grid.paths, out, jobs=jobs) if rows else []
    exp = raw.get("experiment", {})
    seeds = raw.get("run", {}).get("seeds", [raw.get("run", {}).get("seed", 0)])
    lines = [f"# Sweep: {exp.get('name', out.name)}", ""]
    if exp.get("description"):
        lines += [str(exp["description"]), ""]
    how = "paired (zip = true)" if grid.zipped else "the product of the lists"
    lines += [f"{len(tasks)} cells, {how}, each a comparison of the same schemes over seeds {seeds} with common random "
              "numbers; labels are frozen from the base spec. Swept:", ""]
    lines += [f"- `{p}` = {json.dumps(raw['sweep'][p])}" for p in grid.paths] + [""]
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    lines += regimes.markdown(rows, grid.paths) if rows else ["No cell has results yet.", ""]
    if figures:
        lines += ["## Figures", ""]
        for f in figures:
            lines += [f"![{f}]({f})", _figure_reading(f, rows, grid), ""]
    lines += ["## Cells", "", "| cell | " + " | ".join(grid.paths) + " | wall s | report |",
              "|---|" + "---|" * len(grid.paths) + "---|---|"]
    for task, cell in zip(tasks, grid.cells, strict=True):
        wall = (cell_done(task) or {}).get("wall_seconds")
        lines.append(f"| {task['index']} | " + " | ".join(regimes._text(cell.values[p]) for p in grid.paths)
                     + f" | {'-' if wall is None else f'{wall:.1f}'} | [cells/{task['index']:03d}/report.md]"
                     f"(cells/{task['index']:03d}/report.md) |")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    write_html(out / "report.md")


FIGURE_READINGS = {REGIME_MAP: "the winner of each cell by time to target (a colour per scheme, its speedup over "
                               "sync written in the cell; hatched and starred: tied within the 95% CI)",
                   COMPUTATION: "computation per step against speedup over sync, one point per scheme and cell: "
                                "right is faster, lower is less work"}


LINES_READING = ("each scheme's time to target (mean iteration time where none reached it) against the swept value, "
                 "one line per scheme with its 95% CI band; lower is better")


def _figure_reading(name: str, rows: list[dict], grid) -> str:
    """The one-line reading under a sweep figure: how to read it; under the regime map, the regime map's reading."""
    from ..output import regimes

    text = "Reading: " + (LINES_READING if name == REGIME_MAP and len(grid.paths) < 2   # no map: one line a scheme
                          else FIGURE_READINGS.get(name, name)) + "."
    if name == REGIME_MAP:
        text += " " + regimes._reading(regimes.winners(rows, grid.paths), grid.paths, "time_to_target")
    return text


def sweep_main(args) -> int:
    """``gradcode sweep SPEC --out DIR [--jobs N] [--executor process|mpi] [--iterations N] [--seeds S ...]
    [--cell-figures] [--replace]``."""
    from .harness import run_overrides

    out = sweep(args.spec, args.out, jobs=args.jobs, executor=args.executor, overrides=run_overrides(args),
                replace=args.replace, cell_figures=args.cell_figures)
    info = json.loads((out / "sweep.json").read_text())
    for note in info["notes"]:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {out / 'sweep.csv'}, {out / 'sweep.json'}, {out / 'report.md'} and {out / 'report.html'}")
    return 0 if info["complete"] else 1
