"""Tensor parallelism of the reference job: Megatron-LM's column / row split of a block and its
``f`` / ``g`` all-reduce operators (Shoeybi et al. 2019, "Megatron-LM", sec. 3, fig. 3).

The operators take the caller's :class:`~planner.run.reference_job.timers.Timers` and time
their all-reduces as ``tp_comm`` (forward and backward)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from planner.run.reference_job.timers import Timers

__all__ = ["copy_to_tp", "reduce_from_tp", "shard_block", "tp_index"]


class _CopyToTP(torch.autograd.Function):
    """Megatron's ``f``: identity forward, all-reduce of the gradient backward, in place as
    Megatron-LM's ``_reduce`` does (``megatron/core/tensor_parallel/mappings.py``): the
    gradient is the column-parallel linear's fresh input gradient, used by nothing else."""

    @staticmethod
    def forward(ctx, x, group, timers):
        ctx.group, ctx.timers = group, timers
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        with ctx.timers.timed("tp_comm"):
            dist.all_reduce(grad, group=ctx.group)
        return grad, None, None


class _ReduceFromTP(torch.autograd.Function):
    """Megatron's ``g``: all-reduce forward (in place on the row-parallel linear's output,
    which that linear's backward does not need; ``mark_dirty`` tells autograd), identity
    backward."""

    @staticmethod
    def forward(ctx, x, group, timers):
        ctx.mark_dirty(x)
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


def tp_index(hidden: int, ffn: int, rank: int, size: int) -> dict[str, tuple]:
    """Which rows and columns of each full parameter of a block TP rank ``rank`` of ``size``
    keeps: name -> ``(rows, cols)``, each a LongTensor or None (all). Column-parallel ``qkv``
    (its heads' q, k and v rows) and ``fc1``; row-parallel ``proj`` and ``fc2`` (their biases
    whole, added once after the all-reduce); LayerNorms whole."""
    per = hidden // size
    rows = torch.arange(rank * per, (rank + 1) * per)
    qkv_rows = torch.cat([rows, rows + hidden, rows + 2 * hidden])
    per_ffn = ffn // size
    ffn_rows = torch.arange(rank * per_ffn, (rank + 1) * per_ffn)
    return {"qkv.weight": (qkv_rows, None), "qkv.bias": (qkv_rows, None),
            "proj.weight": (None, rows), "proj.bias": (None, None),
            "fc1.weight": (ffn_rows, None), "fc1.bias": (ffn_rows, None),
            "fc2.weight": (None, ffn_rows), "fc2.bias": (None, None)}


def shard_block(block: nn.Module, rank: int, size: int, group, timers: Timers) -> None:
    """Keep this TP rank's heads of the attention and its columns of the MLP, in place
    (``block`` is a :class:`~planner.run.reference_job.model.Block`; the indices of
    :func:`tp_index`).

    Column-parallel: ``qkv`` (by heads) and ``fc1`` (by rows); row-parallel: ``proj`` and
    ``fc2`` (by columns, their biases added once after the all-reduce). LayerNorms stay
    replicated (their inputs and gradients are the same on every TP rank). The block's
    all-reduces are timed on ``timers``.
    """
    index = tp_index(block.qkv.in_features, block.fc1.out_features, rank, size)
    with torch.no_grad():
        for name in ("qkv", "proj", "fc1", "fc2"):
            setattr(block, name, _sliced(getattr(block, name), *index[f"{name}.weight"]))
    block.heads //= size
    block.tp_index = index
    block.tp_group, block.timers = group, timers


def _sliced(linear: nn.Linear, rows, cols) -> nn.Linear:
    weight = linear.weight if rows is None else linear.weight[rows]
    weight = weight if cols is None else weight[:, cols]
    out = nn.Linear(weight.shape[1], weight.shape[0])
    out.weight.copy_(weight)
    out.bias.copy_(linear.bias if rows is None else linear.bias[rows])
    return out
