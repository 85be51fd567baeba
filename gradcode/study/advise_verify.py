"""``gradcode advise --verify``: run the top choices on MPI and say whether the simulator's prediction held.

Each of the first :data:`TOP` tuned settings runs once on the MPI cluster (``gradcode run``'s launcher, a hostfile
if given) on the first seed, the same delay draws the simulator used, stopped at the same target. The prediction
held for a setting if its measured time to target ``T_mpi`` is within :data:`TOLERANCE` of the simulated one,
``|T_mpi / T_sim - 1| <= tolerance`` (the MPI clock also counts the runtime's own overhead), and the ranking held if
the settings reach the target on MPI in the predicted order.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from ..errors import ConfigError
from ..spec import Spec

TOP = 2
TOLERANCE = 0.25
MPI_TIMEOUT = 300.0     # seconds one MPI run may take


@dataclass
class Check:
    """One setting on MPI: the simulated and the measured time to target (None: not reached), and the verdict."""

    label: str
    predicted: float | None
    measured: float | None
    folder: Path
    error: str | None = None
    overhead: float | None = None     # the MPI run's measured over ideal time (its runtime's own cost)
    ideal: float | None = None        # its time to target on the ideal clock (no runtime overhead)

    @property
    def held(self) -> bool:
        if self.error or self.predicted is None or self.measured is None:
            return self.error is None and self.predicted is None and self.measured is None
        return abs(self.measured / self.predicted - 1) <= TOLERANCE


def single_spec(spec: Spec, table: dict[str, Any], seed: int, target: float) -> dict[str, Any]:
    """The one-run MPI spec of ``table`` on ``seed``, stopped at ``target``."""
    run = {k: v for k, v in spec.run.items() if k not in ("seed", "seeds")}
    out = {"experiment": {"name": f"advise --verify: {table['name']} seed {seed}"},
           "cluster": {**spec.cluster, "kind": "mpi"}, "delay": dict(spec.delay), "scheme": dict(table),
           "run": {**run, "seed": seed, "target_loss": target}}
    if spec.workload is not None:
        out["workload"] = dict(spec.workload)
    return out


def check_verify(spec: Spec, hostfile: str | None) -> None:
    """Before any work: MPI is there, the hostfile is readable and the spec satisfies the MPI cluster's rules."""
    from mpi_runtime.config import load_run
    from mpi_runtime.launch import check_hostfile

    from .harness import mpi_status

    available, reason = mpi_status()
    if not available:
        raise ConfigError(f"--verify runs on MPI: {reason}")
    check_hostfile(hostfile)
    try:
        load_run(single_spec(spec, spec.schemes[0], 0, 1.0))
    except ConfigError as err:
        raise ConfigError(f"--verify: the MPI run of this spec: {err}") from None


def verify(advice, spec: Spec, out: Path, hostfile: str | None = None, top: int = TOP) -> list[Check]:
    """Run the first ``top`` tuned settings of ``advice`` on MPI into ``out/<rank>_<family>/``."""
    from mpi_runtime.launch import launch

    from ..output.advice import short

    seed = advice.seeds[0]
    checks = []
    for rank, trial in enumerate(advice.ranking[:top], 1):
        folder = out / f"{rank}_{trial.candidate.family}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "spec.toml").write_text(tomli_w.dumps(single_spec(spec, trial.candidate.table, seed,
                                                                    advice.target)))
        predicted = float(trial.times[0]) if math.isfinite(trial.times[0]) else None
        code = launch(folder / "spec.toml", folder, hostfile=hostfile, timeout=MPI_TIMEOUT, echo=lambda *_: None)
        summary = _summary(folder)
        error = summary.get("error") or (None if code == 0 else f"exit status {code}")
        checks.append(Check(short(trial), predicted, summary.get("time_to_target"), folder, error,
                            summary.get("overhead_ratio"), ideal_time_to_target(folder, advice.target)))
    return checks


def ideal_time_to_target(folder: Path, target: float) -> float | None:
    """The MPI run's time to ``target`` on its ideal clock: ``sum_t (ideal_end_t - start_t)`` up to the first
    record whose loss reaches it (what the iterations would have taken with no runtime overhead)."""
    from ..output.report import read_records

    try:
        records, _ = read_records(folder / "records.jsonl")
    except (OSError, ValueError):
        return None
    total = 0.0
    for rec in records:
        total += rec["ideal_end"] - rec["start"]
        if rec.get("loss") is not None and rec["loss"] <= target:
            return total
    return None


def _summary(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return {"error": f"no summary.json in {folder}"}


def _overhead(c: Check) -> str:
    """Why a prediction may miss: the MPI runtime's own time per iteration, against the emulated delays."""
    if c.overhead is None or c.overhead <= 1 + TOLERANCE:
        return ""
    ideal = "" if c.ideal is None else f", {c.ideal:.4g} on its ideal clock" + (
        f" ({c.ideal / c.predicted:.2f}x the prediction)" if c.predicted else "")
    return (f"; the MPI iterations took {c.overhead:.2f}x their ideal time{ideal} (the runtime's own cost against "
            "the emulated delays: a larger [run] time_scale makes it smaller)")


def verdict(checks: list[Check]) -> list[str]:
    """In words: each setting's predicted and measured time, whether it held, and whether the order held."""
    from ..output.numfmt import fmt_value

    lines = []
    for c in checks:
        if c.error:
            lines.append(f"{c.label}: the MPI run failed ({c.error}); see {c.folder}")
            continue
        ratio = "" if not (c.predicted and c.measured) else f", {fmt_value(c.measured / c.predicted)}x"
        lines.append(f"{c.label}: predicted {fmt_value(c.predicted)}, measured on MPI {fmt_value(c.measured)}{ratio}: "
                     + ("held" if c.held else "did not hold") + f" (tolerance {TOLERANCE:.0%})"
                     + _overhead(c))
    measured = [c.measured for c in checks]
    if len(checks) > 1 and all(m is not None for m in measured):
        held = measured == sorted(measured)
        lines.append("the ranking held on MPI" if held else "the ranking did not hold on MPI: the order changed")
    return lines
