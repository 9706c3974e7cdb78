"""Data parallelism of the reference job: one contiguous gradient bucket and the gradient sync
over the stage's DP group (expert gradients summed over their replicas with EP)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from planner.run.reference_job.ep import sync_expert_grads

__all__ = ["attach_grad_bucket", "dense_params", "sync_grads"]


def dense_params(model: nn.Module, ep: int) -> list[nn.Parameter]:
    """The parameters every DP rank holds alike: all of them without expert parallelism, all
    but the MoE experts with it (those are summed over their replicas instead)."""
    experts = {id(p) for block in model.blocks if ep > 1 and block.moe is not None
               for p in block.moe.experts.parameters()}
    return [p for p in model.parameters() if id(p) not in experts]


def attach_grad_bucket(params: list[nn.Parameter]) -> torch.Tensor:
    """One contiguous gradient buffer; each ``p.grad`` becomes a view into it, so the backward
    pass accumulates straight into the bucket and the DP sync is one in-place all-reduce with
    no flatten or copy-back (Megatron-LM's contiguous grad buffer,
    ``megatron/core/distributed/param_and_grad_buffer.py``). Zero it in place
    (``zero_grad(set_to_none=False)``) to keep the views."""
    bucket = torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype,
                         device=params[0].device)
    start = 0
    for p in params:
        p.grad = bucket[start:start + p.numel()].view_as(p)
        start += p.numel()
    return bucket


def sync_grads(model: nn.Module, group, ep: int, num_experts: int,
               bucket: torch.Tensor | None) -> None:
    """Sum gradients over the stage's DP ``group`` (losses are already divided by the global
    token count); with EP (``ep > 1``), each logical expert's gradient is summed over all its
    replicas. Dense gradients live in ``bucket`` (:func:`attach_grad_bucket`): one all-reduce
    (what DDP and Megatron do with their buckets, and what the cost model assumes)."""
    if group is None:
        return
    if ep > 1:
        sync_expert_grads(model, num_experts, group)
    if bucket is not None:
        dist.all_reduce(bucket, group=group)
