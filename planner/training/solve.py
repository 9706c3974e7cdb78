"""``planner solve``: spec -> search -> placement and layer partition -> validated Plans.

1. :func:`planner.training.search.search` ranks degree tuples with their fastest fitting options.
2. Each of the top candidates gets a placement (``planner.training.placement``: Megatron order or a
   CP-SAT assignment of nodes to stages, whichever is predicted faster) and its best layer
   partition (``planner.training.slicing``).
3. Candidates are re-ranked, turned into Plans with a one-line "why", and validated.

What went wrong quietly goes into each plan's ``notes``: a CP-SAT placement that was
infeasible or stopped at its time limit (``planner.training.placement``), and a global batch
too small for the cluster (``planner.training.batch``, judged on the best plan and noted on
every plan). ``progress(phase, done, total)`` is told of each phase: ``searching``,
``placing`` and ``building plans`` (with ``min-gpus``, prefixed by the sub-cluster's nodes).

Objective ``min-gpus`` searches sub-clusters (the first n nodes) from small to large and
returns the plans of the smallest one whose best plan reaches the target tokens/s.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cost_models.model_spec import ModelSpec
from cost_models.training.config import Workload
from cost_models.profile import Profile
from cost_models.training.step import Estimate
from planner.errors import InfeasibleError
from planner.training.batch import batch_note
from planner.training.placement import placement
from planner.plan.document import Plan
from planner.training.build import build_plan
from planner.training.shares import shares_note
from planner.training.search import SearchSpace, SearchStats, rank_key, search
from planner.plan.validate import validate_plan
from planner.training.why import why_line
from topologies.cluster import Cluster, first_nodes

OBJECTIVES = ("throughput", "min-gpus")

PhaseProgress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class SolveResult:
    plans: tuple[Plan, ...]  # best first, each validated
    estimates: tuple[Estimate, ...]
    stats: SearchStats
    cluster: Cluster  # the (sub-)cluster the plans use


def solve(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
          space: SearchSpace = SearchSpace(), top_k: int = 10, objective: str = "throughput",
          target_tokens_per_s: float | None = None,
          progress: PhaseProgress | None = None) -> SolveResult:
    """The ``top_k`` best plans for ``objective`` (see module docstring)."""
    if objective == "min-gpus":
        return _min_gpus(model, cluster, workload, prof, space, top_k, target_tokens_per_s,
                         progress)
    return _best_plans(model, cluster, workload, prof, space, top_k, objective, progress)


def _best_plans(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
                space: SearchSpace, top_k: int, objective: str,
                progress: PhaseProgress | None) -> SolveResult:
    report = progress or _quiet
    result = search(model, cluster, workload, prof, space, top_k,
                    lambda done, total: report("searching", done, total))
    placed = []
    for i, est in enumerate(result.ranked):
        report("placing", i, len(result.ranked))
        placed.append(placement(model, cluster, workload, est, prof))
    report("placing", len(placed), len(placed))
    placed.sort(key=lambda p: rank_key(p.estimate))
    refined = [p.estimate for p in placed]
    batch = batch_note(model, cluster, refined[0], prof)
    plans = []
    for i, (est, place) in enumerate(zip(refined, placed)):
        report("building plans", i, len(refined))
        runner_up = refined[1] if i == 0 and len(refined) > 1 else None
        why = why_line(est, runner_up) if i == 0 else ""
        search_info = {"position": i + 1, "degree_tuples": result.stats.degree_tuples,
                       "options_estimated": result.stats.options_estimated}
        shares = shares_note(model, cluster, est, prof)
        notes = [*place.notes, *([shares] if shares else []), *([batch] if batch else [])]
        plan = build_plan(model, cluster, est, prof, objective, why, search_info, notes)
        plans.append(validate_plan(plan, f"plan {i + 1}"))
    report("building plans", len(refined), len(refined))
    return SolveResult(tuple(plans), tuple(refined), result.stats, cluster)


def _min_gpus(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
              space: SearchSpace, top_k: int, target: float | None,
              progress: PhaseProgress | None) -> SolveResult:
    if not target or target <= 0:
        raise InfeasibleError("objective min-gpus needs --target-tokens-per-s > 0")
    sizes = sorted({max(1, cluster.num_nodes // 2**i) for i in range(12)} | {cluster.num_nodes})
    best_seen = 0.0
    for nodes in sizes:
        sub = first_nodes(cluster, nodes)
        try:
            result = _best_plans(model, sub, workload, prof, space, top_k, "min-gpus",
                                 _prefixed(progress, f"{nodes} node{'s' * (nodes != 1)}: "))
        except InfeasibleError:
            continue
        total = result.estimates[0].tokens_per_s_per_gpu * sub.num_gpus
        best_seen = max(best_seen, total)
        if total >= target:
            return result
    raise InfeasibleError(f"no sub-cluster reaches {target:,.0f} tokens/s: the whole cluster's "
                          f"best plan gives {best_seen:,.0f} tokens/s")


def _quiet(phase: str, done: int, total: int) -> None:
    """No progress to report to."""


def _prefixed(progress: PhaseProgress | None, prefix: str) -> PhaseProgress | None:
    if progress is None:
        return None
    return lambda phase, done, total: progress(prefix + phase, done, total)
