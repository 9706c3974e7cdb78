"""The reference job's model: a tiny GPT, dense or MoE, built from seeds so any split builds
the same weights, and the single-process losses a parallel run must reproduce.

* :class:`Block`: pre-LayerNorm causal self-attention (multi-head, no positional embedding)
  and a plain ``fc1 -> gelu -> fc2`` MLP (exact erf GELU); with tensor parallelism
  (:func:`planner.run.reference_job.tp.shard_block`) it runs its heads and MLP columns only;
* :class:`MoE`: top-k routed :class:`Expert` s, in place of the block's dense MLP;
* :class:`Stage`: the layers of one pipeline stage, plus the embedding on the first and the
  head (LayerNorm + untied linear) on the last, both split by vocabulary under tensor
  parallelism (:func:`planner.run.reference_job.tp.shard_vocab`);
* :func:`reference_losses`: one process, whole model, whole batch.

Every parameter is initialised from a seed derived from its layer (and expert) index.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from planner.run.reference_job.shape import JobShape
from planner.run.reference_job.tp import (copy_to_tp, reduce_from_tp,
                                          vocab_parallel_cross_entropy)

__all__ = ["Block", "Expert", "MoE", "Stage", "batch", "loss_of", "reference_losses", "seeded"]

T = TypeVar("T")


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a GELU MLP (``ffn`` wide,
    default ``4 * hidden``)."""

    def __init__(self, hidden: int, heads: int, ffn: int | None = None) -> None:
        super().__init__()
        ffn = ffn or 4 * hidden
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        self.moe: nn.Module | None = None  # set for MoE layers (Stage drops fc1 and fc2 then)
        self.moe_forward = None  # expert-parallel forward, set by the parallel job
        self.tp_group = None  # set by shard_block for tensor parallelism
        self.tp_index = None  # shard_block: name -> (rows, cols) of the full parameter kept
        self.timers = None  # the TP all-reduces' Timers, set by shard_block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp_group is not None:
            return self._forward_tp(x)
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, h))
        if self.moe is None:
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        ffn = self.moe_forward or self.moe
        return x + ffn(self.ln2(x))

    def _forward_tp(self, x: torch.Tensor) -> torch.Tensor:
        """The same block with this rank's heads and MLP columns (``shard_block``)."""
        b, s, h = x.shape
        group, timers = self.tp_group, self.timers
        local = self.qkv.out_features // 3
        q, k, v = self.qkv(copy_to_tp(self.ln1(x), group, timers)).split(local, dim=-1)
        q, k, v = (t.view(b, s, self.heads, local // self.heads).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, local)
        x = x + reduce_from_tp(F.linear(att, self.proj.weight), group, timers) + self.proj.bias
        m = F.gelu(self.fc1(copy_to_tp(self.ln2(x), group, timers)))
        return x + reduce_from_tp(F.linear(m, self.fc2.weight), group, timers) + self.fc2.bias


class Expert(nn.Module):
    """One routed expert: ``fc1 -> gelu -> fc2``, ``ffn`` wide (default ``2 * hidden``)."""

    def __init__(self, hidden: int, ffn: int | None = None) -> None:
        super().__init__()
        ffn = ffn or 2 * hidden
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class MoE(nn.Module):
    """Top-k routed experts. ``slots`` are the logical experts this process holds, in slot
    order (the reference process holds every expert once). Replicas of a logical expert share
    its seed, so they are identical."""

    def __init__(self, shape: JobShape, layer: int, slots: tuple[int, ...]) -> None:
        super().__init__()
        s, self.top_k, self.slots = shape.seed, shape.top_k, slots
        self.router = seeded(s + 30_000 + layer, lambda: nn.Linear(shape.hidden, shape.num_experts, bias=False))
        self.experts = nn.ModuleList(seeded(s + 40_000 + 1_000 * layer + e, lambda: Expert(shape.hidden, shape.expert_ffn))
                                     for e in slots)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k expert ids ``[T, k]`` and their softmax gates ``[T, k]``."""
        top, idx = self.router(x).topk(self.top_k, dim=-1)
        return idx, torch.softmax(top, dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        idx, gates = self.route(flat)
        out = torch.zeros_like(flat)
        for k in range(self.top_k):
            for e in idx[:, k].unique().tolist():
                rows = (idx[:, k] == e).nonzero(as_tuple=True)[0]
                out = out.index_add(0, rows, gates[rows, k:k + 1] * self.experts[e](flat[rows]))
        return out.view_as(x)


def seeded(seed: int, build: Callable[[], T]) -> T:
    """``build()`` under ``torch.manual_seed(seed)``, leaving the global RNG state as it was."""
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return build()
    finally:
        torch.random.set_rng_state(state)


class Stage(nn.Module):
    """The layers of one pipeline stage (plus the embedding on the first, the head on the last).
    ``slots``: per MoE layer, the logical experts this process holds (default: all, once)."""

    def __init__(self, shape: JobShape, layers: tuple[int, ...], first: bool, last: bool,
                 slots: dict[int, tuple[int, ...]] | None = None) -> None:
        super().__init__()
        s = shape.seed
        self.embed = seeded(s + 10_000, lambda: nn.Embedding(shape.vocab, shape.hidden)) if first else None
        self.blocks = nn.ModuleList(seeded(s + i, lambda: Block(shape.hidden, shape.heads, shape.ffn)) for i in layers)
        for i, block in zip(layers, self.blocks):
            if shape.moe_layers and shape.moe_layers[i]:
                held = tuple(range(shape.num_experts)) if slots is None else slots[i]
                block.moe = MoE(shape, i, held)
                # no dense MLP beside the experts, as in the model the plan prices: kept, it
                # would be all-reduced and stepped for nothing (its seeds stay consumed, so
                # every other parameter is as before)
                block.fc1 = block.fc2 = None
        self.head = seeded(s + 20_000, lambda: nn.Sequential(
            nn.LayerNorm(shape.hidden), nn.Linear(shape.hidden, shape.vocab))) if last else None
        self.vocab_part = None  # this TP rank's vocabulary slice, set by tp.shard_vocab

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        if self.head is None:
            return x
        if self.vocab_part is None:
            return self.head(x)
        norm, out = self.head  # vocab-parallel: Megatron's ``f`` before the output layer
        return out(copy_to_tp(norm(x), self.vocab_part.group, self.vocab_part.timers))

    def loss(self, logits: torch.Tensor, targets: torch.Tensor, total_tokens: int) -> torch.Tensor:
        """:func:`loss_of` this last stage's ``logits`` (their vocabulary slice under TP)."""
        if self.vocab_part is None:
            return loss_of(logits, targets, total_tokens)
        return vocab_parallel_cross_entropy(logits, targets, self.vocab_part).sum() / total_tokens


def batch(shape: JobShape, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch ``[global_batch, seq_len]`` of inputs and next-token targets, seeded by step."""
    g = torch.Generator().manual_seed(shape.seed * 1_000_003 + step)
    tokens = torch.randint(0, shape.vocab, (shape.global_batch, shape.seq_len + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def loss_of(logits: torch.Tensor, targets: torch.Tensor, total_tokens: int) -> torch.Tensor:
    """Sum of token cross-entropies over ``total_tokens``: micro-batch losses add up to the mean."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           reduction="sum") / total_tokens


def reference_losses(shape: JobShape) -> list[float]:
    """One process, whole model, whole batch: the losses the parallel run must reproduce."""
    model = Stage(shape, tuple(range(shape.num_layers)), True, True)
    opt = torch.optim.SGD(model.parameters(), lr=shape.lr)
    out = []
    for step in range(shape.steps):
        x, y = batch(shape, step)
        loss = loss_of(model(x), y, y.numel())
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out
