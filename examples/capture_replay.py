"""Capture and replay: does a replay of one real run predict the other schemes on the same cluster?

Question. ``gradcode trace export`` turns a run's measured per-worker times into a straggler trace, and the ``trace``
delay model replays it in the simulator under any scheme. If the stragglers of a real cluster are a property of its
workers (not of the scheme that runs on them), one captured ``sync`` run should predict every other scheme's
iteration time. Does it, and where does it fail?

Setup. MPI with natural timing (``[delay] name = "none"``: nothing injected, a response is real compute plus real
transfer, records in wall seconds), ``n = 8`` workers plus the master on this machine, the ``mlp`` workload (digits,
two hidden layers of 256: a few milliseconds of real compute per worker and step). 1. Capture: ``sync`` for ``T``
iterations. 2. Export: ``gradcode trace export`` (compute per unit of load, communication per step). 3. Predict:
replay the trace in the simulator (``normalize = false, offset = 0``: step ``t`` of the capture at iteration ``t``)
under ``sync``, ``fastest_k``, ``backup``, a code (cyclic repetition, ``s = 1``: twice the load) and DropCompute
(``M = 4``, no warm-up, a fixed ``tau`` from the capture: 1.25 x the median per-step compute). 4. Measure: run each
scheme on MPI with natural timing. Steps 1-4 make a round; ``R`` rounds (median, and min-max as the noise: the load
of this machine drifts, so each round predicts from its own capture). 5. Table: predicted / measured mean iteration
time.

Where it can fail: the replay knows each worker's measured time, not why it took that long. On a machine with
fewer cores than ranks (2 cores here, 9 ranks) compute times are mostly CPU contention between ranks: a scheme that
makes workers compute at other moments, or more (a code's double load), meets another contention than the capture
did, and a replay of compute times cannot know it. Nor does the simulator know the master's per-message cost.

Run: ``python examples/capture_replay.py [--quick] [--out DIR] [--repeats R] [--iterations T]``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
import tomli_w  # noqa: E402
from _common import table, write_report  # noqa: E402

from gradcode import make_scheme, simulate  # noqa: E402
from gradcode.study.capture import export_trace  # noqa: E402

NAME = "capture_replay"
N_WORKERS = 8
WORKLOAD = {"name": "mlp", "hidden": [256, 256], "seed": 0}
TAU_FACTOR = 1.25   # DropCompute's fixed tau: this times the captured median compute of a step


def schemes(n: int, tau: float) -> list[tuple[str, dict]]:
    """``(label, scheme table)`` of the schemes predicted and measured (``tau``: DropCompute's threshold)."""
    return [("sync", {"name": "sync"}),
            (f"fastest_k k={n - 2}", {"name": "fastest_k", "k": n - 2}),
            ("backup b=2", {"name": "backup", "b": 2}),
            ("coded cyclic s=1", {"name": "coded", "code": "cyclic_repetition", "s": 1}),
            (f"dropcompute M=4 tau={tau:.3g}", {"name": "dropcompute", "M": 4, "tau": tau, "warmup": 0})]


def mpi_spec(scheme: dict, n: int, iterations: int, workload: dict) -> dict:
    return {"cluster": {"workers": n}, "workload": dict(workload), "delay": {"name": "none"}, "scheme": dict(scheme),
            "run": {"iterations": iterations, "seed": 0, "time_scale": 1.0, "loss_every": iterations}}


def run_mpi(spec: dict, out: Path, timeout: float) -> dict:
    """Run ``spec`` as ``gradcode run`` does (MPI; the launcher sets MPICH's settings for more ranks than cores, and
    ``mpiexec`` dies with this process) and return its summary."""
    from mpi_runtime.launch import launch

    out.mkdir(parents=True, exist_ok=True)
    path = out / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    code = launch(path, out / "run", timeout=timeout, echo=lambda *a, **k: None)
    summary = json.loads((out / "run" / "summary.json").read_text()) if (out / "run" / "summary.json").is_file() \
        else {}
    if code != 0 or "error" in summary:
        raise RuntimeError(f"MPI run of {path} failed (exit {code}): {summary.get('error', 'see ' + str(out))}")
    return summary


def predict(scheme: dict, n: int, iterations: int, trace: Path) -> float:
    """Mean iteration time of ``scheme`` replayed on the captured trace in the simulator (timing only)."""
    delay = {"name": "trace", "trace": str(trace), "normalize": False, "offset": 0}
    spec = {k: v for k, v in scheme.items() if k != "name"}
    res = simulate(make_scheme(scheme["name"], n=n, **spec), delay, None, iterations=iterations, seed=0)
    return float(res.summary["mean_iteration_time"])


def main(argv=None) -> dict:
    args = _args(argv)
    n = 4 if args.quick else N_WORKERS
    iterations = args.iterations or (6 if args.quick else 30)
    repeats = args.repeats or (1 if args.quick else 3)
    workload = {"name": "mlp", "hidden": [16], "seed": 0} if args.quick else WORKLOAD
    out = Path(args.out)
    timeout = 120.0 if args.quick else 600.0
    began = time.perf_counter()

    result: dict[str, dict] = {}
    captures, tau, rows, skipped = [], None, 0, []
    for r in range(repeats):     # rounds: a capture, then every scheme, so that a drift of the load hits all alike
        capture = run_mpi(mpi_spec({"name": "sync"}, n, iterations, workload), out / f"round{r}" / "capture",
                          timeout)
        trace, rows, skipped = export_trace(out / f"round{r}" / "capture" / "run", out / f"round{r}" / "trace.csv")
        data = np.loadtxt(trace, delimiter=",", skiprows=1, ndmin=2)
        if tau is None:          # fixed from the first capture, the same on MPI and in every replay
            tau = TAU_FACTOR * float(np.median(data[:, 4]))
        captures.append(capture["mean_iteration_time"])
        print(f"round {r}: captured sync, mean iteration {capture['mean_iteration_time'] * 1e3:.4g} ms; median "
              f"compute {np.median(data[:, 4]) * 1e3:.3g} ms, comm {np.median(data[:, 5]) * 1e3:.3g} ms")
        for label, scheme in schemes(n, tau):
            got = result.setdefault(label, {"predicted": [], "measured": []})
            got["predicted"].append(predict(scheme, n, iterations, trace))
            got["measured"].append(run_mpi(mpi_spec(scheme, n, iterations, workload),
                                           out / f"round{r}" / _slug(label), timeout)["mean_iteration_time"])
            print(f"  {label}: predicted {got['predicted'][-1] * 1e3:.4g} ms, measured "
                  f"{got['measured'][-1] * 1e3:.4g} ms")

    def spread(xs: list[float]) -> str:
        return f"{np.median(xs) * 1e3:.4g} ({min(xs) * 1e3:.4g}-{max(xs) * 1e3:.4g})"

    head = ["scheme", "predicted (ms)", "measured (ms)", "predicted / measured", "per round"]
    body = []
    for label, r in result.items():
        pairs = [p / m for p, m in zip(r["predicted"], r["measured"], strict=True)]
        r["ratio"] = float(np.median(r["predicted"]) / np.median(r["measured"]))
        r["paired"] = pairs
        body.append([label, spread(r["predicted"]), spread(r["measured"]), r["ratio"],
                     ", ".join(f"{x:.2f}" for x in pairs)])
    text = ("# Capture on MPI (sync, natural timing), replay in the simulator\n\n"
            f"n = {n} workers, workload {json.dumps(workload)}, {iterations} iterations per run, {repeats} rounds "
            "(each: capture sync, export, replay every scheme; run every scheme on MPI); median (min-max) over the "
            f"rounds. Captured sync: {spread(captures)} ms; trace {rows} rows"
            f"{f', {len(skipped)} iterations skipped' if skipped else ''}; DropCompute tau = {tau * 1e3:.3g} ms "
            f"({TAU_FACTOR} x the first capture's median compute). Took {time.perf_counter() - began:.0f} s.\n\n"
            + table(head, body))
    write_report(out, NAME, text)
    (out / f"{NAME}.json").write_text(json.dumps({"n": n, "iterations": iterations, "repeats": repeats,
                                                  "tau": tau, "captures": captures, "schemes": result}, indent=2))
    return result


def _args(argv):
    """``--out``, ``--quick`` (4 workers, 6 iterations, one MPI run each, a small mlp) as every example, and
    ``--repeats`` (MPI runs per scheme), ``--iterations``."""
    import argparse

    parser = argparse.ArgumentParser(prog=f"examples/{NAME}.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=f"results/examples/{NAME}", help="output folder (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="the reduced version (seconds instead of minutes)")
    parser.add_argument("--repeats", type=int, help="MPI runs per scheme (default 3; --quick 1)")
    parser.add_argument("--iterations", type=int, help="iterations per run (default 30; --quick 6)")
    return parser.parse_args(argv)


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label)


if __name__ == "__main__":
    main()
