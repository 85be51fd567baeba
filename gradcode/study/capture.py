"""Trace capture: a run's measured per-worker times as a straggler trace that the ``trace`` delay model replays.

``gradcode trace export RUN_DIR --out trace.csv`` reads the records of a ``gradcode run`` (MPI) or ``gradcode
simulate`` folder (or one run of a ``gradcode compare`` folder, ``--run NAME``) and writes one line per iteration
and worker in the shipped traces' format plus a communication column::

    step,dp_rank,stage,microbatch,compute_s,comm_s

with ``step`` the iteration, ``dp_rank`` the worker, ``stage = microbatch = 0``. From the per-worker times of a
record (relative to its ``start``, in the record's time unit; ``docs/design.md#records``):

- ``compute_s = (worker_sent - worker_plan_received) / load``: the worker's time on the plan, from taking it up
  to sending its result (the real compute and encoding, plus any injected delay in either ``[run] inject`` mode;
  in the simulator, the model's compute draw), **per unit of load**. The ``trace`` model replays ``sample(load) =
  load * compute_s``, so a replay under a scheme with another load (a code with ``s + 1`` partitions per worker)
  scales the captured speed, as a real worker would. (Timestamps, not ``worker_compute``: it is the time that
  delayed the result, whatever filled it.)
- ``comm_s = (worker_arrived - worker_sent) + (worker_plan_received - begin)``: the load-independent rest of the
  response, the result's transfer plus the plan's transit (polling included). ``begin`` is when the worker could
  take the plan up: the iteration's start, or, if its previous result arrived after that start (it was still
  busy, the simulator's ``late_workers = "finish"``), when it received this plan. So ``begin + load * compute_s +
  comm_s`` is the measured arrival, which is what the simulator computes (``arrival = begin + compute + comm``).
  The simpler ``worker_arrived - worker_sent`` alone would drop the plan's transit, which every scheme pays.

Only iterations in which every worker took part (all five fields present, load > 0) are written, so the trace is
a complete grid: capture under ``sync``, where every worker answers every iteration. Replay it with
``[delay] name = "trace", trace = "trace.csv", normalize = false, offset = 0`` to get the captured run back step for
step (``offset = 0``: iteration ``t`` reads step ``t``; ``normalize = false``: times in the record's unit).

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> rec = {"iteration": 0, "start": 0.0, "end": 1.5, "load": 2.0, "worker_plan_received": [0.25, 0.0],
...        "worker_compute": [1.0, 0.5], "worker_sent": [1.25, 0.5], "worker_arrived": [1.5, 0.75],
...        "worker_delay": [None, None]}
>>> trace_rows([rec])     # (step, worker, compute per unit of load, communication)
([(0, 0, 0.5, 0.5), (0, 1, 0.25, 0.25)], [])
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import ConfigError
from ..output.report import read_records
from ..plumbing.outdir import write_whole

FIELDS = ("worker_plan_received", "worker_compute", "worker_sent", "worker_arrived", "worker_delay")
HEADER = "step,dp_rank,stage,microbatch,compute_s,comm_s"
_WHO_WRITES = ("every record of a current gradcode holds them, in the simulator and on MPI; rerun the experiment "
               "with this version")
_SLACK = 1e-9   # relative: a communication time this far below zero is float rounding, taken as 0


def run_folder(run_dir: str | Path, run: str | None = None) -> Path:
    """The folder holding ``records.jsonl``: ``run_dir`` itself, or ``run_dir/runs/<run>`` of a compare folder."""
    root = Path(run_dir)
    if not root.is_dir():
        raise ConfigError(f"{str(root)!r} is not a folder: give the --out folder of `gradcode run` or "
                          "`gradcode simulate` (or a `gradcode compare` folder with --run NAME)")
    runs = sorted(p.name for p in (root / "runs").iterdir() if (p / "records.jsonl").is_file()) \
        if (root / "runs").is_dir() else []
    if run is not None:
        if run not in runs:
            raise ConfigError(f"--run {run!r}: {str(root)!r} has no such run; its runs: {', '.join(runs) or 'none'}")
        return root / "runs" / run
    if (root / "records.jsonl").is_file():
        return root
    if runs:
        raise ConfigError(f"{str(root)!r} is a compare folder: name one of its runs with --run ({', '.join(runs)})")
    raise ConfigError(f"{str(root)!r} has no records.jsonl: give the --out folder of `gradcode run` or `gradcode "
                      "simulate` (or a `gradcode compare` folder with --run NAME)")


def _num(x) -> float | None:
    return None if x is None else float(x)


def trace_rows(records: list[dict]) -> tuple[list[tuple[int, int, float, float]], list[int]]:
    """``(rows, skipped)``: ``(step, worker, compute_s, comm_s)`` of every iteration in which every worker took
    part, and the iterations left out (some worker without times, or with load 0). Only ``worker_plan_received``,
    ``worker_sent``, ``worker_arrived`` and the load are read; the other two fields must be there (they say the
    records are of a version that writes these times)."""
    rows: list[tuple[int, int, float, float]] = []
    skipped: list[int] = []
    last_arrival: dict[int, float] = {}    # absolute time each worker's last result arrived (was it busy?)
    for rec in records:
        missing = [f for f in FIELDS if f not in rec]
        if missing:
            raise ConfigError(f"record of iteration {rec.get('iteration')} has no {', '.join(missing)}: "
                              f"trace export needs the per-worker fields {', '.join(FIELDS)}; {_WHO_WRITES}")
        n = len(rec["worker_arrived"])
        load = rec["load"] if isinstance(rec["load"], list) else [rec["load"]] * n
        start, mine, ok = float(rec["start"]), [], True
        for i in range(n):
            got, sent, arr = (_num(rec[f][i]) for f in ("worker_plan_received", "worker_sent", "worker_arrived"))
            if None in (got, sent, arr) or not float(load[i]) > 0:
                ok = False
                continue
            begin = got if last_arrival.get(i, -math.inf) > start else 0.0
            last_arrival[i] = start + arr
            work, comm = sent - got, (arr - sent) + (got - begin)
            if min(work, comm) < -_SLACK * max(1.0, abs(arr)):
                raise ConfigError(f"iteration {rec['iteration']}, worker {i}: plan received {got!r}, sent {sent!r}, "
                                  f"arrived {arr!r} are out of order: these records' times are inconsistent")
            mine.append((int(rec["iteration"]), i, max(work, 0.0) / float(load[i]), max(comm, 0.0)))
        if ok and mine:
            rows.extend(mine)
        else:
            skipped.append(int(rec["iteration"]))
    return rows, skipped


def export_trace(run_dir: str | Path, out: str | Path, run: str | None = None) -> tuple[Path, int, list[int]]:
    """Write the trace of ``run_dir``'s records to ``out``; returns ``(out, rows written, iterations skipped)``."""
    folder = run_folder(run_dir, run)
    out = Path(out)
    if out.is_dir() or not out.parent.is_dir():
        raise ConfigError(f"--out {str(out)!r} must be a file name in an existing folder (e.g. trace.csv)")
    records, _ = read_records(folder / "records.jsonl")
    if not records:
        raise ConfigError(f"{str(folder / 'records.jsonl')!r} holds no records")
    rows, skipped = trace_rows(records)
    if not rows:
        raise ConfigError(f"no iteration of {str(folder)!r} has every worker's times (load > 0 and all of "
                          f"{', '.join(FIELDS[:4])}): capture under sync, where every worker answers")
    if any(c <= 0 for _, _, c, _ in rows):
        raise ConfigError(f"{str(folder)!r}: some worker sent at the moment it got the plan (time 0 on the plan); "
                          "a trace needs compute_s > 0")
    lines = [HEADER] + [f"{t},{i},0,0,{c!r},{m!r}" for t, i, c, m in rows]
    write_whole(out, "\n".join(lines) + "\n")     # never a half-written trace under the final name
    return out, len(rows), skipped
