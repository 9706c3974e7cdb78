"""Tensor parallelism of the reference job: Megatron-LM's column / row split of a block and its
``f`` / ``g`` all-reduce operators (Shoeybi et al. 2019, "Megatron-LM", sec. 3, fig. 3), and
its vocabulary-parallel embedding, output layer and cross entropy (same section; Megatron-Core
``VocabParallelEmbedding`` and ``_VocabParallelCrossEntropy``).

The operators take the caller's :class:`~planner.run.reference_job.timers.Timers` and time
their all-reduces as ``tp_comm`` (forward and backward)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from planner.run.reference_job.timers import Timers

__all__ = ["VocabParallel", "copy_to_tp", "reduce_from_tp", "shard_block", "shard_vocab",
           "tp_index", "vocab_parallel_cross_entropy"]


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


@dataclass(frozen=True)
class VocabParallel:
    """This TP rank's slice of the vocabulary, ``[start, start + size)``, and its group."""

    start: int
    size: int
    group: object
    timers: Timers

    def rows(self) -> torch.Tensor:
        return torch.arange(self.start, self.start + self.size)

    def local(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids as rows of this slice (0 where outside) and the mask of those outside."""
        local = tokens - self.start
        outside = (local < 0) | (local >= self.size)
        return local.masked_fill(outside, 0), outside


class _VocabParallelEmbedding(nn.Module):
    """An embedding holding the rows of this rank's vocabulary slice: it looks up the tokens
    in the slice, zeroes the others, and all-reduces (Megatron's ``g``) the partial sums."""

    def __init__(self, full: nn.Embedding, part: VocabParallel) -> None:
        super().__init__()
        self.part = part
        self.weight = nn.Parameter(full.weight.detach()[part.rows()].clone())

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        local, outside = self.part.local(tokens)
        out = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tp(out, self.part.group, self.part.timers)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Per-token cross entropy of logits split by vocabulary: the largest logit, the target's
    logit and the sum of exponentials are all-reduced over the TP group (three calls, as
    Megatron-Core's unfused version makes), the gradient (softmax minus the target's one-hot,
    this slice's columns) needs none."""

    @staticmethod
    def forward(ctx, logits, target, part):
        logits = logits.float()
        top = logits.max(dim=-1)[0]
        with part.timers.timed("tp_comm"):
            dist.all_reduce(top, op=dist.ReduceOp.MAX, group=part.group)
        shifted = logits - top.unsqueeze(-1)
        local, outside = part.local(target)
        picked = shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        exp = shifted.exp()
        total = exp.sum(dim=-1)
        with part.timers.timed("tp_comm"):
            dist.all_reduce(picked, group=part.group)
            dist.all_reduce(total, group=part.group)
        softmax = exp.div_(total.unsqueeze(-1))
        ctx.save_for_backward(softmax, local, outside)
        return total.log() - picked

    @staticmethod
    def backward(ctx, grad):
        softmax, local, outside = ctx.saved_tensors
        hit = (~outside).to(softmax.dtype).unsqueeze(-1)
        out = softmax.scatter_add(-1, local.unsqueeze(-1), -hit)
        return out * grad.unsqueeze(-1), None, None


def vocab_parallel_cross_entropy(logits: torch.Tensor, target: torch.Tensor,
                                 part: VocabParallel) -> torch.Tensor:
    """Per-token cross entropy (``target``'s shape) of ``logits`` holding ``part``'s columns."""
    return _VocabParallelCrossEntropy.apply(logits, target, part)


def shard_vocab(stage: nn.Module, rank: int, size: int, group, timers: Timers) -> None:
    """Split a :class:`~planner.run.reference_job.model.Stage`'s embedding (first stage) and
    output layer (last stage) by vocabulary over the TP group, in place: each rank keeps rows
    ``[rank * V / size, (rank + 1) * V / size)`` of the embedding table and of the output
    layer's weight and bias; the final LayerNorm stays replicated. The stage then computes
    its logits' slice, and its loss with :func:`vocab_parallel_cross_entropy`."""
    table = stage.embed if stage.embed is not None else stage.head[1]
    vocab = table.weight.shape[0]
    if vocab % size:
        raise ValueError(f"vocabulary {vocab} does not split over {size} TP ranks")
    part = VocabParallel(rank * (vocab // size), vocab // size, group, timers)
    with torch.no_grad():
        if stage.embed is not None:
            stage.embed = _VocabParallelEmbedding(stage.embed, part)
        if stage.head is not None:
            stage.head[1] = _sliced(stage.head[1], part.rows(), None)
    stage.vocab_part = part
