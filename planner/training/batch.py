"""Is the global batch too small for the cluster? A note for the plans when it is.

Per step a pipeline pays its fill and drain (the bubble), the exposed part of the
data-parallel gradient sync and the optimizer step once, however many micro-batches it runs;
the micro-batches' own work grows with the batch. With ``m`` micro-batches per pipeline of
``p`` stages the 1F1B/GPipe bubble is ``(p - 1) / (m + p - 1)`` of the step (GPipe, Huang et
al. 2019, section 2.2), and GPipe found it negligible from ``m >= 4 p``, where that share is
just under 1/5. On many GPUs a fixed global batch leaves each pipeline few micro-batches, so
these per-step costs take over the step.

:func:`batch_note` asks the cost model rather than the formula (ZB-H1 and interleaving have
smaller bubbles, the exposed DP time depends on the network): when the best plan spends more
than :data:`PER_STEP_SHARE_MAX` of its step on those per-step parts, it re-estimates the same
configuration (degrees, schedule, micro-batch, layer split, placement) at 2, 4, 8, ... times
the global batch and names the smallest batch that brings the share under that line. A search
at that batch can only do better than the same configuration, so the efficiency quoted is a
lower bound.
"""
from __future__ import annotations

from dataclasses import replace

from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile
from cost_models.training.step import Estimate, TimeBreakdown, estimate
from topologies.cluster import Cluster

__all__ = ["PER_STEP_SHARE_MAX", "MAX_DOUBLINGS", "per_step_share", "batch_note"]

# GPipe's "negligible" bubble at m = 4p: (p - 1) / (5p - 1) < 1/5 (Huang et al. 2019, sec. 2.2)
PER_STEP_SHARE_MAX = 0.2
MAX_DOUBLINGS = 10  # larger batches tried: up to 1024 x the given one


def per_step_share(time: TimeBreakdown) -> float:
    """The share of the step that does not grow with the batch: pipeline bubble, exposed
    data-parallel communication and the optimizer step."""
    return (time.bubble_s + time.dp_comm_s + time.optimizer_s) / time.step_s


def batch_note(model: ModelSpec, cluster: Cluster, best: Estimate, prof: Profile) -> str | None:
    """A line for the plans' notes when the global batch is too small for the cluster (see
    the module docstring); ``None`` when the best plan's per-step share is under the line."""
    share = per_step_share(best.time)
    if share <= PER_STEP_SHARE_MAX:
        return None
    workload, cfg, d = best.workload, best.config, best.config.degrees
    m = cfg.micro_batches(workload)
    head = (f"batch: global batch {workload.global_batch:,} is too small for "
            f"{best.num_gpus:,} GPUs: the best plan (tp {d.tp} pp {d.pp} dp {d.dp}) runs "
            f"{m:,} micro-batch{'es' if m != 1 else ''} per pipeline"
            + (f" (GPipe: >= 4 x pp = {4 * d.pp})" if d.pp > 1 else "")
            + f" and spends {share:.0%} of its step in the pipeline bubble, exposed DP "
            f"communication and the optimizer step")
    larger = _first_batch_under_line(model, cluster, best, prof)
    if larger is None:
        return (f"{head}; no global batch up to {workload.global_batch << MAX_DOUBLINGS:,} "
                f"brings that under {PER_STEP_SHARE_MAX:.0%} with these degrees")
    return (f"{head}; global batch {larger.workload.global_batch:,} would bring that under "
            f"{PER_STEP_SHARE_MAX:.0%} (same degrees: {per_step_share(larger.time):.0%}, "
            f"MFU {best.mfu:.0%} -> {larger.mfu:.0%}), or use fewer GPUs")


def _first_batch_under_line(model: ModelSpec, cluster: Cluster, best: Estimate,
                            prof: Profile) -> Estimate | None:
    """``best``'s configuration at the smallest doubling of its batch whose per-step share is
    at most :data:`PER_STEP_SHARE_MAX`, or None within :data:`MAX_DOUBLINGS` doublings."""
    for k in range(1, MAX_DOUBLINGS + 1):
        workload = replace(best.workload, global_batch=best.workload.global_batch << k)
        try:
            larger = estimate(model, cluster, workload, best.config, prof, best.node_order)
        except ValueError:  # a configuration the larger batch does not admit
            continue
        if per_step_share(larger.time) <= PER_STEP_SHARE_MAX:
            return larger
    return None
