"""Expert placement solvers: replicas and placement, two-slot groups, token quotas, the EPLB-style
baseline.

This package's ``__all__`` is the public surface: import from ``solvers.experts``, not from its
modules (tests of a module's private helpers are the exception). Where each name lives:

* :mod:`~solvers.experts.layout`: the problem and answer types (``ExpertLayout``,
  ``LayerPlacement``) and layout helpers.
* :mod:`~solvers.experts.placement`: ``plan_layer`` / ``plan_layers``, the main entry.
* :mod:`~solvers.experts.dispatch`: the runtime's dispatch rules (even, SGLang static,
  static ratios, real-time quotas) and the split each gives a placement.
* :mod:`~solvers.experts.even`: ``plan_even``, placements for the even split and SGLang's rule.
* :mod:`~solvers.experts.construction`: greedy builders (heavy chain, groups, replication).
* :mod:`~solvers.experts.local_search`: swap and replica-count local searches.
* :mod:`~solvers.experts.scoring`: static loads, even split, worst ratio, drift scenarios,
  the lower bound.
* :mod:`~solvers.experts.exact`: the CP-SAT model and brute force for small instances.
* :mod:`~solvers.experts.migration`: GPU relabelling towards a current placement.
* :mod:`~solvers.experts.groups`: the two-slot partition model and its search.
* :mod:`~solvers.experts.covering`: the two-slot model's covering-LP lower bound.
* :mod:`~solvers.experts.quota`: min-max and locality token quotas (flows).
* :mod:`~solvers.experts.eplb_baseline`: DeepSeek's EPLB as published (comparison only).
"""

from solvers.experts.dispatch import DISPATCH_MODES, dispatch_gpu_loads, dispatch_split, sglang_split
from solvers.experts.even import plan_even, spread_over_nodes
from solvers.experts.construction import chain_placement, greedy_counts, group_placement, replication_placement
from solvers.experts.eplb_baseline import (EplbResult, balanced_packing, rebalance_experts, rebalance_hierarchical,
                                           replicate_experts)
from solvers.experts.exact import MilpResult, brute_force_layer, solve_layer_milp
from solvers.experts.covering import covering_lp_bound
from solvers.experts.groups import group_ratio, groups_of_placement, search_groups, tree_gpus
from solvers.experts.layout import ExpertLayout, LayerPlacement, interleaved_gpu_order, layout_quotas
from solvers.experts.local_search import improve_by_swaps, improve_counts
from solvers.experts.migration import relabel_to_current
from solvers.experts.placement import plan_layer, plan_layers
from solvers.experts.quota import (QuotaSolution, cross_node_tokens, even_split_gpu_loads, locality_quotas,
                                   solve_quotas)
from solvers.experts.scoring import (drift_scenarios, even_split, lp_lower_bound, split_from_quota,
                                     static_gpu_loads, worst_ratio)

__all__ = [
    # layout: types
    "ExpertLayout", "LayerPlacement", "interleaved_gpu_order", "layout_quotas",
    # placement: the main entry
    "plan_layer", "plan_layers",
    # dispatch rules and planning for an engine's own dispatch
    "DISPATCH_MODES", "dispatch_gpu_loads", "dispatch_split", "sglang_split",
    "plan_even", "spread_over_nodes",
    # construction and local search
    "chain_placement", "greedy_counts", "group_placement", "replication_placement",
    "improve_by_swaps", "improve_counts",
    # scoring
    "drift_scenarios", "even_split", "lp_lower_bound", "split_from_quota", "static_gpu_loads",
    "worst_ratio",
    # exact references and migration
    "MilpResult", "brute_force_layer", "solve_layer_milp", "relabel_to_current",
    # two-slot groups
    "covering_lp_bound", "group_ratio", "groups_of_placement", "search_groups", "tree_gpus",
    # quotas
    "QuotaSolution", "cross_node_tokens", "even_split_gpu_loads", "locality_quotas", "solve_quotas",
    # EPLB-style baseline
    "EplbResult", "balanced_packing", "rebalance_experts", "rebalance_hierarchical", "replicate_experts",
]
