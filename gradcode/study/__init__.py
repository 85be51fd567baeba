"""Study: experiments built from runs. The top of the library, below only the command line.

:mod:`.harness` (``gradcode compare``: an experiment spec, every scheme x delay x seed x cluster, results folder
and report), :mod:`.sweep` and :mod:`.sweep_run` (a grid of experiments, run on any executor, with its regime
map), :mod:`.capture` (a run's records as a replayable trace) and :mod:`.demo` (the codes' quick-start table).
"""
