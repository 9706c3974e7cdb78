"""Reference job: a tiny GPT (optionally MoE) trained for a few steps under a plan (plain torch).

Run under torchrun (``python -m torch.distributed.run --nproc-per-node N -m
planner.run.reference_job PLAN --out RUN.json``, or ``planner launch PLAN``). Every rank checks the
world against the plan (:func:`planner.run.runtime.init`, before any collective), builds the plan's
process groups and trains only the layers of its pipeline stage:

* **DP**: ranks split the global batch; gradients are summed over the DP group (each loss is
  already divided by the global token count).
* **PP**: stages exchange activations and gradients with point-to-point sends in the 1F1B
  order (Narayanan et al., SC'21, sec. 2.2: ``p - s - 1`` warm-up forwards on stage ``s``,
  then one forward / one backward, then the remaining backwards).
* **EP**: MoE layers hold only their EP rank's slots of the plan's expert placement.
  :class:`ExpertDispatch` all-gathers the micro-batch's per-expert counts, computes the
  planner's real-time quotas (:func:`solvers.experts.quota.solve_quotas`), and all-to-alls
  tokens to replicas and back (gloo supports uneven all-to-all). Each logical expert's gradient
  is summed over all its replicas.

The model keeps the plan's layer count, MoE layers, expert count, top-k and layer-to-stage split.
Its widths and batch come from ``--size``:

* ``tiny`` (default): ``--hidden`` (32), 4 heads, a 128-token vocabulary, FFN ``4 * hidden``,
  expert FFN ``2 * hidden``, ``--seq-len`` (16), micro-batches of one sequence and
  ``--micro-batches`` (4) per DP rank, so it runs on CPU in seconds.
* ``plan``: the plan's model and batch (:func:`plan_shape_fields`): ``hidden_size``,
  ``num_heads``, ``ffn_hidden_size``, ``vocab_size``, ``moe.expert_ffn_hidden``, the
  workload's ``seq_len``, the plan's ``micro_batch`` and ``micro_batches``. The job builds
  one architecture only - pre-LayerNorm blocks, multi-head attention without positional
  embeddings, a plain ``fc1 -> gelu -> fc2`` MLP (exact erf GELU), untied head - and every
  model that is not exactly that is refused with a one-line :class:`PlannerError` (glu,
  another activation or norm, GQA/MQA, MLA, sliding windows, shared experts, tied or
  positional embeddings, MTP modules). Its linears (qkv, attention output, MLP, experts)
  all carry biases and the router has none, so for the cost models' parameter counts the
  model file should say ``qkv_bias``, ``attn_out_bias``, ``mlp_bias`` and ``moe.expert_bias``
  true and ``moe.router_bias`` false (bias flags are not checked).

Every parameter is initialised from a seed derived from its layer (and expert) index, so any
split builds the same model. :func:`reference_losses` (one process, whole batch) gives the
losses the parallel run must reproduce.

* **TP** (dense models): Megatron-LM's split, attention by heads and the MLP by columns, with
  the ``f`` / ``g`` all-reduce operators (Shoeybi et al. 2019, sec. 3). Weights are cut from
  the same seeded full layers.

Not implemented yet: context parallelism, tensor parallelism of MoE layers (expert TP), and
interleaved stages (``vpp > 1``). Such a plan is refused with a clear message. ZB-H1 and SlimPipe plans run in plain 1F1B order
(the same arithmetic, another order).

Every rank times each step by kind (:class:`Timers`, ``time.perf_counter``; the kinds are
disjoint, so they add up to at most the step):

* ``forward`` / ``backward``: compute of all micro-batches of the step (the loss included on
  the last stage), without the TP / EP communication and quota solving nested in them;
* ``tp_comm``: the all-reduces of Megatron's ``f`` and ``g`` (forward and backward);
* ``ep_comm``: the all-gather of expert counts and both all-to-alls, forward and backward
  (:class:`_AllToAll` times its own backward);
* ``quota_solve``: the dispatch's CPU work (quotas, dispatch matrix, slot of each token);
* ``pp_wait``: time blocked in ``dist.recv`` and in the final waits on the ``isend`` works
  (pipeline bubble plus transfer);
* ``dp_comm``: the gradient sync (:func:`_sync_grads`, expert gradients included);
* ``optimizer``: ``opt.step()``;
* ``step``: the whole step (the loss all-reduce at its end is in no other kind).

Rank 0 writes a run record (:func:`planner.run.launch.write_run_record`):

* the whole plan, its inputs hash and the environment;
* losses, rank 0's step times (``step_times_s``) and the slowest rank's
  (``step_times_max_s``);
* ``rank_timings``: per rank its stage, coordinates, torch threads and per-step timings;
* every rank's expert events (global counts, and tokens received per slot).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from planner.errors import PlannerError


@dataclass(frozen=True)
class JobShape:
    """The model and batch: ``micro_batches`` per DP rank of ``micro_batch`` sequences.
    ``ffn`` / ``expert_ffn`` 0 mean ``4 * hidden`` / ``2 * hidden`` (the tiny job's widths)."""

    num_layers: int
    hidden: int = 32
    heads: int = 4
    vocab: int = 128
    ffn: int = 0
    expert_ffn: int = 0
    seq_len: int = 16
    micro_batch: int = 1
    micro_batches: int = 4
    dp: int = 1
    steps: int = 3
    lr: float = 0.05
    seed: int = 0
    moe_layers: tuple[bool, ...] = ()
    num_experts: int = 0
    top_k: int = 0

    def __post_init__(self) -> None:
        if not self.ffn:
            object.__setattr__(self, "ffn", 4 * self.hidden)
        if not self.expert_ffn:
            object.__setattr__(self, "expert_ffn", 2 * self.hidden)

    @property
    def global_batch(self) -> int:
        return self.dp * self.micro_batches * self.micro_batch


# Activations the job runs as exact (erf) GELU, ``F.gelu``: the tanh approximations differ by
# < 1e-3 and cost the same, so a model that names them is built (not bit-for-bit its kernel).
GELU_LIKE = ("gelu", "gelu_new", "gelu_pytorch_tanh")


def plan_shape_fields(plan) -> dict[str, int]:
    """The :class:`JobShape` fields of ``--size plan``: the plan's model widths and batch.

    Raises :class:`PlannerError` (one line) when the job cannot build the plan's model exactly
    (see the module docstring); bias flags are not checked."""
    m = plan.model_spec()
    problems = []
    if m.glu:
        problems.append("glu=true (the job needs glu: false, a plain fc1-gelu-fc2 MLP)")
    if m.activation not in GELU_LIKE:
        problems.append(f"activation={m.activation} (the job needs one of {', '.join(GELU_LIKE)})")
    if m.norm != "layernorm":
        problems.append(f"norm={m.norm} (the job needs layernorm)")
    if m.num_kv_heads != m.num_heads:
        problems.append(f"num_kv_heads={m.num_kv_heads} (the job needs num_kv_heads = "
                        f"num_heads = {m.num_heads}: no GQA/MQA)")
    if m.head_dim * m.num_heads != m.hidden_size:
        problems.append(f"head_dim={m.head_dim} (the job needs head_dim * num_heads = "
                        f"hidden_size = {m.hidden_size})")
    if m.mla is not None:
        problems.append("mla set (the job needs plain multi-head attention)")
    if m.sliding_window is not None:
        problems.append(f"sliding_window={m.sliding_window} (the job needs full causal attention)")
    if m.moe is not None and m.moe.num_shared_experts > 0:
        problems.append(f"moe.num_shared_experts={m.moe.num_shared_experts} (the job needs 0)")
    if m.tied_embeddings:
        problems.append("tied_embeddings=true (the job needs an untied head)")
    if m.position_embeddings > 0:
        problems.append(f"position_embeddings={m.position_embeddings} (the job has none: needs 0)")
    if m.mtp_layers > 0:
        problems.append(f"mtp_layers={m.mtp_layers} (the job has no MTP modules: needs 0)")
    if problems:
        raise PlannerError(f"--size plan: the reference job cannot build model '{m.name}' "
                           f"exactly: {'; '.join(problems)} (use --size tiny, or a model file "
                           "without these)")
    return {"hidden": m.hidden_size, "heads": m.num_heads, "ffn": m.ffn_hidden_size,
            "vocab": m.vocab_size, "expert_ffn": m.moe.expert_ffn_hidden if m.moe else 0,
            "seq_len": plan.workload().seq_len, "micro_batch": plan.config["micro_batch"],
            # global_batch // (dp * micro_batch), the plan's gradient-accumulation steps
            "micro_batches": plan.micro_batches}


# ----------------------------------------------------------------------------------------
# Timers
# ----------------------------------------------------------------------------------------

TIMED_KINDS = ("forward", "backward", "tp_comm", "ep_comm", "quota_solve", "pp_wait",
               "dp_comm", "optimizer")
STEP_KINDS = TIMED_KINDS + ("step",)


class Timers:
    """Seconds per kind of this rank, one dict per step (``time.perf_counter``).

    :meth:`timed` sections nest and are exclusive: a section's time leaves out the sections
    timed inside it (the TP all-reduces inside a forward count as ``tp_comm``, not
    ``forward``), so the kinds are disjoint. Autograd runs a CPU backward on the thread that
    called ``backward()``, so sections timed inside it nest in the ``backward`` section."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.steps: list[dict[str, float]] = []
        self.current = dict.fromkeys(TIMED_KINDS, 0.0)
        self._stack: list[float] = []  # per open section: seconds of the sections inside it

    def add(self, kind: str, seconds: float) -> None:
        """Add ``seconds`` to ``kind`` in this step (not subtracted from an open section)."""
        self.current[kind] = self.current.get(kind, 0.0) + seconds

    @contextmanager
    def timed(self, kind: str):
        self._stack.append(0.0)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            inner = self._stack.pop()
            self.add(kind, elapsed - inner)
            if self._stack:
                self._stack[-1] += elapsed

    def end_step(self, step_seconds: float) -> None:
        self.current["step"] = step_seconds
        self.steps.append(self.current)
        self.current = dict.fromkeys(TIMED_KINDS, 0.0)


TIMERS = Timers()  # this process's (one rank per process); reset by train()


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
        self.moe: nn.Module | None = None  # set for MoE layers (the dense MLP then stays unused)
        self.moe_forward = None  # expert-parallel forward, set by the parallel job
        self.tp_group = None  # set by shard_block for tensor parallelism

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
        """The same block with this rank's heads and MLP columns (:func:`shard_block`)."""
        b, s, h = x.shape
        local = self.qkv.out_features // 3
        q, k, v = self.qkv(_CopyToTP.apply(self.ln1(x), self.tp_group)).split(local, dim=-1)
        q, k, v = (t.view(b, s, self.heads, local // self.heads).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, local)
        x = x + _ReduceFromTP.apply(F.linear(att, self.proj.weight), self.tp_group) + self.proj.bias
        m = F.gelu(self.fc1(_CopyToTP.apply(self.ln2(x), self.tp_group)))
        return x + _ReduceFromTP.apply(F.linear(m, self.fc2.weight), self.tp_group) + self.fc2.bias


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

    def __init__(self, shape: "JobShape", layer: int, slots: tuple[int, ...]) -> None:
        super().__init__()
        s, self.top_k, self.slots = shape.seed, shape.top_k, slots
        self.router = _seeded(s + 30_000 + layer, lambda: nn.Linear(shape.hidden, shape.num_experts, bias=False))
        self.experts = nn.ModuleList(_seeded(s + 40_000 + 1_000 * layer + e, lambda: Expert(shape.hidden, shape.expert_ffn))
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


# ----------------------------------------------------------------------------------------
# Expert parallelism: dispatch by the plan's placement and real-time quotas
# ----------------------------------------------------------------------------------------


def replica_ranges(counts: np.ndarray, quota: np.ndarray, phy2log: np.ndarray) -> np.ndarray:
    """``M[src, p]``: tokens of EP rank ``src`` that physical slot ``p`` serves.

    Expert ``e``'s tokens are ordered by source rank (rank 0's first, each in its own order)
    and cut into consecutive runs of its replicas' quotas, replicas by slot index.
    """
    ranks, slots = counts.shape[0], phy2log.shape[0]
    out = np.zeros((ranks, slots), dtype=np.int64)
    for e in range(counts.shape[1]):
        reps = np.flatnonzero(phy2log == e)
        bounds = np.concatenate([[0], np.cumsum(quota[reps])])
        starts = np.concatenate([[0], np.cumsum(counts[:, e])])
        for src in range(ranks):
            lo, hi = starts[src], starts[src + 1]
            out[src, reps] = np.clip(np.minimum(bounds[1:], hi) - np.maximum(bounds[:-1], lo), 0, None)
    return out


class ExpertDispatch:
    """Expert-parallel forward of one MoE layer on one rank.

    1. all-gather the per-expert token counts of the EP group (the micro-batch's exact loads);
    2. every rank computes the same integer quotas per physical slot
       (:func:`solvers.experts.quota.solve_quotas`, the planner's real-time quota mode) and the
       same dispatch matrix (:func:`replica_ranges`);
    3. all-to-all the tokens to their replicas (autograd-aware), run the local experts,
       all-to-all back, and combine with the router's gates.
    Every event is logged (global counts and tokens received per local slot).
    """

    def __init__(self, moe: MoE, layer: int, phy2log: np.ndarray, slots_per_gpu: int,
                 ep_index: int, ep_size: int, group, log: list) -> None:
        self.moe, self.layer, self.phy2log = moe, layer, phy2log
        self.S, self.me, self.ep, self.group, self.log = slots_per_gpu, ep_index, ep_size, group, log

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        from solvers.experts.quota import solve_quotas

        flat = x.reshape(-1, x.shape[-1])
        idx, gates = self.moe.route(flat)
        experts = idx.reshape(-1)
        E = self.moe.router.out_features
        local = torch.bincount(experts, minlength=E)
        gathered = [torch.zeros_like(local) for _ in range(self.ep)]
        with TIMERS.timed("ep_comm"):
            dist.all_gather(gathered, local, group=self.group)
        with TIMERS.timed("quota_solve"):
            counts = torch.stack(gathered).numpy()
            gpu_of_slot = np.arange(self.phy2log.shape[0]) // self.S
            quota = np.rint(solve_quotas(counts.sum(0).astype(np.float64), self.phy2log,
                                         gpu_of_slot, self.ep).quota).astype(np.int64)
            matrix = replica_ranges(counts, quota, self.phy2log)
            slot_of = self._my_slots(experts.numpy(), counts, quota)
            order = np.lexsort((np.arange(slot_of.shape[0]), slot_of))
            mine = range(self.me * self.S, (self.me + 1) * self.S)
            send_splits = np.bincount(slot_of // self.S, minlength=self.ep).tolist()
            recv_splits = [int(matrix[src, mine.start:mine.stop].sum()) for src in range(self.ep)]
        tokens = torch.as_tensor(order // self.moe.top_k)
        recv = _AllToAll.apply(flat[tokens], recv_splits, send_splits, self.group)
        labels = np.concatenate([np.repeat(np.arange(self.S), matrix[src, mine.start:mine.stop])
                                 for src in range(self.ep)])
        out = torch.zeros_like(recv)
        for i in np.unique(labels):
            rows = torch.as_tensor(np.flatnonzero(labels == i))
            out = out.index_add(0, rows, self.moe.experts[i](recv[rows]))
        back = _AllToAll.apply(out, send_splits, recv_splits, self.group)
        weights = gates.reshape(-1)[torch.as_tensor(order)].unsqueeze(1)
        self.log.append({"layer": self.layer, "global_counts": counts.sum(0).tolist(),
                         "received": {int(p): int(matrix[:, p].sum()) for p in mine}})
        return torch.zeros_like(flat).index_add(0, tokens, back * weights).view_as(x)

    def _my_slots(self, experts: np.ndarray, counts: np.ndarray, quota: np.ndarray) -> np.ndarray:
        """Physical slot of each of this rank's (token, expert) assignments."""
        out = np.empty(experts.shape[0], dtype=np.int64)
        for e in np.unique(experts):
            reps = np.flatnonzero(self.phy2log == e)
            bounds = np.cumsum(quota[reps])
            mine = np.flatnonzero(experts == e)
            pos = counts[:self.me, e].sum() + np.arange(mine.shape[0])
            out[mine] = reps[np.searchsorted(bounds, pos, side="right")]
        return out


class _AllToAll(torch.autograd.Function):
    """Uneven all-to-all of rows (``torch.distributed.nn.functional.all_to_all_single``'s
    arithmetic: backward is the all-to-all with the splits swapped), timed as ``ep_comm``
    in both directions."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group):
        ctx.splits, ctx.group = (out_splits, in_splits), group
        out = x.new_empty(sum(out_splits), x.shape[1])
        with TIMERS.timed("ep_comm"):
            dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty(sum(in_splits), grad.shape[1])
        with TIMERS.timed("ep_comm"):
            dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits, group=ctx.group)
        return back, None, None, None


def _sync_expert_grads(model: "Stage", num_experts: int, group) -> None:
    """Every replica gets its logical expert's total gradient (sum over all replicas)."""
    for block in model.blocks:
        if block.moe is None:
            continue
        params = [list(ex.parameters()) for ex in block.moe.experts]
        width = sum(p.numel() for p in params[0])
        total = torch.zeros(num_experts, width)
        for e, ps in zip(block.moe.slots, params):
            total[e] += torch.cat([torch.zeros(p.numel()) if p.grad is None else p.grad.reshape(-1)
                                   for p in ps])
        dist.all_reduce(total, group=group)
        for e, ps in zip(block.moe.slots, params):
            flat, start = total[e], 0
            for p in ps:  # a replica that served no token still gets its expert's gradient
                p.grad = flat[start:start + p.numel()].view_as(p).clone()
                start += p.numel()


# ----------------------------------------------------------------------------------------
# Tensor parallelism (Megatron-LM's column / row split, Shoeybi et al. 2019, sec. 3)
# ----------------------------------------------------------------------------------------


class _CopyToTP(torch.autograd.Function):
    """Megatron's ``f``: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        with TIMERS.timed("tp_comm"):
            dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """Megatron's ``g``: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.clone()
        with TIMERS.timed("tp_comm"):
            dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def shard_block(block: "Block", rank: int, size: int, group) -> None:
    """Keep this TP rank's heads of the attention and its columns of the MLP, in place.

    Column-parallel: ``qkv`` (by heads) and ``fc1`` (by rows); row-parallel: ``proj`` and
    ``fc2`` (by columns, their biases added once after the all-reduce). LayerNorms stay
    replicated (their inputs and gradients are the same on every TP rank).
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
    block.tp_group = group


def _sliced(linear: nn.Linear, rows, cols) -> nn.Linear:
    weight = linear.weight if rows is None else linear.weight[rows]
    weight = weight if cols is None else weight[:, cols]
    out = nn.Linear(weight.shape[1], weight.shape[0])
    out.weight.copy_(weight)
    out.bias.copy_(linear.bias if rows is None else linear.bias[rows])
    return out


def _seeded(seed: int, build):
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return build()
    finally:
        torch.random.set_rng_state(state)


class Stage(nn.Module):
    """The layers of one pipeline stage (plus the embedding on the first, the head on the last)."""

    def __init__(self, shape: JobShape, layers: tuple[int, ...], first: bool, last: bool,
                 slots: dict[int, tuple[int, ...]] | None = None) -> None:
        super().__init__()
        s = shape.seed
        self.embed = _seeded(s + 10_000, lambda: nn.Embedding(shape.vocab, shape.hidden)) if first else None
        self.blocks = nn.ModuleList(_seeded(s + i, lambda: Block(shape.hidden, shape.heads, shape.ffn)) for i in layers)
        for i, block in zip(layers, self.blocks):
            if shape.moe_layers and shape.moe_layers[i]:
                held = tuple(range(shape.num_experts)) if slots is None else slots[i]
                block.moe = MoE(shape, i, held)
        self.head = _seeded(s + 20_000, lambda: nn.Sequential(
            nn.LayerNorm(shape.hidden), nn.Linear(shape.hidden, shape.vocab))) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x) if self.head is not None else x


def batch(shape: JobShape, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch ``[global_batch, seq_len]`` of inputs and next-token targets, seeded by step."""
    g = torch.Generator().manual_seed(shape.seed * 1_000_003 + step)
    tokens = torch.randint(0, shape.vocab, (shape.global_batch, shape.seq_len + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def _loss(logits: torch.Tensor, targets: torch.Tensor, total_tokens: int) -> torch.Tensor:
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
        loss = _loss(model(x), y, y.numel())
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def _one_f_one_b(stage: int, stages: int, micro: int) -> list[tuple[str, int]]:
    """1F1B order of stage ``stage``: ("F", i) and ("B", i) events."""
    warmup = min(stages - stage - 1, micro)
    order = [("F", i) for i in range(warmup)]
    for i in range(micro - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(micro - warmup, micro)]


def train(plan_path: str, shape_overrides: dict, out: str | None) -> list[float]:
    """Run the job on this rank (see the module docstring); returns the per-step losses."""
    from planner.run.runtime import init

    if os.environ.get("OMP_NUM_THREADS"):  # torchrun sets 1 for nproc > 1; torch usually obeys
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    rt = init(plan_path, backend="gloo")
    cfg, view = rt.plan.config, rt.view
    model_spec = rt.plan.model_spec()
    moe = model_spec.moe
    if max(cfg["cp"], cfg["vpp"]) > 1 or (cfg["tp"] > 1 and moe is not None):
        raise PlannerError(f"the reference job runs DP x TP x PP (dense) and DP x PP x EP (MoE) "
                           f"with one model chunk per stage; this plan has tp={cfg['tp']} "
                           f"cp={cfg['cp']} vpp={cfg['vpp']}{' on an MoE model' if moe else ''} "
                           "(plan with --schedule 1f1b)")
    shape = JobShape(num_layers=model_spec.num_layers, dp=cfg["dp"],
                     moe_layers=tuple(model_spec.moe_layers) if moe else (),
                     num_experts=moe.num_experts if moe else 0, top_k=moe.top_k if moe else 0,
                     **shape_overrides)
    log: list = []
    model = _build_stage(rt, shape, log)
    opt = torch.optim.SGD(model.parameters(), lr=shape.lr)
    bucket = (attach_grad_bucket(_dense_params(model, rt.plan.config["ep"]))
              if rt.groups.get("dp") is not None else None)
    pp_ranks = next(g for g in rt.plan.groups["pp"] if view.rank in g)
    losses, times = [], []
    TIMERS.reset()
    for step in range(shape.steps):
        start = time.perf_counter()
        loss = _step(shape, model, opt, rt, pp_ranks, step, bucket)
        times.append(time.perf_counter() - start)
        TIMERS.end_step(times[-1])
        losses.append(loss)
    ranks = [None] * view.world_size
    dist.all_gather_object(ranks, {"rank": view.rank, "ep": view.coords["ep"], "stage": view.stage,
                                   "events": log, "coords": dict(view.coords),
                                   "threads": torch.get_num_threads(), "steps": TIMERS.steps})
    if out is not None and view.rank == 0:
        _write_record(out, rt, shape, losses, times, ranks)
    dist.barrier()
    dist.destroy_process_group()
    return losses


def _build_stage(rt, shape: JobShape, log: list) -> "Stage":
    """This rank's stage; with EP, only its slots' experts, dispatched by ExpertDispatch."""
    cfg, view = rt.plan.config, rt.view
    first, last = view.stage == 0, view.stage == cfg["pp"] - 1
    if cfg["ep"] == 1 or not shape.moe_layers:
        model = Stage(shape, view.layers, first, last)
        if cfg["tp"] > 1:
            for block in model.blocks:
                shard_block(block, view.coords["tp"], cfg["tp"], rt.groups["tp"])
        return model
    from planner.run.runtime import expert_maps

    maps, S = expert_maps(rt.plan)
    ep_group = next(g for g in rt.plan.groups["ep"] if view.rank in g)
    me = sorted(ep_group).index(view.rank)
    if me != view.coords["ep"]:
        raise PlannerError(f"rank {view.rank}: EP coordinate {view.coords['ep']} but position {me} "
                           "in its EP group")
    slots = view.experts
    model = Stage(shape, view.layers, first, last, slots)
    for i, block in zip(view.layers, model.blocks):
        if block.moe is not None:
            block.moe_forward = ExpertDispatch(block.moe, i, np.array(maps[i]), S, me, cfg["ep"],
                                               rt.groups["ep"], log)
    return model


def _step(shape: JobShape, model: Stage, opt, rt, pp_ranks: list[int], step: int,
          bucket: torch.Tensor | None) -> float:
    view, pp = rt.view, len(pp_ranks)
    s, d = view.stage, view.coords["dp"]
    x_all, y_all = batch(shape, step)
    per_rank = shape.micro_batches * shape.micro_batch
    x_mine, y_mine = x_all[d * per_rank:(d + 1) * per_rank], y_all[d * per_rank:(d + 1) * per_rank]
    total = y_all.numel()
    act_shape = (shape.micro_batch, shape.seq_len, shape.hidden)
    saved, sends, loss_sum = {}, [], torch.zeros(())
    opt.zero_grad(set_to_none=False)  # in place: dense grads stay views of the bucket
    for kind, i in _one_f_one_b(s, pp, shape.micro_batches):
        rows = slice(i * shape.micro_batch, (i + 1) * shape.micro_batch)
        if kind == "F":
            if s == 0:
                inp = x_mine[rows]
            else:
                inp = torch.empty(act_shape)
                with TIMERS.timed("pp_wait"):
                    dist.recv(inp, src=pp_ranks[s - 1])
                inp.requires_grad_(True)
            with TIMERS.timed("forward"):
                outp = model(inp)
                if s == pp - 1:
                    outp = _loss(outp, y_mine[rows], total)
            if s == pp - 1:
                loss_sum = loss_sum + outp.detach()
            else:
                sends.append(dist.isend(outp.detach().contiguous(), dst=pp_ranks[s + 1]))
            saved[i] = (inp, outp)
        else:
            inp, outp = saved.pop(i)
            if s == pp - 1:
                with TIMERS.timed("backward"):
                    outp.backward()
            else:
                grad = torch.empty(act_shape)
                with TIMERS.timed("pp_wait"):
                    dist.recv(grad, src=pp_ranks[s + 1])
                with TIMERS.timed("backward"):
                    outp.backward(grad)
            if s > 0:
                sends.append(dist.isend(inp.grad.contiguous(), dst=pp_ranks[s - 1]))
    if sends:  # (no pp_wait at all without pipeline stages)
        with TIMERS.timed("pp_wait"):
            for work in sends:
                work.wait()
    with TIMERS.timed("dp_comm"):
        _sync_grads(model, rt, shape, bucket)
    with TIMERS.timed("optimizer"):
        opt.step()
    # The loss lives on the last stages (each holds its DP share of the global mean): the sum
    # over the world is the global mean loss, and every rank learns it.
    holder = s == pp - 1 and view.coords["tp"] == 0  # TP ranks hold the same loss: count it once
    loss = loss_sum.reshape(1) if holder else torch.zeros(1)
    dist.all_reduce(loss)
    return loss.item()


def _dense_params(model: "Stage", ep: int) -> list[torch.nn.Parameter]:
    """The parameters every DP rank holds alike: all of them without expert parallelism, all
    but the MoE experts with it (those are summed over their replicas instead)."""
    experts = {id(p) for block in model.blocks if ep > 1 and block.moe is not None
               for p in block.moe.experts.parameters()}
    return [p for p in model.parameters() if id(p) not in experts]


def attach_grad_bucket(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """One contiguous gradient buffer; each ``p.grad`` becomes a view into it, so the backward
    pass accumulates straight into the bucket and the DP sync is one in-place all-reduce with
    no flatten or copy-back (Megatron-LM's contiguous grad buffer,
    ``megatron/core/distributed/param_and_grad_buffer.py``). Zero it in place
    (``zero_grad(set_to_none=False)``) to keep the views."""
    bucket = torch.zeros(sum(p.numel() for p in params))
    start = 0
    for p in params:
        p.grad = bucket[start:start + p.numel()].view_as(p)
        start += p.numel()
    return bucket


def _sync_grads(model: "Stage", rt, shape: JobShape, bucket: torch.Tensor | None) -> None:
    """Sum gradients over the stage's DP group (losses are already divided by the global token
    count); with EP, each logical expert's gradient is summed over all its replicas. Dense
    gradients live in ``bucket`` (:func:`attach_grad_bucket`): one all-reduce (what DDP and
    Megatron do with their buckets, and what the cost model assumes)."""
    group = rt.groups.get("dp")
    if group is None:
        return
    if rt.plan.config["ep"] > 1:
        _sync_expert_grads(model, shape.num_experts, group)
    if bucket is not None:
        dist.all_reduce(bucket, group=group)


# What this job runs, whatever the plan's options say (``planner check-run`` predicts the job
# with these): plain fp32 and SGD, gradients all-reduced in one bucket after the backward pass
# (no ZeRO, no overlap), no recompute, no sequence parallelism, SDPA attention, no dropout.
IMPLEMENTATION = {"precision": "fp32", "optimizer": "sgd", "zero": 0,
                  "overlap_grad_reduce": False, "overlap_param_gather": False,
                  "tp_comm_overlap": False, "sequence_parallel": False, "recompute": "none",
                  "attention": "flash", "dropout": False, "zero_bubble": False, "seq_slices": 1}


def _write_record(out: str, rt, shape: JobShape, losses: list[float], times: list[float],
                  ranks: list[dict]) -> None:
    """``ranks``: every rank's gathered object (expert events, coordinates, threads, timings)."""
    from planner.run.launch import write_run_record

    ranks = sorted(ranks, key=lambda r: r["rank"])
    events = [{k: r[k] for k in ("rank", "ep", "stage", "events")} for r in ranks]
    timings = [{k: r[k] for k in ("rank", "stage", "coords", "threads", "steps")} for r in ranks]
    step_max = [max(r["steps"][i]["step"] for r in ranks) for i in range(len(times))]
    write_run_record(Path(out), rt.plan,
                     {"shape": shape.__dict__, "losses": losses, "step_times_s": times,
                      "step_times_max_s": step_max, "rank_timings": timings,
                      "expert_events": events, "implementation": IMPLEMENTATION},
                     {"torch": torch.__version__, "backend": dist.get_backend(),
                      "threads": torch.get_num_threads(),
                      "omp_num_threads": os.environ.get("OMP_NUM_THREADS")})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="planner.run.reference_job", description=__doc__.split("\n")[0])
    parser.add_argument("plan")
    parser.add_argument("--out", default=None, help="run record JSON (written by rank 0)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--size", choices=("tiny", "plan"), default="tiny",
                        help="tiny: the --hidden/--seq-len/--micro-batches model (default); "
                             "plan: the plan's model widths and batch")
    tiny = {"micro_batches": 4, "hidden": 32, "seq_len": 16}
    parser.add_argument("--micro-batches", type=int, default=None,
                        help=f"tiny size only (default {tiny['micro_batches']})")
    parser.add_argument("--hidden", type=int, default=None,
                        help=f"tiny size only (default {tiny['hidden']})")
    parser.add_argument("--seq-len", type=int, default=None,
                        help=f"tiny size only (default {tiny['seq_len']})")
    args = parser.parse_args(argv)
    given = {k: getattr(args, k) for k in tiny if getattr(args, k) is not None}
    if args.size == "plan" and given:
        names = ", ".join("--" + k.replace("_", "-") for k in given)
        parser.error(f"{names}: only with --size tiny (with --size plan the plan sets the "
                     "model widths, seq-len and micro-batches)")
    try:
        if args.size == "plan":
            from planner.plan.file import load_plan

            # refused here, before torch.distributed starts
            overrides = plan_shape_fields(load_plan(Path(args.plan)))
        else:
            overrides = {**tiny, **given}
        losses = train(args.plan, {"steps": args.steps, **overrides}, args.out)
    except PlannerError as err:
        sys.exit(f"error: {err}")
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
