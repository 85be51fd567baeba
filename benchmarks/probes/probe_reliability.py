"""Probe: gradcode tried as an adversarial user would, many cases, scripted; not a test (minutes).

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
import select
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
from gradcode.study.harness import compare  # noqa: E402

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
BAD = [-1, 0, 0.5, 1.5, "abc", "2", "1.5", "-1", [], [1, 2], {}, {"x": 1}, True, 2**70, 1e308, 1e-300, math.nan,
       math.inf, -math.inf, "", "sync"]
CASE_TIMEOUT = 60.0     # seconds a case may take before it counts as a hang (its process group is killed)

# a valid value for every parameter a group's baseline must set (the rest keep their defaults)
SCHEME_BASE = {"fastest_k": {"k": 3}, "backup": {"k": 3, "b": 1}, "coded": {"code": "cyclic_mds", "s": 1},
               "partial_coded": {"s": 1}}
DELAY_BASE = {"mixture": {"components": [{"weight": 1, "model": "constant"}]}, "straggle": {"count": 1},
              "heterogeneous": {"speeds": [1, 2, 1, 0.5]}}
SCHEME_SAMPLES = {"dropcompute": 200, "anytime": 400}   # schemes with many partitions need more samples
WORKLOAD_BASE = {"least_squares": {"n_samples": 40, "dim": 3}, "logistic": {"n_samples": 40, "dim": 3},
                 "mlp": {"hidden": [4]}}


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


def _groups() -> list[tuple[str, dict, list[tuple]]]:
    """``(label, baseline spec, keys to spoil)``: the small spec's keys, then every [run] and [cluster] key, then
    every parameter of every registered code, scheme, delay model and workload (from the registry)."""
    from gradcode.plumbing.registry import KINDS
    from gradcode.spec import CLUSTER_KEYS, RUN_KEYS

    out = [("spec", BASE, list(_keys(BASE)))]
    run = {k: v for k, v in BASE["run"].items() if k != "seed"}
    out.append(("run", {**BASE, "run": run},
                [("run", k) for k in RUN_KEYS if k not in BASE["run"] or k == "seed"]
                + [("cluster", k) for k in CLUSTER_KEYS if k not in BASE["cluster"]]))
    for name in KINDS["code"].names():
        spec = {**BASE, "schemes": [{"name": "coded", "code": name, "s": 0 if name == "uncoded" else 1}]}
        params = [p.name for p in KINDS["code"].describe(name).params]
        out.append((f"code {name}", spec, [("schemes", 0, k) for k in ["s", *params]]))
    for name in KINDS["scheme"].names():
        spec = {**BASE, "schemes": [{"name": name, **SCHEME_BASE.get(name, {})}]}
        if name in SCHEME_SAMPLES:
            spec["workload"] = {**BASE["workload"], "n_samples": SCHEME_SAMPLES[name]}
        params = [p.name for p in KINDS["scheme"].describe(name).params]
        out.append((f"scheme {name}", spec, [("schemes", 0, k) for k in params]))
    for name in KINDS["delay"].names():
        if name == "none":     # natural timing: MPI only (the simulator refuses it, a ConfigError)
            continue
        spec = {**BASE, "delay": {"name": name, **DELAY_BASE.get(name, {})}}
        params = [p.name for p in KINDS["delay"].describe(name).params]
        out.append((f"delay {name}", spec, [("delay", k) for k in params]))
    for name in KINDS["workload"].names():
        spec = {**BASE, "workload": {"name": name, **WORKLOAD_BASE.get(name, {})}}
        params = [p.name for p in KINDS["workload"].describe(name).params]
        out.append((f"workload {name}", spec, [("workload", k) for k in params]))
    return out


def _simulate_all(spec: dict) -> None:
    from gradcode.clusters.sim import simulate
    from gradcode.spec import build, run_kwargs
    from gradcode.study.harness import load_experiment

    exp = load_experiment(spec, mpi=(False, "probe"))
    for di in range(len(exp.spec.delays)):
        schemes, delay, workload = build(exp.spec, delay_index=di)
        for scheme in schemes:
            simulate(scheme, delay, workload, **run_kwargs(exp.spec))


def _serve() -> None:
    """The child of :func:`probe_inputs`: one JSON case a line on stdin, one JSON outcome a line on the real stdout
    (what the code under test prints goes to /dev/null)."""
    reply = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    for line in sys.stdin:
        case = json.loads(line)
        out = Path(case["tmp"]) / f"o{case['id']}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if case["full"]:
                    compare(case["spec"], out, progress=False, figures=False)
                else:     # validation, then each run's scheme built and simulated in-process
                    _simulate_all(case["spec"])
            result = {"outcome": "accepted"}
        except GradcodeError as err:
            result = {"outcome": "clear error", "text": str(err)[:300]}
        except BaseException as err:   # noqa: BLE001 -- what the probe counts
            result = {"outcome": "traceback", "text": f"{type(err).__name__}: {err}"[:300]}
        reply.write(json.dumps({"id": case["id"], **result}) + "\n")
        reply.flush()


class _Child:
    """A :func:`_serve` process in its own session; a case that takes longer than ``CASE_TIMEOUT`` is a hang: the
    whole process group is killed and the next case gets a new child."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV,
                                     start_new_session=True)
        self.buf = b""

    def ask(self, case: dict, timeout: float) -> dict | None:
        self.proc.stdin.write((json.dumps(case) + "\n").encode())
        self.proc.stdin.flush()
        end = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:       # the child died (a crash of the interpreter itself)
                return {"outcome": "traceback", "text": f"the process died, exit code {self.proc.wait()}"}
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def probe_inputs(verbose: bool, full: bool = False, timeout: float = CASE_TIMEOUT,
                 only: str | None = None) -> tuple[Counter, list]:
    """Every group's baseline (must be accepted), then each of its keys set to each value of ``BAD``."""
    counts: Counter = Counter()
    found = []
    child = _Child()
    with tempfile.TemporaryDirectory() as tmp:
        for label, base, keys in _groups():
            if only and only not in label:
                continue
            cases = [(None, None)] + [(where, value) for where in keys for value in BAD]
            for where, value in cases:
                spec = base if where is None else _set(base, where, value)
                case = {"id": counts.total(), "spec": spec, "full": full, "tmp": tmp}
                answer = child.ask(case, timeout)
                if answer is None:
                    child.kill()
                    child = _Child()
                    answer = {"outcome": "hang", "text": f"no answer in {timeout:.0f} s"}
                what = f"{label}: " + ("baseline" if where is None else f"{'.'.join(map(str, where))} = {value!r}")
                if where is None:
                    if answer["outcome"] != "accepted":
                        print(f"  baseline failed ({answer['outcome']}): {what}: {answer.get('text')}", flush=True)
                        break
                    continue
                counts["tried"] += 1
                counts[answer["outcome"]] += 1
                if answer["outcome"] in ("traceback", "hang"):
                    print(f"  {answer['outcome']}: {what}: {answer.get('text')}", flush=True)
                found.append({"case": what, **answer})
            print(f"  after {label}: {dict(counts)}", flush=True)   # survives an interruption
    child.kill()
    if verbose:
        for row in found:
            if row["outcome"] == "accepted":
                print(f"  accepted: {row['case']}")
    return counts, found


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


def _unresponsive(out: Path):
    try:
        return json.loads((out / "summary.json").read_text()).get("unresponsive_workers")
    except (OSError, ValueError):
        return None


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
            elif proc.returncode == 0 and named and rank > 0 and _unresponsive(out) == [rank - 1]:
                # a hung worker the scheme could do without (fastest-k): the run completes, exit 0 by design
                # (mpi_runtime/__main__.py), with the rank named on stderr and in summary.json
                counts["named, run completed"] += 1
            elif proc.returncode == 0:
                counts["silent (exit 0)"] += 1
                print(f"  exit 0 with {env}: {text[-300:]!r}")
            else:
                counts["unnamed"] += 1
                print(f"  unnamed: {env} rc={proc.returncode} summary={summary}: {text[-400:]!r}")
            if "Traceback" in se and "InjectedCrash" not in se:
                counts["traceback"] += 1
            if _alive(str(out)):
                counts["orphans"] += 1
    return counts


def probe_decode(cases: int, seed: int) -> dict:
    """``probe_decode.py`` for each exact real code; its counts summed."""
    out: Counter = Counter()
    for code in ("cyclic_mds", "reed_solomon", "cyclic_repetition"):
        proc = subprocess.run([sys.executable, str(Path(__file__).with_name("probe_decode.py")), "--cases",
                               str(cases), "--seed", str(seed), "--code", code, "--json"], env=ENV,
                              capture_output=True, text=True, check=False)
        print(proc.stdout.rstrip(), flush=True)
        if proc.returncode != 0:
            print(proc.stderr[-600:])
            out["traceback"] += 1
            continue
        out.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="inputs,resume,mpi,decode")
    ap.add_argument("--trials", type=int, default=6, help="interruptions")
    ap.add_argument("--mpi-cases", type=int, default=12)
    ap.add_argument("--decodes", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=CASE_TIMEOUT, help="inputs: seconds per case (then a hang)")
    ap.add_argument("--only", help="inputs: only the groups whose label contains this (e.g. 'delay')")
    ap.add_argument("--json", help="write the counts (and every input case's outcome) to this file")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--full", action="store_true", help="inputs: through compare() (slow: a folder per case)")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)   # the inputs' child process
    args = ap.parse_args()
    if args.serve:
        return _serve()
    rng = np.random.default_rng(args.seed)
    kinds = args.kinds.split(",")
    result: dict = {"seed": args.seed}
    if "inputs" in kinds:
        counts, cases = probe_inputs(args.verbose, args.full, args.timeout, args.only)
        print("inputs:", dict(counts), flush=True)
        result["inputs"], result["input_cases"] = dict(counts), cases
    if "resume" in kinds:
        result["resume"] = dict(probe_resume(args.trials, rng))
        print("resume:", result["resume"], flush=True)
    if "mpi" in kinds:
        result["mpi"] = dict(probe_mpi(args.mpi_cases, rng))
        print("mpi:", result["mpi"], flush=True)
    if "decode" in kinds:
        result["decode"] = probe_decode(args.decodes, args.seed)
        print("decode:", result["decode"], flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
