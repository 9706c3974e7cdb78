"""The AFD job's model: a tiny seeded MoE decoder with a KV cache, cut where AFD cuts it, and
the single-process greedy decode a distributed run must reproduce (:func:`reference_decode`).

* :class:`Layer`: one decoder layer's attention-side part: pre-LayerNorm causal multi-head
  attention over a :class:`KVCache` (no positional embedding, as the training reference job),
  then either a dense GELU MLP (dense layers) or the router (top-k of a linear, softmax over
  the chosen k) and the shared experts (MoE layers);
* :class:`AttentionSide`: everything an attention rank holds: the embedding, every
  :class:`Layer`, the head (LayerNorm + untied linear);
* :class:`ExpertBank`: routed experts (``fc1 -> gelu -> fc2``,
  :class:`planner.run.reference_job.model.Expert`), only the ``(layer, expert)`` pairs a
  rank holds; :func:`run_experts` runs them on a block of (token, chosen experts, gates) rows
  (the same function on FFN ranks and in the reference);
* :func:`prompts`: the seeded prompts of every sequence of the world.

Every parameter comes from a seed derived from its layer (and expert) index
(:func:`planner.run.reference_job.model.seeded`), so every rank builds the same weights.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from planner.run.afd_job.shape import AfdShape
from planner.run.reference_job.model import Expert, seeded

__all__ = ["AttentionSide", "ExpertBank", "KVCache", "Layer", "prompts", "reference_decode",
           "run_experts"]


class KVCache:
    """Keys and values of every layer for ``sequences`` sequences: ``[seq, heads, max_len,
    head_dim]`` each, written in place; :meth:`rows` gives a micro-batch's view."""

    def __init__(self, shape: AfdShape, sequences: int, device: torch.device | str = "cpu") -> None:
        hd = shape.hidden // shape.heads
        dims = (sequences, shape.heads, shape.max_len, hd)
        self.k = [torch.zeros(dims, device=device) for _ in range(shape.num_layers)]
        self.v = [torch.zeros(dims, device=device) for _ in range(shape.num_layers)]

    def rows(self, layer: int, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of ``layer``'s keys and values of sequences ``start .. stop - 1``."""
        return self.k[layer][start:stop], self.v[layer][start:stop]


class Layer(nn.Module):
    """The attention-side part of decoder layer ``index`` (module docstring)."""

    def __init__(self, shape: AfdShape, index: int) -> None:
        super().__init__()
        h, self.heads = shape.hidden, shape.heads
        self.moe = shape.moe_layers[index]
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.top_k = shape.top_k
        if self.moe:
            s = shape.seed
            self.router = seeded(s + 30_000 + index,
                                 lambda: nn.Linear(h, shape.num_experts, bias=False))
            self.shared = nn.ModuleList(seeded(s + 50_000 + 100 * index + k, lambda: Expert(h))
                                        for k in range(shape.shared_experts))
        else:
            self.mlp = Expert(h, 4 * h)

    def attend(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor],
               pos: int) -> torch.Tensor:
        """``x + attention(ln1(x))`` for ``x`` ``[b, s, h]`` at positions ``pos .. pos+s-1``,
        its keys and values written into ``cache`` (views ``[b, heads, max_len, hd]``)."""
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        k_cache, v_cache = cache
        k_cache[:, :, pos:pos + s] = k
        v_cache[:, :, pos:pos + s] = v
        keys, values = k_cache[:, :, :pos + s], v_cache[:, :, :pos + s]
        mask = None
        if s > 1:  # causal over the cache: query i sees keys 0 .. pos + i
            mask = (torch.arange(s, device=x.device)[:, None] + pos
                    >= torch.arange(pos + s, device=x.device)[None, :])
        att = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return x + self.proj(att.transpose(1, 2).reshape(b, s, h))

    def dense(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.ln2(x))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                              torch.Tensor | None]:
        """The MoE input ``ln2(x)`` as rows ``[T, h]``, the top-k expert ids ``[T, k]``, their
        softmax gates ``[T, k]`` and the shared experts' output ``[T, h]`` (``None``: none)."""
        flat = self.ln2(x).reshape(-1, x.shape[-1])
        top, idx = self.router(flat).topk(self.top_k, dim=-1)
        shared = None
        for expert in self.shared:
            shared = expert(flat) if shared is None else shared + expert(flat)
        return flat, idx, torch.softmax(top, dim=-1), shared

    @staticmethod
    def combine(x: torch.Tensor, shared: torch.Tensor | None, routed: torch.Tensor) -> torch.Tensor:
        """``x`` plus the MoE output (routed experts, plus shared experts)."""
        out = routed if shared is None else shared + routed
        return x + out.view_as(x)


class AttentionSide(nn.Module):
    """Embedding, every layer's attention-side part, head."""

    def __init__(self, shape: AfdShape) -> None:
        super().__init__()
        s = shape.seed
        self.embed = seeded(s + 10_000, lambda: nn.Embedding(shape.vocab, shape.hidden))
        self.layers = nn.ModuleList(seeded(s + i, lambda: Layer(shape, i))
                                    for i in range(shape.num_layers))
        self.head = seeded(s + 20_000, lambda: nn.Sequential(
            nn.LayerNorm(shape.hidden), nn.Linear(shape.hidden, shape.vocab)))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``[b, vocab]`` from the last position of ``x`` ``[b, s, h]``."""
        return self.head(x[:, -1])


class ExpertBank(nn.Module):
    """Routed experts ``held`` (``{layer: experts}``), each seeded by its layer and index."""

    def __init__(self, shape: AfdShape, held: Mapping[int, tuple[int, ...]]) -> None:
        super().__init__()
        s = shape.seed
        self.experts = nn.ModuleDict({
            f"{layer}_{e}": seeded(s + 40_000 + 1_000 * layer + e, lambda: Expert(shape.hidden))
            for layer, experts in held.items() for e in experts})

    def of_layer(self, layer: int) -> dict[int, Expert]:
        prefix = f"{layer}_"
        return {int(k[len(prefix):]): m for k, m in self.experts.items() if k.startswith(prefix)}


def run_experts(experts: Mapping[int, nn.Module], x: torch.Tensor, ids: torch.Tensor,
                gates: torch.Tensor) -> torch.Tensor:
    """``sum_k gates[:, k] * experts[ids[:, k]](x)`` per row, over the k whose id is held
    here (an id of ``-1`` or one not in ``experts`` adds nothing); ``k`` in order, rows of one
    expert batched."""
    out = torch.zeros_like(x)
    for k in range(ids.shape[1]):
        for e in ids[:, k].unique().tolist():
            if e not in experts:
                continue
            rows = (ids[:, k] == e).nonzero(as_tuple=True)[0]
            out.index_add_(0, rows, gates[rows, k:k + 1] * experts[e](x[rows]))
    return out


def prompts(shape: AfdShape) -> torch.Tensor:
    """Seeded prompts ``[sequences, context]``; attention rank ``a`` decodes rows
    ``a * batch .. (a + 1) * batch - 1``."""
    g = torch.Generator().manual_seed(shape.seed * 1_000_003 + 7)
    return torch.randint(0, shape.vocab, (shape.sequences, shape.context), generator=g)


@torch.no_grad()
def reference_decode(shape: AfdShape) -> tuple[torch.Tensor, torch.Tensor]:
    """One process, whole model, every sequence of the world as one batch: the prefill of the
    prompts, then ``steps`` greedy decode steps. Returns the generated ids ``[sequences,
    steps + 1]`` (the prefill's token first) and the last step's logits ``[sequences,
    vocab]``."""
    side = AttentionSide(shape)
    bank = ExpertBank(shape, {i: tuple(range(shape.num_experts)) for i in shape.moe_layer_ids})
    cache = KVCache(shape, shape.sequences)
    tokens, pos, out, logits = prompts(shape), 0, [], None
    for _ in range(shape.steps + 1):
        x = side.embed(tokens)
        for i, layer in enumerate(side.layers):
            x = layer.attend(x, cache.rows(i, 0, shape.sequences), pos)
            if layer.moe:
                flat, idx, gates, shared = layer.route(x)
                x = layer.combine(x, shared, run_experts(bank.of_layer(i), flat, idx, gates))
            else:
                x = layer.dense(x)
        logits = side.logits(x)
        pos += tokens.shape[1]
        tokens = logits.argmax(-1, keepdim=True)
        out.append(tokens[:, 0])
    return torch.stack(out, 1), logits
