"""DropCompute for your own PyTorch training: a helper for an ordinary ``torch.distributed`` loop (gloo on CPU).

The scheme ``dropcompute`` (:mod:`gradcode.schemes.dropcompute`, Giladi et al., NeurIPS 2023) as a few lines in a
user's loop: each worker accumulates micro-batch gradients until its local timer passes ``tau``, then one
All-Reduce sums the gradients and the count of micro-batches computed, and every worker steps with the average.
``tau`` is fixed, or ``"auto"``: after ``warmup`` steps every worker records its micro-batch times for
``record_steps`` steps (computing them all), the times are gathered, and every rank picks the same threshold with
the scheme's own rule (:func:`~gradcode.schemes.dropcompute.choose_tau`, replaying the recorded times through the
timer checks).

The timer is looked at before each micro-batch and, with ``check = "official"`` (the official code's rule), again
between the forward and the backward pass: a micro-batch whose forward ends past ``tau`` is dropped unfinished.

    from gradcode.workloads.torch_dropcompute import DropCompute, init_process_group

    init_process_group()                      # gloo; rank and size from torchrun's or mpiexec's environment
    dc = DropCompute(model, tau="auto")
    for step in range(steps):
        opt.zero_grad()
        info = dc.step(micro_batches(step), lambda mb: loss_fn(model(mb[0]), mb[1]))
        opt.step()                            # .grad holds the All-Reduced average

It lives beside the torch workloads because nothing above the workload layer imports torch (docs/design.md); like
them it imports torch only when used.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..errors import ConfigError, check_float, check_int
from .torch import _require_torch

_CHECKS = ("official", "before_microbatch")


def init_process_group(backend: str = "gloo") -> None:
    """``torch.distributed.init_process_group`` from ``torchrun``'s environment (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``) or ``mpiexec``'s (MPICH's ``PMI_RANK``/``PMI_SIZE``, Open MPI's
    ``OMPI_COMM_WORLD_*``), the address defaulting to this host and port 29500."""
    torch = _require_torch("dropcompute")
    env = os.environ
    for ours, theirs in (("RANK", ("PMI_RANK", "OMPI_COMM_WORLD_RANK")),
                         ("WORLD_SIZE", ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"))):
        if ours not in env:
            found = next((env[k] for k in theirs if k in env), None)
            if found is None:
                raise ConfigError(f"init_process_group: no {ours} in the environment; launch with torchrun or "
                                  "mpiexec (or set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
            env[ours] = found
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", "29500")
    torch.distributed.init_process_group(backend, init_method="env://")


class DropCompute:
    """Accumulate micro-batch gradients of ``model`` until the local limit ``tau``, then All-Reduce (see the module
    docstring). ``tau``: seconds, ``"auto"`` or None (no limit: synchronous training with gradient accumulation).
    ``normalize``: ``"computed"`` divides the sum by the micro-batches computed over all workers (the count is
    All-Reduced with it), ``"total"`` by every worker's number of micro-batches (dropped ones count as zeros)."""

    def __init__(self, model, *, tau="auto", check: str = "official", normalize: str = "computed",
                 warmup: int = 5, record_steps: int = 10, candidates: int = 200, group=None):
        self.torch = _require_torch("dropcompute")
        if tau is not None and tau != "auto":
            tau = check_float("tau", tau, low=0.0, low_open=True)
        if check not in _CHECKS:
            raise ConfigError(f"dropcompute: check must be one of {', '.join(_CHECKS)}, got {check!r}")
        if normalize not in ("computed", "total"):
            raise ConfigError(f"dropcompute: normalize must be 'computed' or 'total', got {normalize!r}")
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.auto = tau == "auto"
        self.tau = float("inf") if tau is None or self.auto else tau
        self.check, self.normalize, self.group = check, normalize, group
        self.warmup = check_int("warmup", warmup, low=0)
        self.record_steps = check_int("record_steps", record_steps, low=1)
        self.candidates = check_int("candidates", candidates, low=2)
        self.t = 0
        self._recorded: list[tuple[list[float], float]] = []     # (micro-batch times, All-Reduce seconds) a step
        self._forward_share: list[float] = []

    def _limit(self) -> float:
        return float("inf") if self.t < self.warmup or (self.auto and self._recording_or_before()) else self.tau

    def _recording_or_before(self) -> bool:
        return self.t < self.warmup + self.record_steps

    def step(self, micro_batches, forward) -> dict:
        """Run ``forward(mb)`` (returning the micro-batch's mean loss) and its backward for each micro-batch of
        ``micro_batches`` (a sequence: the same number on every worker) until the limit, leave the All-Reduced
        average gradient in each parameter's ``.grad``, and return what happened: ``computed`` (this worker),
        ``total_computed`` (all), ``tau``, ``compute_s``, ``allreduce_s``."""
        torch, dist = self.torch, self.torch.distributed
        limit, begin = self._limit(), time.perf_counter()
        for p in self.params:
            p.grad = None
        micro_batches = list(micro_batches)
        times, count = [], 0
        for mb in micro_batches:
            start = time.perf_counter()
            if start - begin >= limit:
                break
            loss = forward(mb)
            mid = time.perf_counter()
            if self.check == "official" and mid - begin >= limit:
                break                        # forward done past tau: dropped, as the official code does
            loss.backward()
            end = time.perf_counter()
            times.append(end - start)
            self._forward_share.append((mid - start) / max(end - start, 1e-12))
            count += 1
        compute = time.perf_counter() - begin
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.params]
                         + [torch.tensor([float(count)], dtype=self.params[0].dtype)])
        reduce_begin = time.perf_counter()
        dist.all_reduce(flat, group=self.group)          # the sum of the gradients and of the counts, in one call
        reduce_s = time.perf_counter() - reduce_begin
        total = float(flat[-1])
        denom = total if self.normalize == "computed" else float(len(micro_batches) * dist.get_world_size(self.group))
        at = 0
        for p in self.params:
            piece = flat[at:at + p.numel()].view_as(p)
            p.grad = piece / max(denom, 1.0)
            at += p.numel()
        if self.auto and self.warmup <= self.t < self.warmup + self.record_steps:
            self._recorded.append((times, reduce_s))
            if self.t == self.warmup + self.record_steps - 1:
                self.tau = self._choose_tau()
        info = {"step": self.t, "computed": count, "total_computed": int(total), "tau": limit,
                "compute_s": compute, "allreduce_s": reduce_s}
        self.t += 1
        return info

    def _choose_tau(self) -> float:
        """Every rank's recorded micro-batch times gathered, the scheme's throughput-maximising ``tau`` (the same
        arithmetic on the same numbers on every rank, so the same ``tau``)."""
        from ..schemes.dropcompute import choose_tau

        torch, dist = self.torch, self.torch.distributed
        M = torch.tensor([min(len(times) for times, _ in self._recorded)])
        dist.all_reduce(M, op=dist.ReduceOp.MIN, group=self.group)      # the same shape on every rank
        M = int(M)
        mine = torch.tensor([[*times[:M], comm] for times, comm in self._recorded], dtype=torch.float64)
        gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(gathered, mine, group=self.group)
        data = torch.stack(gathered, dim=1).numpy()                 # (steps, n, M + 1)
        share = float(np.median(self._forward_share)) if self._forward_share else 1 / 3
        share = torch.tensor([share], dtype=torch.float64)
        dist.all_reduce(share, group=self.group)
        share = float(share) / dist.get_world_size(self.group)
        # a worker's All-Reduce time includes waiting for the last one to arrive; the last one waits least, so the
        # step's smallest is its communication, the same for every worker
        comm = np.broadcast_to(data[..., M].min(axis=1, keepdims=True), data.shape[:2])
        return choose_tau(data[..., :M], comm, check=self.check, forward_share=share, candidates=self.candidates,
                          rule="replay")
