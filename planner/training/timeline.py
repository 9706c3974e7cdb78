"""Pipeline timelines of a plan: simulate its schedule, hand the result on as plain data.

The per-stage times come from the plan's prediction (one micro-batch, per stage: compute,
recompute and communication, ``prediction.stages``); the event-driven simulator
(:mod:`solvers.pipeline.sim`) orders the forward, backward and (ZB-H1) weight-gradient passes
of every micro-batch by the plan's schedule. Forward is a third of the compute (backward costs
twice the forward: Narayanan et al. 2021, §3.2); recomputation runs in the backward pass.
A SlimPipe plan (k sequence slices) is simulated as ``m k`` balanced slice units in SlimPipe's
order (``solvers.pipeline.slimpipe.slimpipe_orders``: warm-up over all slices of a micro-batch,
backwards in reverse slice order), each a k-th of a micro-batch's time.

:func:`plan_timeline` gives the reports (:mod:`planner.report.timeline`, ``planner explain``)
a :class:`PlanTimeline`: the passes, the bubble and the peak in-flight counts, nothing of the
simulator's types.
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.plan.document import Plan
from solvers.pipeline.closed_form import bubble_closed_form_s
from solvers.pipeline.sim import (PipelineProblem, PipelineResult, op_duration_s, simulate,
                                  simulate_orders)
from solvers.pipeline.slimpipe import slimpipe_orders

__all__ = ["MAX_SIMULATED_MICROBATCHES", "TimelineEvent", "PlanTimeline", "pipeline_problem",
           "simulate_plan", "plan_timeline"]

MAX_SIMULATED_MICROBATCHES = 64


@dataclass(frozen=True)
class TimelineEvent:
    """One pass on one stage: ``kind`` F (forward), B (backward, input gradient for ZB-H1)
    or W (weight gradient), its micro-batch (slice unit for SlimPipe), start and end."""

    stage: int
    kind: str
    microbatch: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class PlanTimeline:
    """A plan's simulated step, plain data for the reports.

    ``simulated_units`` micro-batches were simulated (slice units, ``m k``, for SlimPipe with
    ``seq_slices`` k > 1) of the plan's ``plan_microbatches``; ``closed_form_bubble_s`` is the
    uniform-stage closed form (None where the schedule has none); ``peak_in_flight`` per stage.
    ``replica_shares``: the plan's unequal DP batch shares (() when equal): the simulation is
    one pipeline at the plan's mean count ``plan_microbatches``, not each replica's own.
    """

    schedule: str
    num_stages: int
    num_chunks: int
    seq_slices: int
    simulated_units: int
    plan_microbatches: int
    step_s: float
    bubble_s: float
    closed_form_bubble_s: float | None
    peak_in_flight: tuple[int, ...]
    events: tuple[TimelineEvent, ...]
    replica_shares: tuple[int, ...] = ()


def pipeline_problem(plan: Plan, max_microbatches: int | None = None) -> PipelineProblem:
    """The plan's schedule as a simulator problem, per-chunk times per stage.

    ``max_microbatches`` caps the micro-batches simulated (a multiple of pp is kept), so a
    picture of a 1,024-micro-batch step stays readable; the warm-up and cool-down, where the
    bubble lives, are the same.
    """
    c = plan.config
    v, pp = c["vpp"], (c.get("degrees") or c)["pp"]  # degrees nested from plan schema 2
    forward, backward, wgrad = [], [], []
    for stage in plan.prediction["stages"]:
        f = (stage["total_s"] - stage["recompute_s"] - stage["pp_comm_s"]) / 3
        forward.append(f / v)
        backward.append((stage["total_s"] - stage["pp_comm_s"] - f) / v)
        wgrad.append(stage["weight_grad_s"] / v)
    m = plan.micro_batches
    if max_microbatches is not None and m > max_microbatches:
        m = max(pp, max_microbatches // pp * pp)
    share = sum(wgrad) / sum(backward) if sum(backward) > 0 else 0.0
    p2p = max(s["pp_comm_s"] for s in plan.prediction["stages"]) / 2 if pp > 1 else 0.0
    k = c.get("seq_slices", 1)
    if k > 1:  # SlimPipe: m k slice units of 1/k each, one send per slice unit and direction
        return PipelineProblem(schedule="1f1b", num_stages=pp, num_microbatches=m * k,
                               forward_s=tuple(f / k for f in forward),
                               backward_s=tuple(b / k for b in backward), p2p_s=p2p / k)
    return PipelineProblem(schedule=plan.schedule, num_stages=pp, num_microbatches=m,
                           forward_s=tuple(forward), backward_s=tuple(backward), num_chunks=v,
                           weight_grad_fraction=min(share, 1.0) if plan.schedule == "zb-h1"
                           else 0.5, p2p_s=p2p / v)


def simulate_plan(plan: Plan, max_microbatches: int | None = MAX_SIMULATED_MICROBATCHES
                  ) -> tuple[PipelineProblem, PipelineResult]:
    """The simulator problem of ``plan`` (:func:`pipeline_problem`) and its simulated step."""
    problem = pipeline_problem(plan, max_microbatches)
    k = plan.config.get("seq_slices", 1)
    if k > 1:
        orders = slimpipe_orders(problem.num_stages, problem.num_microbatches // k, k)
        return problem, simulate_orders(orders, lambda s, kind, mb, chunk: op_duration_s(
            problem, s, kind), p2p_s=problem.p2p_s)
    return problem, simulate(problem)


def _closed_form_bubble_s(problem: PipelineProblem) -> float | None:
    try:
        return bubble_closed_form_s(problem)
    except ValueError:  # no closed form for this schedule or shape
        return None


def plan_timeline(plan: Plan, max_microbatches: int | None = MAX_SIMULATED_MICROBATCHES
                  ) -> PlanTimeline:
    """Simulate ``plan``'s pipeline (:func:`simulate_plan`) and return it as plain data."""
    problem, result = simulate_plan(plan, max_microbatches)
    shares = plan.replica_micro_batches()
    events = tuple(TimelineEvent(e.stage, e.kind, e.microbatch, e.start_s, e.end_s)
                   for e in result.events)
    return PlanTimeline(schedule=plan.schedule, num_stages=problem.num_stages,
                        num_chunks=problem.num_chunks,
                        seq_slices=plan.config.get("seq_slices", 1),
                        simulated_units=problem.num_microbatches,
                        plan_microbatches=plan.micro_batches, step_s=result.step_s,
                        bubble_s=result.bubble_s,
                        closed_form_bubble_s=_closed_form_bubble_s(problem),
                        peak_in_flight=tuple(result.peak_in_flight), events=events,
                        replica_shares=shares if len(set(shares)) > 1 else ())
