"""Expert parallelism of the reference job: dispatch by the plan's placement and real-time
quotas, the autograd-aware uneven all-to-all, and the expert-gradient sum over replicas.

MoE layers hold only their EP rank's slots of the plan's expert placement.
:class:`ExpertDispatch` all-gathers the micro-batch's per-expert counts, computes the
planner's real-time quotas (:func:`planner.run.kernels.expert_quotas`), and all-to-alls
tokens to replicas and back (gloo supports uneven all-to-all). Each logical expert's gradient
is summed over all its replicas (:func:`sync_expert_grads`). Communication is timed as
``ep_comm`` and the dispatch's CPU work as ``quota_solve`` on the caller's
:class:`~planner.run.reference_job.timers.Timers`.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from planner.run.kernels import expert_quotas
from planner.run.reference_job.model import MoE
from planner.run.reference_job.timers import Timers

__all__ = ["ExpertDispatch", "dispatch_bookkeeping", "grouping", "replica_ranges",
           "sync_expert_grads"]


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


def grouping(received: np.ndarray) -> np.ndarray:
    """Order that groups the rows an all-to-all delivered by local slot: ``received[src, i]``
    rows came from source rank ``src`` for slot ``i``, each source's block in slot order.
    Returns row indices, slot 0's rows first (sources in rank order), then slot 1's, ..."""
    sources, slots = received.shape
    block = np.concatenate([[0], np.cumsum(received.sum(1))])[:-1]  # first row of each source
    within = np.concatenate([np.zeros((sources, 1), dtype=np.int64),
                             np.cumsum(received, axis=1)[:, :-1]], axis=1)
    starts = block[:, None] + within  # first row of (source, slot)
    parts = [np.arange(starts[src, i], starts[src, i] + received[src, i])
             for i in range(slots) for src in range(sources)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def my_slots(experts: np.ndarray, counts: np.ndarray, quota: np.ndarray, phy2log: np.ndarray,
             me: int) -> np.ndarray:
    """Physical slot of each of EP rank ``me``'s (token, expert) assignments ``experts``."""
    out = np.empty(experts.shape[0], dtype=np.int64)
    for e in np.unique(experts):
        reps = np.flatnonzero(phy2log == e)
        bounds = np.cumsum(quota[reps])
        mine = np.flatnonzero(experts == e)
        pos = counts[:me, e].sum() + np.arange(mine.shape[0])
        out[mine] = reps[np.searchsorted(bounds, pos, side="right")]
    return out


def dispatch_bookkeeping(counts: np.ndarray, experts: np.ndarray, phy2log: np.ndarray,
                         slots_per_gpu: int, ep: int, me: int) -> tuple:
    """The host-side work of one dispatch on EP rank ``me`` (timed as ``quota_solve``; what
    ``planner calibrate`` times on a grid of expert counts, ``dispatch_cases``): from the
    all-gathered ``counts[rank, expert]`` and this rank's assignments ``experts``, the quotas
    (:func:`planner.run.kernels.expert_quotas`), the dispatch matrix (:func:`replica_ranges`),
    each assignment's slot, and the all-to-all's splits. Returns (send order of the
    assignments, send splits, receive splits, rows received per [source, local slot], the
    grouping of received rows by local slot, the matrix)."""
    S = slots_per_gpu
    quota = expert_quotas(counts.sum(0), phy2log, S, ep)
    matrix = replica_ranges(counts, quota, phy2log)
    slot_of = my_slots(experts, counts, quota, phy2log, me)
    order = np.lexsort((np.arange(slot_of.shape[0]), slot_of))
    mine = range(me * S, (me + 1) * S)
    send_splits = np.bincount(slot_of // S, minlength=ep).tolist()
    recv_splits = [int(matrix[src, mine.start:mine.stop].sum()) for src in range(ep)]
    received = matrix[:, mine.start:mine.stop]  # [source rank, local slot] rows
    return order, send_splits, recv_splits, received, grouping(received), matrix


class ExpertDispatch:
    """Expert-parallel forward of one MoE layer on one rank.

    1. all-gather the per-expert token counts of the EP group (the micro-batch's exact loads);
    2. every rank computes the same integer quotas per physical slot
       (:func:`planner.run.kernels.expert_quotas`, the planner's real-time quota mode) and the
       same dispatch matrix (:func:`replica_ranges`);
    3. all-to-all the tokens to their replicas (autograd-aware), group the received rows by
       local slot (:func:`grouping`; Megatron-Core's permute), run each local expert on its
       contiguous rows, restore the arrival order, all-to-all back, and combine with the
       router's gates.
    Every event is appended to ``log`` (global counts and tokens received per local slot).
    """

    def __init__(self, moe: MoE, layer: int, phy2log: np.ndarray, slots_per_gpu: int,
                 ep_index: int, ep_size: int, group, log: list, timers: Timers) -> None:
        self.moe, self.layer, self.phy2log = moe, layer, phy2log
        self.S, self.me, self.ep, self.group, self.log = slots_per_gpu, ep_index, ep_size, group, log
        self.timers = timers

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        idx, gates = self.moe.route(flat)
        experts = idx.reshape(-1)
        E = self.moe.router.out_features
        local = torch.bincount(experts, minlength=E)
        gathered = [torch.zeros_like(local) for _ in range(self.ep)]
        with self.timers.timed("ep_comm"):
            dist.all_gather(gathered, local, group=self.group)
        with self.timers.timed("quota_solve"):
            counts = torch.stack(gathered).cpu().numpy()
            order, send_splits, recv_splits, received, perm, matrix = dispatch_bookkeeping(
                counts, experts.cpu().numpy(), self.phy2log, self.S, self.ep, self.me)
        mine = range(self.me * self.S, (self.me + 1) * self.S)
        on = flat.device
        tokens = torch.as_tensor(order // self.moe.top_k, device=on)
        recv = _AllToAll.apply(flat[tokens], recv_splits, send_splits, self.group, self.timers)
        # Megatron-Core's permute / unpermute: one gather puts each local slot's rows together,
        # each expert runs on its contiguous rows, one gather puts them back in arrival order
        perm_t = torch.as_tensor(perm, device=on)
        sizes = received.sum(0).tolist()
        chunks = recv[perm_t].split(sizes)
        outs = [self.moe.experts[i](c) for i, c in enumerate(chunks) if sizes[i]]
        grouped = torch.cat(outs) if outs else recv[:0]
        out = grouped[torch.as_tensor(np.argsort(perm, kind="stable"), device=on)]
        back = _AllToAll.apply(out, send_splits, recv_splits, self.group, self.timers)
        weights = gates.reshape(-1)[torch.as_tensor(order, device=on)].unsqueeze(1)
        self.log.append({"layer": self.layer, "global_counts": counts.sum(0).tolist(),
                         "received": {int(p): int(matrix[:, p].sum()) for p in mine}})
        return torch.zeros_like(flat).index_add(0, tokens, back * weights).view_as(x)



class _AllToAll(torch.autograd.Function):
    """Uneven all-to-all of rows (``torch.distributed.nn.functional.all_to_all_single``'s
    arithmetic: backward is the all-to-all with the splits swapped), timed as ``ep_comm``
    in both directions on the ``timers`` it is given."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group, timers):
        ctx.splits, ctx.group, ctx.timers = (out_splits, in_splits), group, timers
        out = x.new_empty(sum(out_splits), x.shape[1])
        with timers.timed("ep_comm"):
            dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty(sum(in_splits), grad.shape[1])
        with ctx.timers.timed("ep_comm"):
            dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits, group=ctx.group)
        return back, None, None, None, None


def sync_expert_grads(model: nn.Module, num_experts: int, group) -> None:
    """Every replica gets its logical expert's total gradient (sum over all replicas) of the
    ``model`` (a :class:`~planner.run.reference_job.model.Stage`). Each MoE layer keeps one
    persistent buffer of every logical expert's gradient (zeroed in place each step, as
    frameworks keep their gradient buffers), all-reduced over the DP ``group``; the replicas'
    gradients are written back in place."""
    for block in model.blocks:
        if block.moe is None:
            continue
        params = [list(ex.parameters()) for ex in block.moe.experts]
        width = sum(p.numel() for p in params[0])
        total = getattr(block.moe, "grad_sum", None)
        if total is None:
            first = params[0][0]
            total = block.moe.grad_sum = torch.zeros(num_experts, width, dtype=first.dtype,
                                                     device=first.device)
        total.zero_()
        for e, ps in zip(block.moe.slots, params):
            start = 0
            for p in ps:
                if p.grad is not None:
                    total[e, start:start + p.numel()] += p.grad.reshape(-1)
                start += p.numel()
        dist.all_reduce(total, group=group)
        for e, ps in zip(block.moe.slots, params):
            flat, start = total[e], 0
            for p in ps:  # a replica that served no token still gets its expert's gradient
                part = flat[start:start + p.numel()].view_as(p)
                if p.grad is None:
                    p.grad = part.clone()
                else:
                    p.grad.copy_(part)
                start += p.numel()
