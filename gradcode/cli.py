"""The ``gradcode`` command line: ``demo``, ``list``, ``describe``, ``simulate``, ``run`` (MPI), ``compare``,
``advise``, ``sweep``, ``trace export``, ``report``, ``cluster`` (an emulated multi-host cluster)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

from .errors import GradcodeError
from .study.advise_cli import add_parser as advise_parser

# Only the standard library and gradcode.errors at import: numpy, scipy and the registry load inside main(), where
# a Ctrl-C is one line and exit code 130, not a KeyboardInterrupt traceback out of an import.


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gradcode", description="straggler-tolerant distributed gradient descent")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="build every code, lose stragglers, decode, print residuals")
    lst = sub.add_parser("list", help="list codes, schemes, delay models and workloads")
    lst.add_argument("--params", action="store_true", help="also print every parameter with its default")
    desc = sub.add_parser("describe", help="the parameters (with defaults) and documentation of a code, scheme, "
                                           "delay model or workload")
    desc.add_argument("name", help="a registered name, a plugin's name or 'package.module:ClassName'")
    desc.add_argument("--kind", choices=list(_kinds()), help="only this kind (a name may be both a code and a scheme)")
    sim = _one_run(sub.add_parser("simulate", help="run one scheme of a spec on the simulated cluster"))
    sim.add_argument("--workers", type=int, help="override [cluster] workers")
    sim.add_argument("--scheme", type=int, default=0, help="which [[schemes]] entry to run (default 0)")
    cmp_ = sub.add_parser("compare", help="run every scheme of a spec under the same delays; results, report, plots")
    cmp_.add_argument("spec", nargs="?", help="experiment spec (TOML); default: the built-in default experiment")
    cmp_.add_argument("--out", help="output folder (default: results/<spec name>)")
    cmp_.add_argument("--quick", action="store_true", help="a reduced run: fewer iterations and seeds (CI)")
    cmp_.add_argument("--cluster", choices=["sim", "mpi", "both"], help="override [cluster] kind")
    cmp_.add_argument("--hostfile", help="MPI hostfile: the MPI runs span its hosts (as `gradcode run --hostfile`)")
    _run_overrides(cmp_)
    cmp_.add_argument("--replace", action="store_true",
                      help="--out holds another experiment (a different spec): delete its results and run this one "
                           "there (without it, that is an error: a folder holds one experiment)")
    advise_parser(sub)
    swp = sub.add_parser("sweep", help="run a spec's [sweep] grid: one comparison per cell, in parallel; sweep.csv, "
                                       "report.md and the regime map")
    swp.add_argument("spec", help="experiment spec (TOML) with a [sweep] table")
    swp.add_argument("--out", required=True, help="output folder (one sweep per folder; rerun to resume)")
    swp.add_argument("--jobs", type=int, help="cells run at once on this machine (default: every core)")
    swp.add_argument("--executor", choices=["process", "mpi"], default="process",
                     help="process: local processes (default); mpi: mpi4py.futures, launched as `mpiexec -n N python "
                          "-m mpi4py.futures -m gradcode sweep ... --executor mpi`")
    _run_overrides(swp)
    swp.add_argument("--cell-figures", action="store_true", help="also draw every cell's comparison figures (slow)")
    swp.add_argument("--replace", action="store_true",
                     help="--out holds another sweep (a different spec): delete its results and run this one there")
    run = _one_run(sub.add_parser("run", help="run one scheme of a spec on an MPI cluster (builds and runs mpiexec)"))
    run.add_argument("--scheme", type=int, default=0, help="which [[schemes]] entry to run (default 0)")
    run.add_argument("--hostfile", help="MPI hostfile, for several hosts")
    run.add_argument("--mpiexec", help="the MPI launcher (default: the virtual environment's, $MPIEXEC, PATH)")
    run.add_argument("--timeout", type=float, help="kill the job after this many seconds")
    trc = sub.add_parser("trace", help="straggler traces: export a run's measured per-worker times for replay")
    trc_sub = trc.add_subparsers(dest="trace_command", required=True)
    exp = trc_sub.add_parser("export", help="write a run's per-iteration, per-worker compute and communication "
                                            "times as a trace CSV (replay: [delay] name = \"trace\")")
    exp.add_argument("run_dir", help="output folder of `gradcode run` or `gradcode simulate` (or of `gradcode "
                                     "compare`, with --run)")
    exp.add_argument("--out", required=True, help="the CSV file to write")
    exp.add_argument("--run", help="in a compare folder: which run (a folder name under runs/)")
    _cluster_parser(sub)
    rep = sub.add_parser("report", help="rebuild report.md and the plots of a results folder from its records")
    rep.add_argument("folder", help="a folder written by `gradcode compare`, or by `gradcode run` / `gradcode "
                                    "simulate` (one run: per-worker and per-host tables, its timeline)")
    return p


def _cluster_parser(sub) -> None:
    clu = sub.add_parser("cluster", help="an emulated cluster on this machine: hosts as network namespaces (root)")
    clu_sub = clu.add_subparsers(dest="cluster_command", required=True)
    up = clu_sub.add_parser("up", help="make the hosts; prints the hostfile and the environment for mpiexec")
    run = clu_sub.add_parser("run", help="make the hosts, run COMMAND with the environment (GRADCODE_HOSTFILE, "
                                         "HYDRA_LAUNCHER_EXEC, ...), remove the hosts however it ends")
    for p in (up, run):
        p.add_argument("--hosts", type=int, default=3, help="number of hosts (default 3)")
        p.add_argument("--slots", type=int, default=3, help="ranks per host in the hostfile (default 3)")
        p.add_argument("--rate", action="append", metavar="HOST:RATE",
                       help="limit host HOST's link both ways (tc tbf), e.g. 1:20mbit; repeatable")
        p.add_argument("--cpu", action="append", metavar="HOST:CORES",
                       help="limit host HOST's processes to CORES cores (cgroup cpu quota), e.g. 2:0.25; repeatable")
    down = clu_sub.add_parser("down", help="remove the hosts (idempotent: nothing to remove is fine)")
    status = clu_sub.add_parser("status", help="the hosts, their addresses and limits, and how to use them")
    for p in (up, run, down, status):
        p.add_argument("--prefix", default="host", help="host names PREFIX0, PREFIX1, ... (default host)")
        p.add_argument("--dir", help="folder of hostfile, launcher, env.sh (default /run/gradcode-cluster/PREFIX)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="COMMAND", help="-- COMMAND [ARGS...]")
    measure = clu_sub.add_parser("measure", help="measure the links from a hostfile's first host to the others "
                                                 "(ping-pong, bulk transfer) and print their [network] table")
    measure.add_argument("--hostfile", required=True, help="the hosts (MPICH host:slots or Open MPI slots=N lines)")
    measure.add_argument("--bytes", type=int, default=1 << 24, help="bytes of the bulk transfer (default 16 MiB)")
    measure.add_argument("--out", help="also write the table to this TOML file")
    measure.add_argument("--mpiexec", help="the MPI launcher (default: the virtual environment's)")


def _one_run(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The arguments of the commands that run one scheme of a spec (``simulate``, ``run``)."""
    parser.add_argument("spec", help="experiment spec (TOML)")
    parser.add_argument("--out", required=True, help="output folder for records.jsonl and summary.json")
    parser.add_argument("--iterations", type=int, help="override [run] iterations")
    parser.add_argument("--seed", type=int, help="override [run] seed")
    return parser


def _run_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--iterations", type=int, help="override [run] iterations")
    parser.add_argument("--seeds", type=int, nargs="+", metavar="SEED", help="override [run] seed / seeds")


def _kinds() -> dict:
    from .plumbing.registry import KINDS

    return KINDS


def main(argv: list[str] | None = None) -> int:
    command = "gradcode"
    try:
        args = _parser().parse_args(argv)
        command = f"gradcode {args.command}"
        return _COMMANDS[args.command](args)
    except GradcodeError as err:
        print(f"{command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C (also while the libraries load): one line, the shell's exit code for SIGINT; records written so far
        # stay (flushed per iteration)
        print(f"\n{command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # output piped into `head` and closed early: not an error (see the Python docs on SIGPIPE)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _demo(args) -> int:
    from .study.demo import main as demo

    demo()
    return 0


def _list(args) -> int:
    for title, registry in zip(("codes", "schemes", "delay models", "workloads"), _kinds().values(), strict=True):
        print(f"{title}:")
        for name, text in registry.list().items():
            print(f"  {name:<22} {text}")
            if args.params:
                try:
                    about = registry.describe(name)
                except GradcodeError:   # a broken plugin: its line above says why
                    continue
                print("      " + (", ".join(_param(p) for p in about.params) or "(no parameters)")
                      + (f"; any other key: {about.forwarded}" if about.forwarded else ""))
    return 0


def _param(p) -> str:
    return p.name if p.required else f"{p.name}={p.default!r}"


def _describe(args) -> int:
    from .plumbing.registry import add_user_dirs, describe

    add_user_dirs(Path.cwd())    # 'mymodule:Class' from the module's folder, as a spec's import paths are found
    print("\n\n".join(d.text() for d in describe(args.name, args.kind)))
    return 0


def _simulate(args) -> int:
    from .clusters.records import RecordWriter, write_summary
    from .clusters.sim import check_simulable, simulate
    from .errors import ConfigError
    from .plumbing.outdir import FolderLock, writable_folder
    from .spec import build, load_spec

    spec = load_spec(args.spec, {"iterations": args.iterations, "seed": args.seed})   # --seed replaces [run] seeds
    if args.workers is not None:
        spec.workers = args.workers
        spec.cluster["workers"] = args.workers
    if "seeds" in spec.run:      # a comparison's seeds: simulate runs one of them, never silently another
        raise ConfigError(f"[run] seeds = {spec.run['seeds']!r}: `gradcode simulate` runs one seed; give --seed "
                          "(one of them), or run them all with `gradcode compare`")
    if not 0 <= args.scheme < len(spec.schemes):
        raise ConfigError(f"--scheme {args.scheme}: the spec has {len(spec.schemes)} scheme(s), "
                          f"0..{len(spec.schemes) - 1}")
    schemes, delay, workload = build(spec, scheme_index=args.scheme)
    check_simulable(delay)     # natural timing is MPI-only: refused before the output folder is made
    out = writable_folder(args.out)     # checked before the simulation, not after it
    with FolderLock(out):
        (out / "spec.json").write_text(json.dumps(spec.raw, indent=2) + "\n")
        # records reach the disk as they are made: Ctrl-C keeps the finished iterations
        with RecordWriter(out / "records.jsonl") as writer:
            result = simulate(schemes[0], delay, workload, spec.options, progress=True, on_record=writer.write)
        write_summary(out, result.summary)
    _print_summary(result.summary)
    print(f"\nwrote {Path(out) / 'records.jsonl'} and {Path(out) / 'summary.json'}")
    return 0


def _run(args) -> int:
    # mpi_runtime.launch only builds and runs the mpiexec command; nothing here imports mpi4py
    from mpi_runtime.launch import launch

    return launch(args.spec, args.out, scheme=args.scheme, iterations=args.iterations, seed=args.seed,
                  hostfile=args.hostfile, mpiexec=args.mpiexec, timeout=args.timeout)


def _print_summary(summary: dict) -> None:
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        shown = f"{value:.6g}" if isinstance(value, float) else value
        print(f"  {key:<{width}}  {shown}")
    if summary.get("diverged"):
        print(f"\nwarning: {summary['divergence_note']}", file=sys.stderr)


def _trace(args) -> int:
    from .study.capture import export_trace

    out, rows, skipped = export_trace(args.run_dir, args.out, args.run)
    print(f"wrote {out}: {rows} rows (iteration x worker)"
          + (f"; skipped {len(skipped)} iteration(s) in which some worker had no times" if skipped else ""))
    print(f'replay: [delay] name = "trace", trace = "{out}", normalize = false, offset = 0')
    return 0


def _cluster(args) -> int:
    from mpi_runtime.cluster_emu import ClusterError, EmulatedCluster, parse_limits

    if args.cluster_command == "measure":
        from mpi_runtime.linkprobe import measure_command

        return measure_command(args.hostfile, args.bytes, args.out, args.mpiexec)
    if args.cluster_command in ("down", "status"):
        c = EmulatedCluster.from_folder(args.prefix, args.dir)
        if args.cluster_command == "down":
            gone = c.down()
            print(f"removed {' '.join(gone)}" if gone else f"no hosts {args.prefix}0.. to remove")
        else:
            print(_cluster_text(c) if c.launcher.is_file() else f"no emulated cluster with prefix {args.prefix}")
        return 0
    rate = parse_limits(args.rate, "rate", args.hosts)
    cpu = parse_limits(args.cpu, "cpu", args.hosts)
    c = EmulatedCluster(args.hosts, slots=args.slots, prefix=args.prefix, folder=args.dir, rate=rate, cpu=cpu)
    if args.cluster_command == "up":
        c.up()
        print(_cluster_text(c))
        return 0
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise ClusterError("gradcode cluster run: give the command after --")
    import subprocess

    with c:
        print(_cluster_text(c), flush=True)
        return subprocess.run(command, env={**os.environ, **c.env()}).returncode


def _cluster_text(c) -> str:
    lines = [f"{name}  {c.address(i)}" + (f"  link {c.rate[i]}" if i in c.rate else "")
             + (f"  cpu {c.cpu[i]:g} cores" if i in c.cpu else "") for i, name in enumerate(c.names)]
    lines += [c.proof] if c.proof else []
    return "\n".join(lines + [f"hostfile {c.hostfile} ({c.slots} slots a host); to use it:",
                              f"  . {c.folder / 'env.sh'}",
                              f"  gradcode run SPEC --out DIR --hostfile {c.hostfile}",
                              f"  gradcode cluster down --prefix {c.prefix}"])


def _imported(path: str):
    """The command ``module:function`` of gradcode, imported when it runs (see the note on imports above)."""
    def command(args) -> int:
        module, _, name = path.partition(":")
        return getattr(importlib.import_module(module, __package__), name)(args)
    return command


_COMMANDS = {"demo": _demo, "list": _list, "describe": _describe, "simulate": _simulate, "run": _run,
             "compare": _imported(".study.harness:compare_main"), "sweep": _imported(".study.sweep_run:sweep_main"),
             "trace": _trace, "report": _imported(".output.run_report:report_main"), "cluster": _cluster,
             "advise": _imported(".study.advise:advise_main")}
