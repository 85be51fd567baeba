"""Clusters: the one driver and the simulated cluster (``mpi_runtime`` is the other cluster, beside this package).

- :mod:`.driver`: everything a cluster does that is not how time passes or how a message moves: the stop policy,
  the master's arithmetic of an iteration (gather and stream), the training loop around a scheme (:class:`Driver`);
- :mod:`.records`: one iteration's record, the compact per-worker fields, the record writer and the run summary;
- :mod:`.footprint`: the memory a run will need, checked before it starts;
- :mod:`.sim`: the virtual clock (:func:`simulate`), a small subclass of the driver's loop.

The names below are re-exported so that ``from gradcode.clusters import summarize`` reads as the layer's API.
"""

from .driver import (
    Arrivals,
    Driver,
    SimulationError,
    StopPolicy,
    Stream,
    all_reduce_schedule,
    chunk_ends,
    default_lr,
    evaluates_loss,
    master_iteration,
    relative_error,
    run_finished,
    stream_iteration,
    took_up,
    work_done,
)
from .records import (
    HELDOUT_KEYS,
    PER_WORKER_LIMIT,
    WORKER_TIME_KEYS,
    WORKER_TIMES_MAX_N,
    RecordWriter,
    build_record,
    compact_load,
    compact_responders,
    complete_record,
    jsonable,
    overhead_ratios,
    per_worker,
    record_load,
    record_responders,
    record_worker_times,
    summarize,
    work_fields,
    worker_times,
    worker_values,
    write_summary,
)

__all__ = [
    "Arrivals",
    "Driver",
    "HELDOUT_KEYS",
    "PER_WORKER_LIMIT",
    "RecordWriter",
    "SimulationError",
    "StopPolicy",
    "Stream",
    "WORKER_TIMES_MAX_N",
    "WORKER_TIME_KEYS",
    "all_reduce_schedule",
    "build_record",
    "chunk_ends",
    "compact_load",
    "compact_responders",
    "complete_record",
    "default_lr",
    "evaluates_loss",
    "jsonable",
    "master_iteration",
    "overhead_ratios",
    "per_worker",
    "record_load",
    "record_responders",
    "record_worker_times",
    "relative_error",
    "run_finished",
    "stream_iteration",
    "summarize",
    "took_up",
    "work_done",
    "work_fields",
    "worker_times",
    "worker_values",
    "write_summary",
]
