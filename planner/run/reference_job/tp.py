"""Tensor parallelism of the reference job: Megatron-LM's column / row split of a block and its
``f`` / ``g`` all-reduce operators (Shoeybi et al. 2019, "Megatron-LM", sec. 3, fig. 3).

The operators take the caller's :class:`~planner.run.reference_job.timers.Timers` and time
their all-reduces as ``tp_comm`` (forward and backward)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from planner.run.reference_job.timers import Timers

__all__ = ["copy_to_tp", "reduce_from_tp", "shard_block"]


class _CopyToTP(torch.autograd.Function):
    """Megatron's ``f``: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, group, timers):
        ctx.group, ctx.timers = group, timers
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        with ctx.timers.timed("tp_comm"):
            dist.all_reduce(grad, group=ctx.group)
        return grad, None, None


class _ReduceFromTP(torch.autograd.Function):
    """Megatron's ``g``: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group, timers):
        x = x.clone()
        with timers.timed("tp_comm"):
            dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


def copy_to_tp(x: torch.Tensor, group, timers: Timers) -> torch.Tensor:
    """Megatron's ``f`` on ``x`` (before a column-parallel linear)."""
    return _CopyToTP.apply(x, group, timers)


def reduce_from_tp(x: torch.Tensor, group, timers: Timers) -> torch.Tensor:
    """Megatron's ``g`` on ``x`` (after a row-parallel linear)."""
    return _ReduceFromTP.apply(x, group, timers)


def shard_block(block: nn.Module, rank: int, size: int, group, timers: Timers) -> None:
    """Keep this TP rank's heads of the attention and its columns of the MLP, in place
    (``block`` is a :class:`~planner.run.reference_job.model.Block`).

    Column-parallel: ``qkv`` (by heads) and ``fc1`` (by rows); row-parallel: ``proj`` and
    ``fc2`` (by columns, their biases added once after the all-reduce). LayerNorms stay
    replicated (their inputs and gradients are the same on every TP rank). The block's
    all-reduces are timed on ``timers``.
    """
    h = block.qkv.in_features
    per = h // size
    rows = torch.arange(rank * per, (rank + 1) * per)
    qkv_rows = torch.cat([rows, rows + h, rows + 2 * h])
    ffn = block.fc1.out_features // size
    ffn_rows = torch.arange(rank * ffn, (rank + 1) * ffn)
    with torch.no_grad():
        block.qkv = _sliced(block.qkv, qkv_rows, None)
        block.proj = _sliced(block.proj, None, rows)
        block.fc1 = _sliced(block.fc1, ffn_rows, None)
        block.fc2 = _sliced(block.fc2, None, ffn_rows)
    block.heads //= size
    block.tp_group, block.timers = group, timers


def _sliced(linear: nn.Linear, rows, cols) -> nn.Linear:
    weight = linear.weight if rows is None else linear.weight[rows]
    weight = weight if cols is None else weight[:, cols]
    out = nn.Linear(weight.shape[1], weight.shape[0])
    out.weight.copy_(weight)
    out.bias.copy_(linear.bias if rows is None else linear.bias[rows])
    return out
