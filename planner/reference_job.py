"""Reference job: a tiny GPT (optionally MoE) trained for a few steps under a plan (plain torch).

Run under torchrun (``python -m torch.distributed.run --nproc-per-node N -m
planner.reference_job PLAN --out RUN.json``, or ``planner launch PLAN``). Every rank checks the
world against the plan (:func:`planner.runtime.init`, before any collective), builds the plan's
process groups and trains only the layers of its pipeline stage:

* **DP**: ranks split the global batch; gradients are summed over the DP group (each loss is
  already divided by the global token count).
* **PP**: stages exchange activations and gradients with point-to-point sends in the 1F1B
  order (Narayanan et al., SC'21, sec. 2.2: ``p - s - 1`` warm-up forwards on stage ``s``,
  then one forward / one backward, then the remaining backwards).
* **EP**: MoE layers hold only their EP rank's slots of the plan's expert placement.
  :class:`ExpertDispatch` all-gathers the micro-batch's per-expert counts, computes the
  planner's real-time quotas (:func:`solvers.expert_quota.solve_quotas`), and all-to-alls
  tokens to replicas and back (gloo supports uneven all-to-all). Each logical expert's gradient
  is summed over all its replicas.

The model keeps the plan's layer count, MoE layers, expert count, top-k and layer-to-stage split,
but is tiny (``--hidden``, 4 heads, a 128-token vocabulary), so it runs on CPU. Every
parameter is initialised from a seed derived from its layer (and expert) index, so any split
builds the same model. :func:`reference_losses` (one process, whole batch) gives the losses
the parallel run must reproduce.

* **TP** (dense models): Megatron-LM's split, attention by heads and the MLP by columns, with
  the ``f`` / ``g`` all-reduce operators (Shoeybi et al. 2019, sec. 3). Weights are cut from
  the same seeded full layers.

Not implemented yet: context parallelism, tensor parallelism of MoE layers (expert TP), and
interleaved stages (``vpp > 1``). Such a plan is refused with a clear message. ZB-H1 and SlimPipe plans run in plain 1F1B order
(the same arithmetic, another order).

Rank 0 writes a run record:

* the plan's inputs hash and the environment;
* per-step times and losses;
* every rank's expert events (global counts, and tokens received per slot).
"""
from __future__ import annotations

import argparse
import json
import os
import time
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
    """The tiny model and batch: ``micro_batches`` per DP rank of ``micro_batch`` sequences."""

    num_layers: int
    hidden: int = 32
    heads: int = 4
    vocab: int = 128
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

    @property
    def global_batch(self) -> int:
        return self.dp * self.micro_batches * self.micro_batch


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a GELU MLP."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
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
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, 2 * hidden), nn.Linear(2 * hidden, hidden)

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
        self.experts = nn.ModuleList(_seeded(s + 40_000 + 1_000 * layer + e, lambda: Expert(shape.hidden))
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
       (:func:`solvers.expert_quota.solve_quotas`, the planner's real-time quota mode) and the
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
        from solvers.expert_quota import solve_quotas
        from torch.distributed.nn.functional import all_to_all_single

        flat = x.reshape(-1, x.shape[-1])
        idx, gates = self.moe.route(flat)
        experts = idx.reshape(-1)
        E = self.moe.router.out_features
        local = torch.bincount(experts, minlength=E)
        gathered = [torch.zeros_like(local) for _ in range(self.ep)]
        dist.all_gather(gathered, local, group=self.group)
        counts = torch.stack(gathered).numpy()
        gpu_of_slot = np.arange(self.phy2log.shape[0]) // self.S
        quota = np.rint(solve_quotas(counts.sum(0).astype(np.float64), self.phy2log, gpu_of_slot,
                                     self.ep).quota).astype(np.int64)
        matrix = replica_ranges(counts, quota, self.phy2log)
        slot_of = self._my_slots(experts.numpy(), counts, quota)
        order = np.lexsort((np.arange(slot_of.shape[0]), slot_of))
        tokens = torch.as_tensor(order // self.moe.top_k)
        mine = range(self.me * self.S, (self.me + 1) * self.S)
        send_splits = np.bincount(slot_of // self.S, minlength=self.ep).tolist()
        recv_splits = [int(matrix[src, mine.start:mine.stop].sum()) for src in range(self.ep)]
        recv = all_to_all_single(flat.new_empty(sum(recv_splits), flat.shape[1]), flat[tokens],
                                 recv_splits, send_splits, group=self.group)
        labels = np.concatenate([np.repeat(np.arange(self.S), matrix[src, mine.start:mine.stop])
                                 for src in range(self.ep)])
        out = torch.zeros_like(recv)
        for i in np.unique(labels):
            rows = torch.as_tensor(np.flatnonzero(labels == i))
            out = out.index_add(0, rows, self.moe.experts[i](recv[rows]))
        back = all_to_all_single(flat.new_empty(len(order), flat.shape[1]), out,
                                 send_splits, recv_splits, group=self.group)
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
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """Megatron's ``g``: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.clone()
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
        self.blocks = nn.ModuleList(_seeded(s + i, lambda: Block(shape.hidden, shape.heads)) for i in layers)
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
    from planner.runtime import init

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
    pp_ranks = next(g for g in rt.plan.groups["pp"] if view.rank in g)
    losses, times = [], []
    for step in range(shape.steps):
        start = time.perf_counter()
        loss = _step(shape, model, opt, rt, pp_ranks, step)
        times.append(time.perf_counter() - start)
        losses.append(loss)
    events = [None] * view.world_size
    dist.all_gather_object(events, {"rank": view.rank, "ep": view.coords["ep"], "stage": view.stage,
                                    "events": log})
    if out is not None and view.rank == 0:
        _write_record(out, rt, shape, losses, times, events)
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
    from planner.runtime import expert_maps

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


def _step(shape: JobShape, model: Stage, opt, rt, pp_ranks: list[int], step: int) -> float:
    view, pp = rt.view, len(pp_ranks)
    s, d = view.stage, view.coords["dp"]
    x_all, y_all = batch(shape, step)
    per_rank = shape.micro_batches * shape.micro_batch
    x_mine, y_mine = x_all[d * per_rank:(d + 1) * per_rank], y_all[d * per_rank:(d + 1) * per_rank]
    total = y_all.numel()
    act_shape = (shape.micro_batch, shape.seq_len, shape.hidden)
    saved, sends, loss_sum = {}, [], torch.zeros(())
    opt.zero_grad()
    for kind, i in _one_f_one_b(s, pp, shape.micro_batches):
        rows = slice(i * shape.micro_batch, (i + 1) * shape.micro_batch)
        if kind == "F":
            if s == 0:
                inp = x_mine[rows]
            else:
                inp = torch.empty(act_shape)
                dist.recv(inp, src=pp_ranks[s - 1])
                inp.requires_grad_(True)
            outp = model(inp)
            if s == pp - 1:
                outp = _loss(outp, y_mine[rows], total)
                loss_sum = loss_sum + outp.detach()
            else:
                sends.append(dist.isend(outp.detach().contiguous(), dst=pp_ranks[s + 1]))
            saved[i] = (inp, outp)
        else:
            inp, outp = saved.pop(i)
            if s == pp - 1:
                outp.backward()
            else:
                grad = torch.empty(act_shape)
                dist.recv(grad, src=pp_ranks[s + 1])
                outp.backward(grad)
            if s > 0:
                sends.append(dist.isend(inp.grad.contiguous(), dst=pp_ranks[s - 1]))
    for work in sends:
        work.wait()
    _sync_grads(model, rt, shape)
    opt.step()
    # The loss lives on the last stages (each holds its DP share of the global mean): the sum
    # over the world is the global mean loss, and every rank learns it.
    holder = s == pp - 1 and view.coords["tp"] == 0  # TP ranks hold the same loss: count it once
    loss = loss_sum.reshape(1) if holder else torch.zeros(1)
    dist.all_reduce(loss)
    return loss.item()


def _sync_grads(model: "Stage", rt, shape: JobShape) -> None:
    """Sum gradients over the stage's DP group (losses are already divided by the global token
    count); with EP, each logical expert's gradient is summed over all its replicas."""
    group = rt.groups.get("dp")
    if group is None:
        return
    expert_params = set()
    if rt.plan.config["ep"] > 1:
        for block in model.blocks:
            if block.moe is not None:
                expert_params |= {id(p) for p in block.moe.experts.parameters()}
        _sync_expert_grads(model, shape.num_experts, group)
    for p in model.parameters():
        if id(p) not in expert_params:
            if p.grad is None:  # e.g. an expert that got no token here: every rank must reduce
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, group=group)


def _write_record(out: str, rt, shape: JobShape, losses: list[float], times: list[float],
                  events: list) -> None:
    from planner.launch import write_run_record

    write_run_record(Path(out), rt.plan,
                     {"shape": shape.__dict__, "losses": losses, "step_times_s": times,
                      "expert_events": events},
                     {"torch": torch.__version__, "backend": dist.get_backend(),
                      "threads": torch.get_num_threads(),
                      "omp_num_threads": os.environ.get("OMP_NUM_THREADS")})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="planner.reference_job", description=__doc__.split("\n")[0])
    parser.add_argument("plan")
    parser.add_argument("--out", default=None, help="run record JSON (written by rank 0)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=16)
    args = parser.parse_args(argv)
    losses = train(args.plan, {"steps": args.steps, "micro_batches": args.micro_batches,
                               "hidden": args.hidden, "seq_len": args.seq_len}, args.out)
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
