"""Pipeline parallelism of the reference job: the 1F1B order and one training step of one
stage (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC'21, sec. 2.2: ``p - s - 1`` warm-up forwards on stage ``s``, then one
forward / one backward, then the remaining backwards).

Stages exchange activations and gradients with point-to-point sends; DP ranks split the
global batch (by the plan's DP batch shares when it has them: each replica's losses are
divided by the global token count, so summing the gradients stays the global mean). Every
section is timed on the :class:`~planner.run.reference_job.timers.Timers` handed to
:func:`run_step`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from planner.run.reference_job.device import JobDevice
from planner.run.reference_job.dp import sync_grads
from planner.run.reference_job.model import batch
from planner.run.reference_job.shape import JobShape
from planner.run.reference_job.timers import Timers

__all__ = ["StageContext", "one_f_one_b", "run_step"]


def one_f_one_b(stage: int, stages: int, micro: int) -> list[tuple[str, int]]:
    """1F1B order of stage ``stage`` of ``stages``: ("F", i) and ("B", i) events for ``micro``
    micro-batches."""
    warmup = min(stages - stage - 1, micro)
    order = [("F", i) for i in range(warmup)]
    for i in range(micro - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(micro - warmup, micro)]


@dataclass(frozen=True)
class StageContext:
    """What one rank's step needs besides the model: its place and groups, and its timers."""

    shape: JobShape
    stage: int
    dp_rank: int
    tp_rank: int
    pp_ranks: tuple[int, ...]  # the global ranks of this rank's pipeline, stage by stage
    dp_group: object  # None for a DP group of one
    ep: int
    timers: Timers
    device: JobDevice = JobDevice()


def run_step(ctx: StageContext, model: nn.Module, opt: torch.optim.Optimizer, step: int,
             bucket: torch.Tensor | None) -> tuple[float, int]:
    """One training step of this rank (1F1B, gradient sync, optimizer); the global mean loss
    and how many micro-batches this rank ran forward."""
    shape, timers, s, pp = ctx.shape, ctx.timers, ctx.stage, len(ctx.pp_ranks)
    d = ctx.dp_rank
    dev = ctx.device
    x_all, y_all = batch(shape, step)
    mine = slice(shape.first_sequence(d), shape.first_sequence(d + 1))  # DP batch shares
    x_mine, y_mine = x_all[mine].to(dev.device), y_all[mine].to(dev.device)
    total = y_all.numel()
    act_shape = (shape.micro_batch, shape.seq_len, shape.hidden)
    act = {"device": dev.device, "dtype": dev.dtype}
    saved, sends, loss_sum, forwards = {}, [], torch.zeros((), device=dev.device), 0
    opt.zero_grad(set_to_none=False)  # in place: dense grads stay views of the bucket
    for kind, i in one_f_one_b(s, pp, shape.replica_micro_batches(d)):
        rows = slice(i * shape.micro_batch, (i + 1) * shape.micro_batch)
        if kind == "F":
            forwards += 1
            if s == 0:
                inp = x_mine[rows]
            else:
                inp = torch.empty(act_shape, **act)
                with timers.timed("pp_wait"):
                    dist.recv(inp, src=ctx.pp_ranks[s - 1])
                inp.requires_grad_(True)
            with timers.timed("forward"):
                outp = model(inp)
                if s == pp - 1:
                    outp = model.loss(outp, y_mine[rows], total)
            if s == pp - 1:
                loss_sum = loss_sum + outp.detach().float()
            else:
                sends.append(dist.isend(outp.detach().contiguous(), dst=ctx.pp_ranks[s + 1]))
            saved[i] = (inp, outp)
        else:
            inp, outp = saved.pop(i)
            if s == pp - 1:
                with timers.timed("backward"):
                    outp.backward()
            else:
                grad = torch.empty(act_shape, **act)
                with timers.timed("pp_wait"):
                    dist.recv(grad, src=ctx.pp_ranks[s + 1])
                with timers.timed("backward"):
                    outp.backward(grad)
            if s > 0:
                sends.append(dist.isend(inp.grad.contiguous(), dst=ctx.pp_ranks[s - 1]))
    if sends:  # (no pp_wait at all without pipeline stages)
        with timers.timed("pp_wait"):
            for work in sends:
                work.wait()
    with timers.timed("dp_comm"):
        sync_grads(model, ctx.dp_group, ctx.ep, shape.num_experts, bucket)
    with timers.timed("optimizer"):
        opt.step()
    # The loss lives on the last stages (each holds its DP share of the global mean): the sum
    # over the world is the global mean loss, and every rank learns it.
    holder = s == pp - 1 and ctx.tp_rank == 0  # TP ranks hold the same loss: count it once
    loss = loss_sum.reshape(1) if holder else torch.zeros(1, device=dev.device)
    dist.all_reduce(loss)
    return loss.item(), forwards
