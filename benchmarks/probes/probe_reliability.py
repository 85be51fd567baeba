"""Probe (issue 11): gradcode tried as an adversarial user would, many cases, scripted; not a test (minutes).

Kinds (``--kinds``, default all):

- ``inputs``: every key of a small spec set to each of a list of bad values (negative, zero, fractions, strings,
  numbers as strings, lists, tables, booleans, huge, NaN, infinity), run in-process through ``compare`` with a
  one-iteration run. Outcome: ``clear error`` (a :class:`gradcode.GradcodeError`), ``traceback`` (any other
  exception), ``accepted`` (the run finished: the value was valid for that key, or was ignored -- listed with
  ``-v`` to read through), ``hang`` (no answer within the timeout).
- ``resume``: ``gradcode compare`` killed (``kill -9`` of the process group, or SIGINT) at a random time, then
  resumed; the summary must equal a clean run's (``data lost`` otherwise), no process may outlive it.
- ``mpi``: MPI runs with ``GRADCODE_TEST_CRASH`` / ``GRADCODE_TEST_NAN`` faults on random ranks and iterations, and
  bad ``[run]`` values; ``clear error`` if the job ends with the rank named (or a ConfigError) and ``summary.json``
  written when rank 0 lives, ``unnamed`` if it ends without naming it, ``hang`` on the timeout.
- ``decode``: ``probe_decode.py`` (exact decodes of random responder sets): ``silent wrong`` counts gradients off
  by more than 1e-8 with no warning.

    OPENBLAS_NUM_THREADS=1 python benchmarks/probes/probe_reliability.py [--kinds inputs,resume,mpi,decode]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gradcode import GradcodeError  # noqa: E402
from gradcode.harness import compare  # noqa: E402

ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
BASE = {
    "experiment": {"name": "probe"},
    "cluster": {"workers": 4, "kind": "sim", "late_workers": "finish"},
    "workload": {"name": "least_squares", "n_samples": 40, "dim": 3, "seed": 0},
    "delay": {"name": "pareto", "alpha": 2.0, "t_m": 1.0, "comm": 0.1},
    "schemes": [{"name": "coded", "code": "cyclic_mds", "s": 1}, {"name": "fastest_k", "k": 3},
                {"name": "adaptive_k", "k0": 2}],
    "run": {"iterations": 2, "seed": 0, "lr": 0.05},
}
BAD = [-1, 0, 0.5, 1.5, "abc", "2", "1.5", [], [1, 2], {}, {"x": 1}, True, 2**70, 1e308, math.nan, math.inf,
       -math.inf, ""]


def _keys(spec: dict):
    for table, body in spec.items():
        if isinstance(body, dict):
            for key in body:
                yield (table, key)
        elif isinstance(body, list):
            for i, entry in enumerate(body):
                for key in entry:
                    yield (table, i, key)


def _set(spec: dict, where: tuple, value) -> dict:
    out = copy.deepcopy(spec)
    target = out[where[0]] if len(where) == 2 else out[where[0]][where[1]]
    target[where[-1]] = value
    return out


def _simulate_all(spec: dict) -> None:
    from gradcode.harness import load_experiment
    from gradcode.sim import simulate
    from gradcode.spec import build, run_kwargs

    exp = load_experiment(spec, mpi=(False, "probe"))
    for di in range(len(exp.spec.delays)):
        schemes, delay, workload = build(exp.spec, delay_index=di)
        for scheme in schemes:
            simulate(scheme, delay, workload, **run_kwargs(exp.spec))


def probe_inputs(verbose: bool, full: bool = False) -> Counter:
    counts: Counter = Counter()
    accepted = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, where in enumerate(_keys(BASE)):
            for value in BAD:
                spec = _set(BASE, where, value)
                out = Path(tmp) / f"o{n}_{len(accepted)}_{counts.total()}"
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        if full:
                            compare(spec, out, progress=False, figures=False)
                        else:     # validation, then each run's scheme built and simulated in-process
                            _simulate_all(spec)
                    counts["accepted"] += 1
                    accepted.append((where, value))
                except GradcodeError:
                    counts["clear error"] += 1
                except Exception as err:   # noqa: BLE001 -- what the probe counts
                    counts["traceback"] += 1
                    print(f"  traceback: {where} = {value!r}: {type(err).__name__}: {err}"[:300])
                counts["tried"] += 1
            print(f"  after {'.'.join(map(str, where))}: {dict(counts)}", flush=True)   # survives a timeout
    if verbose:
        for where, value in accepted:
            print(f"  accepted: {'.'.join(map(str, where))} = {value!r}")
    return counts


def _cli(args: list, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gradcode", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True, **kw)


def _alive(tag: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if tag in (p / "cmdline").read_bytes().decode(errors="replace"):
                    out.append(int(p.name))
            except OSError:
                pass
    return out


def _rows(out: Path):
    rows = json.loads((out / "summary.json").read_text())
    return sorted((r["scheme"], r["delay"], r["seed"], r["iterations"], r["total_time"]) for r in rows)


def probe_resume(trials: int, rng: np.random.Generator) -> Counter:
    import tomli_w

    counts: Counter = Counter()
    spec = copy.deepcopy(BASE)
    spec["run"] = {"iterations": 300, "seeds": [0, 1], "lr": 0.05}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.toml"
        path.write_text(tomli_w.dumps(spec))
        ref = Path(tmp) / "ref"
        proc = _cli(["compare", path, "--out", ref])
        proc.communicate(timeout=900)
        reference = _rows(ref)
        for trial in range(trials):
            out = Path(tmp) / f"t{trial}"
            counts["tried"] += 1
            proc = _cli(["compare", path, "--out", out])
            time.sleep(float(rng.uniform(1.0, 8.0)))
            how = signal.SIGKILL if trial % 2 == 0 else signal.SIGINT
            try:
                os.killpg(proc.pid, how)
            except ProcessLookupError:
                pass
            _, err = proc.communicate(timeout=120)
            if "Traceback" in err:
                counts["traceback"] += 1
                print(f"  traceback after {how.name}: {err[-600:]}")
            time.sleep(1.0)
            if _alive(str(out)):
                counts["orphans"] += 1
            again = _cli(["compare", path, "--out", out])
            try:
                _, err = again.communicate(timeout=900)
            except subprocess.TimeoutExpired:
                again.kill()
                counts["hang"] += 1
                continue
            if again.returncode != 0:
                counts["resume failed"] += 1
                print(f"  resume failed: {err[-300:]}")
            elif _rows(out) != reference:
                counts["data lost"] += 1
            else:
                counts["resumed identical"] += 1
    return counts


def probe_mpi(cases: int, rng: np.random.Generator) -> Counter:
    import tomli_w

    counts: Counter = Counter()
    spec = copy.deepcopy(BASE)
    spec["cluster"]["workers"] = 3
    spec["schemes"] = [{"name": "fastest_k", "k": 2}]
    spec["run"] = {"iterations": 8, "seed": 0, "time_scale": 0.01, "grace": 3.0, "startup_timeout": 10.0}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.toml"
        path.write_text(tomli_w.dumps(spec))
        for case in range(cases):
            rank = int(rng.integers(0, 4))
            when = rng.choice(["start", "warmup", str(int(rng.integers(0, 8)))])
            how = rng.choice(["", ":exit", ":kill", ":hang"])
            env = {"GRADCODE_TEST_CRASH": f"{rank}:{when}{how}"}
            if case % 5 == 4:
                env = {"GRADCODE_TEST_NAN": f"{int(rng.integers(1, 4))}:{int(rng.integers(0, 8))}"}
            out = Path(tmp) / f"m{case}"
            counts["tried"] += 1
            proc = subprocess.Popen([sys.executable, "-m", "gradcode", "run", str(path), "--out", str(out)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env={**ENV, **env}, start_new_session=True)
            try:
                so, se = proc.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                counts["hang"] += 1
                print(f"  hang: {env}")
                continue
            text = so + se
            if "NAN" in next(iter(env)):
                ok = proc.returncode in (0, 1) and (out / "summary.json").is_file()
                counts["clear error" if ok else "unnamed"] += 1
                continue
            named = f"rank {rank}" in text
            summary = (out / "summary.json").is_file()
            if proc.returncode != 0 and named and (summary or rank == 0):
                counts["clear error"] += 1
            elif proc.returncode == 0:
                counts["silent (exit 0)"] += 1
                print(f"  exit 0 with {env}")
            else:
                counts["unnamed"] += 1
                print(f"  unnamed: {env} rc={proc.returncode} summary={summary}: {text[-400:]!r}")
            if "Traceback" in se and "InjectedCrash" not in se:
                counts["traceback"] += 1
            if _alive(str(out)):
                counts["orphans"] += 1
    return counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="inputs,resume,mpi,decode")
    ap.add_argument("--trials", type=int, default=6, help="interruptions")
    ap.add_argument("--mpi-cases", type=int, default=12)
    ap.add_argument("--decodes", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--full", action="store_true", help="inputs: through compare() (slow: a folder per case)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    kinds = args.kinds.split(",")
    if "inputs" in kinds:
        print("inputs:", dict(probe_inputs(args.verbose, args.full)), flush=True)
    if "resume" in kinds:
        print("resume:", dict(probe_resume(args.trials, rng)), flush=True)
    if "mpi" in kinds:
        print("mpi:", dict(probe_mpi(args.mpi_cases, rng)), flush=True)
    if "decode" in kinds:
        subprocess.run([sys.executable, str(Path(__file__).with_name("probe_decode.py")), "--cases",
                        str(args.decodes), "--seed", str(args.seed)], env=ENV, check=False)


if __name__ == "__main__":
    main()
