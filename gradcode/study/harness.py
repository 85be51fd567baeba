"""The comparison harness: an experiment spec -> one folder per run -> summary, report and plots.

Design
------
An *experiment* is a spec (see :mod:`gradcode.spec`) with one workload, one or several delay models (``[delay]`` or
``[[delays]]``), several ``[[schemes]]``, ``[run] seeds`` and ``[cluster] kind`` (``sim``, ``mpi`` or ``both``). It
is validated as a whole (every scheme built under every delay model, labels unique) before anything runs, then
expanded into *runs*: one per (cluster, delay model, scheme, seed). Every run is a pure function of its own
single-run spec, which is written into the run's folder ``OUT/runs/<run id>/`` together with:

- ``spec.json`` / ``spec.toml``: the single-run spec as run (what ``gradcode simulate`` / ``gradcode run`` read);
- ``run.json``: the labels and the constants the report needs to turn records into units (batch size, dimension,
  message size), nothing measured;
- ``records.jsonl``: one JSON line per iteration, flushed as soon as the iteration ends (``simulate(on_record=)``;
  the MPI cluster writes its own);
- ``COMPLETE``: written last, naming the number of records and the run's fingerprint
  (:mod:`gradcode.plumbing.fingerprint`: its spec and every input it reads: trace files, user modules, the gradcode
  version). A run whose folder holds a ``COMPLETE`` marker with its fingerprint and as many whole records as the marker
  says is never redone, so an interrupted comparison resumes where it stopped; any other run (changed inputs, damaged
  records) is redone from scratch.

A results folder holds one experiment (:func:`claim`: a different spec is an error unless ``replace``), is checked
writable before any work (:func:`gradcode.plumbing.outdir.writable_folder`), and every folder is locked by its writer
(:class:`gradcode.plumbing.outdir.FolderLock`). Child processes die with their parent
(:mod:`gradcode.plumbing.children`).

The simulated cluster runs in-process. The MPI cluster runs as ``python -m gradcode run spec.toml --out FOLDER``
(a subprocess per run, owned by ``mpi_runtime``, with the experiment spec's folder on its ``PYTHONPATH`` so that
user modules named by import path are found); if mpi4py or that subcommand is missing, MPI runs are skipped,
the experiment's notes say so and the report repeats it. The harness never aggregates anything itself: the report
(:mod:`gradcode.output.report`) reads the run folders back and is the single place where records become rows, so
``gradcode report OUT`` rebuilds exactly what ``gradcode compare`` wrote.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from ..errors import ConfigError, GradcodeError
from ..output.regimes import COMPUTATION, REGIME_MAP
from ..plumbing.children import run_child
from ..plumbing.fingerprint import fingerprint
from ..plumbing.outdir import LOCK_NAME, FolderLock, remove_folders, remove_results, writable_folder, write_whole
from ..plumbing.registry import pythonpath
from ..spec import CLUSTER_KINDS, Spec, _unlabelled, build, load_spec

QUICK_ITERATIONS = 6         # --quick: at most this many iterations, the first seed and delay model only
MPI_TIMEOUT = 240.0          # seconds one MPI run may take before it is declared failed
COMPLETE = "COMPLETE"


class HarnessError(GradcodeError):
    """A run that failed (for example an MPI job that exited with an error)."""


@dataclass(frozen=True)
class RunPlan:
    """One run: its folder name, its single-run spec and the metadata the report needs (``meta["fingerprint"]``:
    the spec and every input it reads, :mod:`gradcode.plumbing.fingerprint`)."""

    run_id: str
    spec: dict[str, Any]
    meta: dict[str, Any]

    @property
    def cluster(self) -> str:
        return self.meta["cluster"]

    def digest(self) -> str:
        return self.meta["fingerprint"]


@dataclass
class Experiment:
    """A validated experiment, expanded into runs."""

    name: str
    spec: Spec
    clusters: list[str]
    runs: list[RunPlan]
    notes: list[str] = field(default_factory=list)
    quick: bool = False


# --- the spec -------------------------------------------------------------------------------------------------
def default_spec_path() -> Path:
    """The built-in default experiment (``gradcode/data/default.toml``)."""
    return Path(str(importlib.resources.files("gradcode") / "data" / "default.toml"))


def scheme_label(table: dict[str, Any]) -> str:
    """``label``, or the name and key parameters: ``"coded/cyclic_repetition s=2"``, ``"fastest_k k=6"``."""
    if "label" in table:
        return str(table["label"])
    name = str(table.get("name"))
    if "code" in table:
        name += f"/{table['code']}"
    params = " ".join(f"{k}={v}" for k, v in table.items() if k not in ("name", "code", "label"))
    return f"{name} {params}".strip()


def delay_label(table: dict[str, Any]) -> str:
    """``label``, or ``"trace/bytedance-SE"``, ``"pareto alpha=2.0"``, ``"straggle base=pareto(alpha=2) count=2"``."""
    if "label" in table:
        return str(table["label"])
    if table.get("name") == "trace":
        return f"trace/{table.get('trace', 'bytedance-SE')}"
    params = " ".join(f"{k}={_compact(v)}" for k, v in table.items() if k not in ("name", "label"))
    return f"{table.get('name')} {params}".strip()


def _compact(value: Any) -> str:
    """A nested table as ``pareto(alpha=2)`` (so that straggle models differing only in ``base``/``extra`` get
    different labels), a list of them as ``[a, b]``, anything else as is."""
    if isinstance(value, dict):
        inner = ",".join(f"{k}={_compact(v)}" for k, v in value.items() if k != "name")
        return f"{value.get('name', '')}({inner})"
    if isinstance(value, (list, tuple)) and any(isinstance(v, dict) for v in value):
        return "[" + ",".join(_compact(v) for v in value) + "]"
    return str(value)


def _unique(labels: list[str], where: str) -> None:
    seen = [x for i, x in enumerate(labels) if x in labels[:i]]
    if seen:
        raise ConfigError(f"{where}: labels must be unique, {seen[0]!r} appears twice; set a distinct 'label' key")


def seeds_of(spec: Spec) -> list[int]:
    """``[run] seeds``, else ``[[run] seed]``, else ``[0]``."""
    if "seeds" in spec.run:
        return list(spec.run["seeds"])
    return [int(spec.run.get("seed", 0))]


def load_experiment(source: str | Path | dict | None = None, *, quick: bool = False,
                    cluster: str | None = None, mpi: tuple[bool, str] | None = None,
                    overrides: dict[str, Any] | None = None) -> Experiment:
    """Validate a whole experiment and expand it into runs (``source=None``: the built-in default).

    ``cluster`` overrides ``[cluster] kind``; ``overrides``: ``--iterations`` / ``--seeds``
    (:func:`gradcode.spec.with_run_overrides`); ``mpi`` is ``(available, reason)`` (default: :func:`mpi_status`),
    and MPI runs are dropped, with a note, when it is not available.
    """
    spec = load_spec(default_spec_path() if source is None else source, overrides)
    kind = cluster or spec.cluster.get("kind", "sim")
    if kind not in CLUSTER_KINDS:
        raise ConfigError(f"--cluster must be one of {', '.join(CLUSTER_KINDS)}, got {kind!r}")
    scheme_labels = [scheme_label(t) for t in spec.schemes]
    delay_labels = [delay_label(t) for t in spec.delays]
    _unique(scheme_labels, "[[schemes]]")
    _unique(delay_labels, "[[delays]]")
    for idx in range(1, len(spec.delays)):   # every scheme under every delay model, before any work
        _build_under(spec, idx, delay_labels[idx])
    seeds = seeds_of(spec)[:1] if quick else seeds_of(spec)
    clusters = ["sim", "mpi"] if kind == "both" else [kind]
    notes: list[str] = []
    if "mpi" in clusters:
        available, reason = mpi if mpi is not None else mpi_status()
        if not available:
            notes.append(f"MPI runs skipped: {reason}; only the simulated cluster was run.")
            clusters = ["sim"]
    name = str(spec.raw.get("experiment", {}).get("name", "experiment"))
    delays = range(1 if quick else len(spec.delays))   # --quick: the first delay model only
    units = _units(spec)
    runs = [_plan(spec, c, di, si, seed, delay_labels, scheme_labels, quick, units[si])
            for c in clusters for di in delays for si in range(len(spec.schemes)) for seed in seeds]
    _check_mpi(next((r for r in runs if r.cluster == "mpi"), None))
    if "sim" in clusters:   # natural timing has nothing to simulate: refuse before any run
        from ..clusters.sim import check_simulable

        for label, table in zip(delay_labels, spec.delays, strict=True):
            check_simulable(_unlabelled(table), f"delay {label!r} under [cluster] kind = {kind!r}:")
    return Experiment(name=name, spec=spec, clusters=clusters, runs=runs, notes=notes, quick=quick)


def _check_mpi(run: RunPlan | None) -> None:
    """The MPI cluster's own rules (``mpi_runtime.config.load_run``: a workload, ``time_scale``, ``grace``, ...),
    checked on one MPI run before any run starts: they are the same for every run of the experiment."""
    if run is None:
        return
    from mpi_runtime.config import load_run

    try:
        load_run(run.spec)
    except ConfigError as err:
        raise ConfigError(f"the MPI runs of this experiment: {err}") from None


def _build_under(spec: Spec, delay_index: int, label: str) -> None:
    try:
        schemes, delay, _ = build(spec, delay_index=delay_index)
        for scheme in schemes:
            scheme.bind(delay=delay)
    except ConfigError as err:
        raise ConfigError(f"[[delays]] {label!r}: {err}") from None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40] or "x"


def _plan(spec: Spec, cluster: str, di: int, si: int, seed: int, delay_labels: list[str],
          scheme_labels: list[str], quick: bool, units: dict[str, Any]) -> RunPlan:
    run = {k: v for k, v in spec.run.items() if k not in ("seeds", "seed")}
    run["seed"] = seed
    if quick:
        run["iterations"] = min(int(run.get("iterations", 100)), QUICK_ITERATIONS)
    single: dict[str, Any] = {
        "experiment": {"name": f"{scheme_labels[si]} | {delay_labels[di]} | seed {seed}"},
        "cluster": {**spec.cluster, "kind": cluster},
        "delay": _unlabelled(spec.delays[di]),
        "scheme": _unlabelled(spec.schemes[si]),
        "run": run,
    }
    if spec.workload is not None:
        single["workload"] = dict(spec.workload)
    if "network" in spec.raw:     # (absent: the run and its fingerprint as before there was a network)
        single["network"] = dict(spec.raw["network"])
    run_id = f"{cluster}__d{di}_{_slug(delay_labels[di])}__s{si}_{_slug(scheme_labels[si])}__seed{seed}"
    meta = {"run_id": run_id, "cluster": cluster, "delay": delay_labels[di], "delay_index": di,
            "scheme": scheme_labels[si], "scheme_index": si, "scheme_name": spec.schemes[si]["name"], "seed": seed,
            "workers": spec.workers, "target_loss": run.get("target_loss"), "time_scale": run.get("time_scale"),
            "target_accuracy": run.get("target_accuracy"),
            **units, "fingerprint": fingerprint(single)}
    return RunPlan(run_id=run_id, spec=single, meta=meta)


def _units(spec: Spec) -> list[dict[str, Any]]:
    """Per scheme, the constants that turn records into samples and bytes: samples per load unit, floats per
    message, d. They depend on the scheme alone (not on the delay model, seed or cluster): built once."""
    schemes, delay, workload = build(spec)
    d = None if workload is None else int(workload.dim)
    out = []
    for scheme in schemes:
        scheme.bind(delay=delay)
        per_unit = scheme.samples_per_unit
        if per_unit is None and workload is not None:
            per_unit = _partition_samples_per_unit(scheme.plan(0), workload)
        out.append({"dim": d, "samples_per_unit": per_unit,
                    "message_floats": None if d is None else scheme.message_size(d), "work_note": scheme.work_note})
    return out


def _partition_samples_per_unit(plan, workload) -> float:
    """Whole partitions: the samples worker 0 computes over its load (one partition per unit for the master schemes
    and the codes; DropCompute's micro-batch partitions are ``micro_load`` units each). More partitions than samples
    is the workload's ConfigError, here before anything is built from the partitions."""
    workload.partition_bounds(plan.n_parts)
    per_part = workload.n_samples / plan.n_parts
    load = float(np.asarray(plan.load)[0])
    return per_part * len(plan.parts[0]) / load if load > 0 else per_part


# --- MPI ------------------------------------------------------------------------------------------------------
def mpi_status() -> tuple[bool, str]:
    """Whether MPI runs are possible here (mpi4py and an ``mpiexec``), and how they are launched (or why not)."""
    if importlib.util.find_spec("mpi4py") is None:
        return False, "mpi4py is not installed (pip install gradcode[mpi])"
    from mpi_runtime.launch import find_mpiexec

    try:
        find_mpiexec()
    except ConfigError as err:
        return False, str(err)
    return True, "`gradcode run`"


# --- running --------------------------------------------------------------------------------------------------
def is_complete(folder: Path, run: RunPlan) -> bool:
    """A finished run: its ``COMPLETE`` marker names this run's fingerprint and its records are whole and as many
    as the marker says (a damaged run, e.g. written by two processes at once, is redone)."""
    from ..output.report import marker, run_problem

    return (marker(folder) or {}).get("fingerprint") == run.digest() and run_problem(folder)[1] is None


def execute(run: RunPlan, runs_dir: Path, hostfile: str | None = None) -> bool:
    """Run ``run`` into ``runs_dir/<run id>`` unless it is complete there (an MPI run on the hosts of ``hostfile``,
    if given); ``True`` if it ran now.

    The folder is locked for the whole run (:class:`gradcode.plumbing.outdir.FolderLock`): a second process that would
    write it at the same time (a resume racing a run still going) gets an error naming the pid instead.
    """
    folder = runs_dir / run.run_id
    with FolderLock(folder) as lock:
        if is_complete(folder, run):
            return False
        _clear(folder)
        (folder / "spec.json").write_text(json.dumps(run.spec, indent=2) + "\n")
        (folder / "spec.toml").write_text(tomli_w.dumps(run.spec))
        (folder / "run.json").write_text(json.dumps(run.meta, indent=2) + "\n")
        count = _run_sim(run, folder) if run.cluster == "sim" else _run_mpi(run, folder, lock, hostfile)
        write_whole(folder / COMPLETE, json.dumps({"fingerprint": run.digest(), "records": count}) + "\n")
    return True


def _clear(folder: Path) -> None:
    """Empty a run folder for a fresh run, keeping the lock file that this process holds."""
    for path in folder.iterdir():
        if path.name == LOCK_NAME:
            continue
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def _run_sim(run: RunPlan, folder: Path) -> int:
    from ..clusters import sim
    from ..clusters.records import RecordWriter, write_summary

    spec = load_spec(run.spec)
    (scheme,), delay, workload = build(spec)
    # records reach the disk as they are made, so a run cut short keeps its finished iterations
    with RecordWriter(folder / "records.jsonl") as writer:
        result = sim.simulate(scheme, delay, workload, spec.options, on_record=writer.write)
    write_summary(folder, result.summary)
    return len(result.records)


def _run_mpi(run: RunPlan, folder: Path, lock: FolderLock, hostfile: str | None = None) -> int:
    # `gradcode run` kills the mpiexec job itself after --timeout (exit 124), ranks included; it is started in its
    # own process group with a parent-death signal (gradcode.plumbing.children), and holds the folder's lock with us
    cmd = [sys.executable, "-m", "gradcode", "run", str(folder / "spec.toml"), "--out", str(folder),
           "--timeout", str(MPI_TIMEOUT)] + (["--hostfile", hostfile] if hostfile else [])
    # the run's spec lives in its results folder: user modules are found through the experiment spec's folder
    env = lock.child_env({**os.environ, "PYTHONPATH": pythonpath()})
    with open(folder / "mpi.log", "w") as log:
        code = run_child(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=(lock.fd,))
    if code == 124:
        raise HarnessError(f"{run.run_id}: the MPI run took more than {MPI_TIMEOUT:.0f} s")
    records = folder / "records.jsonl"
    if code != 0 or not records.is_file():
        reason = _summary_error(folder) or failure_reason(folder / "mpi.log")
        raise HarnessError(f"{run.run_id}: the MPI run failed (exit {code}): {reason} "
                           f"(full output: {folder / 'mpi.log'})")
    with open(records) as fh:
        return sum(1 for line in fh if line.strip())


def _summary_error(folder: Path) -> str | None:
    """The error the run's summary names (rank 0's, or `gradcode run`'s for a job ended from outside), if any."""
    try:
        error = json.loads((folder / "summary.json").read_text()).get("error")
    except (OSError, ValueError, AttributeError):
        return None
    return error if isinstance(error, str) and error else None


REASON_MARKERS = ("mpi_runtime: rank", "gradcode run: error:", "error:", "Error")


def failure_reason(log: Path, lines: int = 3) -> str:
    """Why an MPI run failed, from its log: the lines that name a rank or an error (the last one otherwise)."""
    try:
        text = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return "no output"
    for marker_ in REASON_MARKERS:
        found = [x for x in text if marker_ in x]
        if found:
            return "; ".join(dict.fromkeys(found[:lines]))
    return text[-1] if text else "no output"


def write_experiment(exp: Experiment, out: Path, source_text: str | None) -> None:
    """``experiment.json`` (the run list with each run's fingerprint, clusters and notes the report reads) and the
    spec as given."""
    out.mkdir(parents=True, exist_ok=True)
    if source_text is not None:
        (out / "experiment.toml").write_text(source_text)
    info = {"name": exp.name, "quick": exp.quick, "clusters": exp.clusters, "notes": exp.notes,
            "runs": [r.run_id for r in exp.runs], "fingerprints": {r.run_id: r.digest() for r in exp.runs},
            "spec": exp.spec.raw}
    (out / "experiment.json").write_text(json.dumps(info, indent=2) + "\n")


RESULTS = ("summary.csv", "summary.json", "report.md", "report.html", "plots", "experiment.json", "experiment.toml")
SWEEP_RESULTS = ("sweep.csv", "sweep.json", "report.md", "report.html", REGIME_MAP, COMPUTATION)   # a sweep's own


def claim(out: Path, exp: Experiment, replace: bool = False) -> None:
    """Make ``out`` the folder of ``exp``: a folder holds one experiment. A folder holding another one (a different
    spec, or run folders of an unknown one) is a :class:`ConfigError` unless ``replace``, which deletes its results
    and the run folders the new experiment does not have (runs it shares with the same fingerprint stay: they are
    exactly what it would compute)."""
    other = _other_experiment(out, exp)
    if other is None:
        return
    if not replace:
        raise ConfigError(f"{out} holds another experiment ({other}); give another --out folder, or --replace to "
                          "delete its results and run this experiment there")
    keep = {r.run_id for r in exp.runs}
    remove_folders(out / "runs", keep.__contains__)
    remove_results(out, RESULTS)
    if _is_sweep(out):
        remove_results(out, SWEEP_RESULTS)
        remove_folders(out / "cells", lambda name: False)     # each under its lock: never a live cell's
        remove_results(out, ("cells",))


def _is_sweep(out: Path) -> bool:
    """True if ``out`` holds a sweep's results (``gradcode sweep``): its table or its cell folders."""
    return (out / "sweep.json").is_file() or (out / "cells").is_dir()


def _other_experiment(out: Path, exp: Experiment) -> str | None:
    """What else ``out`` holds (``None``: nothing, or this same experiment)."""
    if _is_sweep(out):
        return "the results of a sweep (`gradcode sweep`), not a comparison"
    path = out / "experiment.json"
    if not path.exists():
        return "run folders of an unknown experiment" if (out / "runs").is_dir() else None
    return other_spec(path, exp.spec.raw, "{name!r}, whose spec differs")


def other_spec(path: Path, raw: dict, differs: str) -> str | None:
    """What the results file ``path`` (``experiment.json``, ``sweep.json``) was written for, if not the spec
    ``raw``: ``differs`` (``{name}``: the name it gives) and the tables that differ; ``None`` for the same spec."""
    try:
        info = json.loads(path.read_text())
        old = info["spec"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"an unreadable {path.name}"
    new = json.loads(json.dumps(raw, default=str))
    if old == new:
        return None
    tables = [k for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)] if isinstance(old, dict) else []
    return differs.format(name=info.get("name", "?")) + (f" in {', '.join(tables)}" if tables else "")


def compare(source: str | Path | dict | None = None, out: str | Path = "results/default", *, quick: bool = False,
            cluster: str | None = None, progress: bool = True, mpi: tuple[bool, str] | None = None,
            replace: bool = False, overrides: dict[str, Any] | None = None, figures: bool = True,
            hostfile: str | Path | None = None) -> Path:
    """Run every run of an experiment that is not complete yet, then write the summary, report and plots
    (``figures=False``: no plots, as for the cells of a sweep; ``overrides``: ``--iterations`` / ``--seeds``;
    ``hostfile``: the MPI runs' hosts, as ``gradcode run --hostfile``).

    Everything is checked before any run starts: the spec (MPI rules included), that ``out`` can be written and
    holds no other experiment (``replace``: delete it, :func:`claim`), and that no other process writes it.
    """
    from ..output.report import build_report

    exp = load_experiment(source, quick=quick, cluster=cluster, mpi=mpi, overrides=overrides)
    hostfile = _checked_hostfile(hostfile, exp)
    out = writable_folder(out)
    text = None
    if source is None or isinstance(source, (str, Path)):
        text = (default_spec_path() if source is None else Path(source)).read_text()
    with FolderLock(out):
        claim(out, exp, replace)
        write_experiment(exp, out, text)
        failures = _execute_all(exp, out / "runs", progress, hostfile)
        if failures:
            exp.notes += [f"run failed: {msg}" for msg in failures]
            write_experiment(exp, out, None)
        try:
            build_report(out, figures=figures)
        except ConfigError:
            if not failures:
                raise
            raise HarnessError(f"every run failed; {len(failures)} failure(s):\n  "
                               + "\n  ".join(failures)) from None
    return out


def _checked_hostfile(hostfile: str | Path | None, exp: Experiment) -> str | None:
    """The hostfile as an absolute path (the MPI runs start in their own folders), checked before any run."""
    if hostfile is None:
        return None
    from mpi_runtime.launch import check_hostfile

    check_hostfile(str(hostfile))
    if not any(run.cluster == "mpi" for run in exp.runs):
        raise ConfigError(f"--hostfile {hostfile}: this comparison has no MPI run; give --cluster mpi or both")
    return str(Path(hostfile).resolve())


def _execute_all(exp: Experiment, runs_dir: Path, progress: bool, hostfile: str | None = None) -> list[str]:
    from ..plumbing.progress import progress_bar

    done = sum(is_complete(runs_dir / r.run_id, r) for r in exp.runs)
    failures: list[str] = []
    with progress_bar(len(exp.runs), initial=done, unit="run", disable=not progress, desc=exp.name) as bar:
        for run in exp.runs:
            bar.set_postfix_str(run.run_id[:60])
            try:
                if execute(run, runs_dir, hostfile):
                    bar.update(1)
            except HarnessError as err:
                failures.append(str(err))
                bar.update(1)
    return failures


def run_overrides(args) -> dict[str, Any]:
    """The ``--iterations`` / ``--seeds`` of a command line, for :func:`gradcode.spec.with_run_overrides`."""
    return {"iterations": args.iterations, "seeds": args.seeds}


def compare_main(args) -> int:
    """``gradcode compare [SPEC] [--out DIR] [--quick] [--cluster sim|mpi|both] [--iterations N] [--seeds S ...]
    [--replace]``."""
    name = Path(args.spec).stem if args.spec else "default"
    out = Path(args.out) if args.out else Path("results") / name
    out = compare(args.spec, out, quick=args.quick, cluster=args.cluster, replace=args.replace,
                  overrides=run_overrides(args), hostfile=args.hostfile)
    info = json.loads((out / "experiment.json").read_text())
    for note in info["notes"]:
        print(f"note: {note}", file=sys.stderr)
    for row in json.loads((out / "summary.json").read_text()):
        if row.get("diverged"):
            print(f"warning: run {row['run_id']} {row['diverged']}", file=sys.stderr)
    print(f"wrote {out / 'summary.csv'}, {out / 'summary.json'}, {out / 'report.md'} and {out / 'report.html'}")
    return 1 if any(n.startswith("run failed") for n in info["notes"]) else 0
