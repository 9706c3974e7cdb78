"""``planner solve``: spec -> search -> placement and layer partition -> validated Plans.

1. :func:`planner.training.search.search` ranks degree tuples with their fastest fitting options.
2. Each of the top candidates gets a placement (``planner.training.placement``: Megatron order or a
   CP-SAT assignment of nodes to stages, whichever is predicted faster) and its best layer
   partition (``planner.training.slicing``).
3. Candidates are re-ranked, turned into Plans with a one-line "why", and validated.

On a cluster whose nodes are on several RDMA networks (NIC classes, islands, TCP-only), every
TP/CP/DP/EP group stays on one network whenever some plan allows it (``contain``, the default;
``planner solve --allow-mixed-networks`` turns it off): the search then admits only degrees
whose stages can each sit on one network, and only contained placements are kept. When none
exists, the choice is by cost as without the rule, and the plans' notes say what stood in
the way (``planner.training.containment``).

What went wrong quietly goes into each plan's ``notes``: a CP-SAT placement that was
infeasible or stopped at its time limit (``planner.training.placement``), and a global batch
too small for the cluster (``planner.training.batch``, judged on the best plan and noted on
every plan). ``progress(phase, done, total)`` is told of each phase: ``searching``,
``placing`` and ``building plans`` (with ``min-gpus``, prefixed by the sub-cluster's nodes).

Objective ``min-gpus`` searches sub-clusters (the first n nodes): halving sizes from small to
large find the first that reaches the target tokens/s, then every smaller count is tried (up
to 64 nodes; beyond, a bisection, noted on the plans), and it returns the plans of the
smallest that reaches it (``_min_gpus``).
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
from cost_models.parallel import Degrees
from cost_models.space import degree_tuples
from planner.training.containment import (containment_cost_note, containment_obstacle,
                                          contained, has_several_networks, network_sizes,
                                          no_contained_note)
from planner.training.placement import Placement, placement
from planner.plan.document import Plan
from planner.training.build import build_plan
from planner.training.search import (SearchResult, SearchSpace, SearchStats, rank_key, search,
                                     space_limits)
from planner.training.shares import shares_note
from planner.plan.validate import validate_plan
from planner.training.why import why_line
from topologies.cluster import Cluster, first_nodes

OBJECTIVES = ("throughput", "min-gpus")

# The search prices each degree tuple in the cluster's listing order; placement (a CP-SAT node
# order) can then make a lower-ranked candidate the fastest, by far on clusters of several RDMA
# networks, where the listing order may put groups on sockets that a placement keeps inside one
# network. There at least this many candidates are placed before the list is cut to top_k, so
# the best plan does not depend on --top-k.
PLACED_AT_LEAST = 10

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
          progress: PhaseProgress | None = None, contain: bool = True) -> SolveResult:
    """The ``top_k`` best plans for ``objective`` (see module docstring); ``contain``: keep
    every TP/CP/DP/EP group on one RDMA network whenever some plan can."""
    if objective == "min-gpus":
        return _min_gpus(model, cluster, workload, prof, space, top_k, target_tokens_per_s,
                         progress, contain)
    return _best_plans(model, cluster, workload, prof, space, top_k, objective, progress, contain)


def _placed(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
            space: SearchSpace, top_k: int, report: PhaseProgress, contain: bool
            ) -> tuple[SearchResult, list[Placement]]:
    """Search (with ``contain``: only degrees that may keep each stage on one network) and
    place the ranked candidates (with ``contain``: only contained placements kept)."""
    sizes = network_sizes(cluster)
    keep = (lambda d: containment_obstacle(cluster, d, sizes) is None) if contain else None
    result = search(model, cluster, workload, prof, space, top_k,
                    lambda done, total: report("searching", done, total), keep)
    placed = []
    for i, est in enumerate(result.ranked):
        report("placing", i, len(result.ranked))
        placed.append(placement(model, cluster, workload, est, prof, contain))
    report("placing", len(placed), len(placed))
    if contain:
        placed = [p for p in placed if contained(cluster, p.estimate)]
    return result, placed


def _candidates(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
                space: SearchSpace, top_k: int, report: PhaseProgress, contain: bool
                ) -> tuple[SearchResult, list[Placement], list[str]]:
    """The placed candidates: contained ones only when ``contain`` and some exist (with a note
    on what the rule costs, when the fastest plan by cost alone is faster); otherwise the
    cost-based choice, with the note that says why no contained plan exists."""
    loose = _placed(model, cluster, workload, prof, space, top_k, report, False)
    if not (contain and has_several_networks(cluster)):
        return (*loose, [])
    try:
        result, placed = _placed(model, cluster, workload, prof, space, top_k, report, True)
        reason = ("CP-SAT found no placement keeping each stage on one network for the "
                  "degrees searched")
    except InfeasibleError:
        sizes = network_sizes(cluster)
        placed, reason = [], ("no degrees that fit memory allow it" if any(
            containment_obstacle(cluster, d, sizes) is None
            for d in _all_tuples(model, cluster, workload, space))
            else "no degrees the options allow cut every network into whole stages")
    if placed:
        best = min(placed, key=lambda p: rank_key(p.estimate)).estimate
        # the fastest plan by cost alone: a contained placement is one too
        fastest = min([*loose[1], *placed], key=lambda p: rank_key(p.estimate)).estimate
        note = containment_cost_note(best, fastest)
        return result, placed, [note] if note else []
    fastest = min(loose[1], key=lambda p: rank_key(p.estimate)).estimate
    return (*loose, [no_contained_note(containment_obstacle(cluster, fastest.config.degrees),
                                       reason)])


def _all_tuples(model: ModelSpec, cluster: Cluster, workload: Workload,
                space: SearchSpace) -> list[Degrees]:
    return [d for d in degree_tuples(space_limits(model, cluster, workload)) if space.admits(d)]


def _best_plans(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
                space: SearchSpace, top_k: int, objective: str,
                progress: PhaseProgress | None, contain: bool = True) -> SolveResult:
    report = progress or _quiet
    placing = max(top_k, PLACED_AT_LEAST) if has_several_networks(cluster) else top_k
    result, placed, containment = _candidates(model, cluster, workload, prof, space, placing,
                                              report, contain)
    placed.sort(key=lambda p: rank_key(p.estimate))
    placed = placed[:top_k]
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
        notes = [*place.notes, *containment, *([shares] if shares else []),
                 *([batch] if batch else [])]
        plan = build_plan(model, cluster, est, prof, objective, why, search_info, notes)
        plans.append(validate_plan(plan, f"plan {i + 1}"))
    report("building plans", len(refined), len(refined))
    return SolveResult(tuple(plans), tuple(refined), result.stats, cluster)


# Node counts up to which min-gpus tries every count below the first ladder size that
# reaches the target (exact); beyond, it bisects between ladder sizes and says so in a note.
MIN_GPUS_SCAN_NODES = 64


def _min_gpus(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
              space: SearchSpace, top_k: int, target: float | None,
              progress: PhaseProgress | None, contain: bool = True) -> SolveResult:
    """The plans of the smallest sub-cluster (the first n nodes) whose best plan reaches
    ``target`` tokens/s. Sizes N // 2^i from small to large find the first that reaches it;
    below it every count is tried, smallest first, when there are at most
    :data:`MIN_GPUS_SCAN_NODES` (exact: a sub-cluster's best throughput can fall as nodes
    are added, since a plan uses every GPU and the global batch must divide over the data
    parallel replicas: Llama-3.1-8B, global batch 96, 8 H100 nodes 539k tokens/s, 9 nodes
    521k); beyond, a bisection between the last ladder size that falls short and the first
    that reaches it, which assumes the best throughput does not fall there, and the plans'
    notes say so."""
    if not target or target <= 0:
        raise InfeasibleError("objective min-gpus needs --target-tokens-per-s > 0")
    best_seen = 0.0
    tried: dict[int, SolveResult | None] = {}

    def reaches(nodes: int) -> bool:
        nonlocal best_seen
        if nodes not in tried:
            sub = first_nodes(cluster, nodes)
            try:
                result = _best_plans(model, sub, workload, prof, space, top_k, "min-gpus",
                                     _prefixed(progress, f"{nodes} node{'s' * (nodes != 1)}: "),
                                     contain)
            except InfeasibleError:
                result = None
            if result is not None:
                total = result.estimates[0].tokens_per_s_per_gpu * sub.num_gpus
                best_seen = max(best_seen, total)
                result = result if total >= target else None
            tried[nodes] = result
        return tried[nodes] is not None

    ladder = sorted({max(1, cluster.num_nodes // 2**i) for i in range(12)} | {cluster.num_nodes})
    low = 0  # the largest ladder size known to fall short (0: none tried)
    for nodes in ladder:
        if reaches(nodes):
            if nodes - 1 <= MIN_GPUS_SCAN_NODES:  # every smaller count, smallest first
                return tried[next(n for n in range(1, nodes + 1) if reaches(n))]
            high = nodes
            while high - low > 1:  # low falls short, high reaches the target
                mid = (low + high) // 2
                low, high = (low, mid) if reaches(mid) else (mid, high)
            return _noted(tried[high], f"min-gpus: {high} nodes found by bisection between "
                          f"{ladder[ladder.index(nodes) - 1] if nodes != ladder[0] else 0} "
                          f"and {nodes} nodes, assuming the best throughput does not fall as "
                          "nodes are added (it can: the global batch must divide over the "
                          "data-parallel replicas); counts up to "
                          f"{MIN_GPUS_SCAN_NODES} nodes are all tried")
        low = nodes
    raise InfeasibleError(f"no sub-cluster reaches {target:,.0f} tokens/s: the whole cluster's "
                          f"best plan gives {best_seen:,.0f} tokens/s")


def _noted(result: SolveResult, note: str) -> SolveResult:
    """``result`` with ``note`` added to every plan's notes."""
    from dataclasses import replace
    return replace(result, plans=tuple(replace(p, notes=[*p.notes, note])
                                       for p in result.plans))


def _quiet(phase: str, done: int, total: int) -> None:
    """No progress to report to."""


def _prefixed(progress: PhaseProgress | None, prefix: str) -> PhaseProgress | None:
    if progress is None:
        return None
    return lambda phase, done, total: progress(prefix + phase, done, total)
