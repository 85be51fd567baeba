"""Everything a rank needs from the spec, validated before launch (this module never imports mpi4py).

:func:`load_run` reads the spec with :func:`gradcode.spec.load_spec`, which validates every table and the run options
(MPI's own among them: ``time_scale``, ``grace``, ``startup_timeout``, ``inject``), and adds the checks only the MPI
cluster needs: a workload (MPI ranks exchange real gradients) and one seed. ``gradcode run`` calls it before
launching ``mpiexec``, and every rank calls it again inside the job: construction is deterministic, so every rank
builds the same scheme, delay model and workload. The workload that validation built is kept for
:meth:`RunConfig.build` (a large one takes seconds to build: each rank builds it once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradcode.errors import ConfigError
from gradcode.spec import RunOptions, Spec, build, load_spec_built

STARTED = "mpi_runtime: every rank has started"   # rank 0 prints it: the launcher stops waiting for start-up
FINISHED = "mpi_runtime: rank 0 wrote its summary"  # ... and this: the job must end soon (launch.py: END_BOUND)


@dataclass
class RunConfig:
    """A validated MPI run: the spec (its run options, :attr:`options`, checked when it was loaded) and the chosen
    scheme's index."""

    spec: Spec
    scheme_index: int
    # the workload load_run's validation built, not used yet: the first build() takes it, later ones build anew
    prebuilt_workload: Any = field(default=None, repr=False, compare=False)

    @property
    def workers(self) -> int:
        return self.spec.workers

    @property
    def options(self) -> RunOptions:
        """The run options, as the simulator gets them (``time_scale``, ``grace``, ``inject``... are MPI's own)."""
        return self.spec.options

    def summary_fields(self, unresponsive: list[int], error: str | None) -> dict[str, Any]:
        """What every MPI run adds to its summary: the cluster, the time unit, workers aborted, the error if any."""
        fields: dict[str, Any] = {
            "cluster": "mpi", "time_scale": self.options.time_scale,
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
    """Load and validate a spec for an MPI run (``overrides``: ``--iterations``, ``--seed``); raises
    :class:`ConfigError` naming the key on bad input."""
    spec, workload = load_spec_built(source, overrides)
    if not 0 <= scheme_index < len(spec.schemes):
        raise ConfigError(f"--scheme {scheme_index}: the spec has {len(spec.schemes)} scheme(s), "
                          f"0..{len(spec.schemes) - 1}")
    if spec.workload is None:
        raise ConfigError("MPI runs need a [workload] table: the ranks exchange real gradients")
    if "seeds" in spec.run:
        raise ConfigError(f"[run] seeds = {spec.run['seeds']!r}: an MPI run takes one seed; give --seed (one of "
                          "them), or run them all with `gradcode compare --cluster mpi`")
    return RunConfig(spec=spec, scheme_index=scheme_index, prebuilt_workload=workload)
