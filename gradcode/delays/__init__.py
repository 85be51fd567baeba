"""Response-time models of the workers: ``T_i = P_i(load) + C_i``.

A worker's response time is a computation part ``P_i`` that grows with its load (units of work: partitions,
samples or micro-batches) plus a communication part ``C_i`` that does not. Every model draws the *unit* compute
time ``U_{t,i}`` of worker ``i`` at iteration ``t`` and a load ``l`` takes ``P = l * U`` (the same draw: a load
scaling never redraws). Communication is ``comm`` (its mean) with any load-independent shape ``comm_dist``
(:mod:`._comm`); ``straggle`` adds a load-independent time to some workers and ``heterogeneous`` gives workers
different speeds (:mod:`.added`).

The draws are common random numbers: worker ``i``'s time at iteration ``t`` depends only on ``(seed, t, i,
load)``, whatever the scheme and the other workers (:mod:`._crn`). ``cdf``, ``mean`` and
``expected_order_statistic`` describe one worker as if workers were i.i.d. (:mod:`.order_stats`). Modules:
:mod:`._base` (the shared algorithm), :mod:`.parametric`, :mod:`.wrappers` (persistent, mixture, unresponsive),
:mod:`.trace`. See ``docs/references.md#delay-models`` and ``docs/references.md#order-statistics``.

Use :func:`make_delay` (a name, a ``{"name": ..., **params}`` dict as read from TOML, or a model) and
:func:`list_delays`.

>>> from gradcode.delays import make_delay
>>> import numpy as np
>>> d = make_delay("shifted_exponential", a=1.0, mu=2.0)
>>> compute, comm = d.sample(seed=0, t=np.arange(3), n=4)
>>> compute.shape, bool((compute >= 1.0).all())
((3, 4), True)
>>> round(d.expected_order_statistic(1, 1), 6)   # E[a + X/mu] = 1.5
1.5
"""

from __future__ import annotations

from ..plumbing.registry import DELAYS
from ._base import DelayModel
from .added import HeterogeneousDelay, StraggleDelay
from .parametric import (
    BimodalDelay,
    ConstantDelay,
    DropComputeLognormalDelay,
    ExponentialDelay,
    LognormalDelay,
    NoDelay,
    ParetoDelay,
    PlainLognormalDelay,
    ShiftedExponentialDelay,
)
from .trace import TraceDelay, shipped_traces
from .wrappers import MixtureDelay, PersistentDelay, SlowdownDelay, UnresponsiveDelay, Wrapper


def list_delays() -> dict[str, str]:
    """Names of the delay models with a one-line description of each."""
    return DELAYS.list()


def make_delay(name, **params) -> DelayModel:
    """Build a delay model from a name (or import path) and parameters, a ``{"name": ..., **params}`` dict, or
    return a built model as is.

    Nested parameters (``base``, a mixture component's ``model``) accept the same three forms.

    >>> from gradcode.delays import make_delay
    >>> make_delay({"name": "persistent", "base": {"name": "exponential", "mu": 2.0}, "frac": 0.2}).name
    'persistent'
    """
    return DELAYS.build(name, **params)


__all__ = [
    "BimodalDelay",
    "ConstantDelay",
    "DropComputeLognormalDelay",
    "DelayModel",
    "ExponentialDelay",
    "HeterogeneousDelay",
    "LognormalDelay",
    "MixtureDelay",
    "NoDelay",
    "ParetoDelay",
    "PersistentDelay",
    "PlainLognormalDelay",
    "SlowdownDelay",
    "ShiftedExponentialDelay",
    "StraggleDelay",
    "TraceDelay",
    "UnresponsiveDelay",
    "Wrapper",
    "list_delays",
    "make_delay",
    "shipped_traces",
]
