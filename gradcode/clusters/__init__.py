"""Clusters: the one driver and the simulated cluster (``mpi_runtime`` is the other cluster, beside this package).

- :mod:`.driver`: everything a cluster does that is not how time passes or how a message moves: the stop policy,
  the record of an iteration, the training loop around a scheme (:class:`Driver`);
- :mod:`.iteration`: one master iteration on the virtual clock (the one message model: chunks and messages);
- :mod:`.records`: one iteration's record, the compact per-worker fields, the record writer and the run summary;
- :mod:`.footprint`: the memory a run will need, checked before it starts;
- :mod:`.sim`: the virtual clock (:func:`simulate`), a small subclass of the driver's loop.

The names below are re-exported so that ``from gradcode.clusters import summarize`` reads as the layer's API.
"""

from .driver import (
    Driver,
    SimulationError,
    StopPolicy,
    all_reduce_schedule,
    default_lr,
    evaluates_loss,
    gather_record,
    relative_error,
    run_finished,
)
from .iteration import Iteration, chunk_ends, iteration
from .records import (
    HELDOUT_KEYS,
    PER_WORKER_LIMIT,
    WORKER_TIME_KEYS,
    WORKER_TIMES_MAX_N,
    RecordWriter,
    as_written,
    build_record,
    compact_responders,
    complete_record,
    jsonable,
    overhead_ratios,
    per_worker,
    record_load,
    record_responders,
    record_spans,
    record_worker_times,
    spans,
    summarize,
    work_fields,
    worker_times,
    worker_values,
    write_summary,
)

__all__ = [
    "Driver",
    "Iteration",
    "HELDOUT_KEYS",
    "PER_WORKER_LIMIT",
    "RecordWriter",
    "SimulationError",
    "StopPolicy",
    "WORKER_TIMES_MAX_N",
    "WORKER_TIME_KEYS",
    "all_reduce_schedule",
    "as_written",
    "build_record",
    "chunk_ends",
    "compact_responders",
    "complete_record",
    "default_lr",
    "evaluates_loss",
    "gather_record",
    "iteration",
    "jsonable",
    "overhead_ratios",
    "per_worker",
    "record_load",
    "record_responders",
    "record_spans",
    "record_worker_times",
    "relative_error",
    "run_finished",
    "spans",
    "summarize",
    "work_fields",
    "worker_times",
    "worker_values",
    "write_summary",
]
