"""Everything a rank needs from the spec, validated before launch (this module never imports mpi4py).

:func:`load_run` reads the spec with :func:`gradcode.spec.load_spec` (which validates every table) and adds the
checks only the MPI cluster needs: a workload (MPI ranks exchange real gradients), ``late_workers`` (``finish``,
``abandon``: workers drop a stale plan at once or between chunks, or ``between_chunks``: only between chunks,
:mod:`mpi_runtime.worker`), ``[run] time_scale`` (wall-clock
seconds per model time unit), ``[run] grace`` (seconds any wait may last without an answer before the job fails
naming the rank it waits for) and ``[run] startup_timeout`` (seconds the ranks may take to start: imports, loading
and building on every rank, then each step of the set-up until the run clock starts). ``gradcode run`` calls it
before launching ``mpiexec``, and every rank calls it again inside the job: construction is deterministic, so every
rank builds the same scheme, delay model and workload. The workload that validation built is kept for
:meth:`RunConfig.build` (a large one takes seconds to build: each rank builds it once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradcode.clusters.driver import LATE_WORKERS
from gradcode.errors import ConfigError, check_float, check_int
from gradcode.spec import Spec, build, check_run, load_spec_built, run_kwargs, training_kwargs

DEFAULT_TIME_SCALE = 0.01   # seconds per model time unit
DEFAULT_GRACE = 10.0        # seconds
STARTED = "mpi_runtime: every rank has started"   # rank 0 prints it: the launcher stops waiting for start-up
DEFAULT_STARTUP = 60.0      # seconds: imports and building on every rank, on a loaded machine


@dataclass
class RunConfig:
    """A validated MPI run: the spec, the chosen scheme's index and the run parameters."""

    spec: Spec
    scheme_index: int
    iterations: int
    seed: int
    lr: float | None
    loss_every: int
    target_loss: float | None
    time_budget: float | None
    time_scale: float
    grace: float
    startup_timeout: float = DEFAULT_STARTUP
    late_workers: str = "finish"
    inject: str = "wait"        # [run] inject: "wait" (from the iteration's start) or "add" (after the real compute)
    training: dict[str, Any] = field(default_factory=dict)   # optimizer, momentum, eval_every, target_accuracy
    # the workload load_run's validation built, not used yet: the first build() takes it, later ones build anew
    prebuilt_workload: Any = field(default=None, repr=False, compare=False)

    @property
    def workers(self) -> int:
        return self.spec.workers

    def run_kwargs(self) -> dict[str, Any]:
        """The loop's parameters for :class:`gradcode.clusters.driver.Driver` (the simulator's, the same rules)."""
        return {"iterations": self.iterations, "lr": self.lr, "loss_every": self.loss_every,
                "target_loss": self.target_loss, "time_budget": self.time_budget, **self.training}

    def summary_fields(self, unresponsive: list[int], error: str | None) -> dict[str, Any]:
        """What every MPI run adds to its summary: the cluster, the time unit, workers aborted, the error if any."""
        fields: dict[str, Any] = {
            "cluster": "mpi", "time_scale": self.time_scale,
            "time_unit": "model time units (wall seconds / time_scale)",
            "unresponsive_workers": unresponsive, "unresponsive_ranks": [i + 1 for i in unresponsive]}
        if error is not None:
            fields["error"] = error
        return fields

    def build(self):
        """``(scheme, delay, workload)``, freshly built (every rank does this; it is deterministic). The first call
        returns the workload that validating the spec built (unused until then), so a rank builds it once."""
        prebuilt, self.prebuilt_workload = self.prebuilt_workload, None   # handed out once: no run shares it
        schemes, delay, workload = build(self.spec, scheme_index=self.scheme_index, workload=prebuilt)
        scheme = schemes[0]
        scheme.bind(delay=delay)
        scheme.reset()
        return scheme, delay, workload


def load_run(source: str | Path | dict, *, scheme_index: int = 0, overrides: dict[str, Any] | None = None
             ) -> RunConfig:
    """Load and validate a spec for an MPI run; raises :class:`ConfigError` naming the key on bad input."""
    spec, workload = load_spec_built(source)
    spec.run.update(overrides or {})     # [run] keys from the command line (iterations, seed)
    if overrides:
        check_run(spec.run)   # re-check what the overrides changed
    if not 0 <= scheme_index < len(spec.schemes):
        raise ConfigError(f"--scheme {scheme_index}: the spec has {len(spec.schemes)} scheme(s), "
                          f"0..{len(spec.schemes) - 1}")
    if spec.workload is None:
        raise ConfigError("MPI runs need a [workload] table: the ranks exchange real gradients")
    kwargs = run_kwargs(spec)
    late = kwargs.get("late_workers", "finish")
    if late not in LATE_WORKERS:
        raise ConfigError(f"[cluster] late_workers = {late!r}: accepted: {', '.join(LATE_WORKERS)}")
    if "seeds" in spec.run:
        raise ConfigError("[run] seeds: an MPI run takes one seed; use [run] seed")
    time_scale = check_float("[run] time_scale", spec.run.get("time_scale", DEFAULT_TIME_SCALE), low=0.0,
                             low_open=True)
    grace = check_float("[run] grace", spec.run.get("grace", DEFAULT_GRACE), low=0.0, low_open=True)
    startup = check_float("[run] startup_timeout", spec.run.get("startup_timeout", DEFAULT_STARTUP), low=0.0,
                          low_open=True)
    lr = kwargs.get("lr")
    return RunConfig(
        spec=spec, scheme_index=scheme_index,
        iterations=kwargs.get("iterations", 100), seed=kwargs.get("seed", 0),   # checked by load_spec / check_run
        lr=None if lr is None else check_float("[run] lr", lr, low=0.0),
        loss_every=check_int("[run] loss_every", kwargs.get("loss_every", 1), low=1),
        target_loss=kwargs.get("target_loss"),
        time_budget=kwargs.get("time_budget"),
        time_scale=time_scale, grace=grace, startup_timeout=startup, late_workers=late,
        inject=spec.run.get("inject", "wait"),   # checked by load_spec / check_run
        training=training_kwargs(spec),
        prebuilt_workload=workload,
    )
