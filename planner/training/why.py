"""One line on why a plan won: what it does well, and what the runner-up pays that it does not.

Formats only; every number comes from the estimates.
"""
from __future__ import annotations

from cost_models.training.step import Estimate
from planner.plan.parts import PART_NAMES, TIER_OF_PART



def degrees_text(e: Estimate) -> str:
    """``tp=8 pp=4 dp=2`` plus the non-default axes and the schedule."""
    c = e.config
    parts = [f"tp={c.degrees.tp}", f"pp={c.degrees.pp}", f"dp={c.degrees.dp}"]
    parts += [f"cp={c.degrees.cp}"] if c.degrees.cp > 1 else []
    parts += [f"ep={c.degrees.ep}", f"etp={c.degrees.expert_tp}"] if c.degrees.ep > 1 else []
    parts += [f"vpp={c.vpp}"] if c.vpp > 1 else []
    parts += [f"slices={c.seq_slices}"] if c.seq_slices > 1 else []
    return " ".join(parts)


def bottleneck(e: Estimate) -> str:
    """The largest part of the step besides compute, with the link tier it runs on."""
    parts = {k: v for k, v in vars(e.time).items() if k != "compute_s"}
    name, value = max(sorted(parts.items()), key=lambda kv: kv[1])
    if value <= 0:
        return "compute"
    tier = e.tiers.get(TIER_OF_PART.get(name, ""), "")
    return PART_NAMES[name] + (f" ({tier})" if tier else "")


def why_line(best: Estimate, runner_up: Estimate | None) -> str:
    """E.g. ``tp=8 pp=4 dp=2, 1f1b: 52% MFU, 12.4 GiB headroom; 6.1% faster than tp=4 ...``."""
    c, gib = best.config, 2**30
    text = (f"{degrees_text(best)} with {c.schedule}, micro-batch {c.micro_batch}, "
            f"{'no' if c.recompute == 'none' else c.recompute} recompute: {best.mfu:.0%} MFU, "
            f"{best.memory.headroom_bytes / gib:.1f} GiB memory headroom")
    if runner_up is None:
        return text + "; the only degree tuple searched that fits"
    gain = runner_up.step_time_s / best.step_time_s - 1
    if gain < 0.001:
        return (f"{text}; within {gain:.2%} of the runner-up ({degrees_text(runner_up)}): "
                f"equivalent under the cost model's accuracy (exact ties go to the plan with "
                f"less model parallelism)")
    diffs = {k: getattr(runner_up.time, k) - getattr(best.time, k) for k in PART_NAMES}
    part, delta = max(sorted(diffs.items()), key=lambda kv: kv[1])
    return (f"{text}; {gain:.1%} faster than the runner-up ({degrees_text(runner_up)}), "
            f"which spends {delta:.2f} s more per step on {PART_NAMES[part]}")
