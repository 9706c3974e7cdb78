"""Real-time token quotas: split each expert's tokens over its replicas to minimise the busiest GPU.

The problem (one MoE layer, one micro-batch)
--------------------------------------------
A fixed placement puts physical slot ``p`` on GPU ``gpu_of_slot[p]`` holding logical expert
``phy2log[p]``. Expert ``e`` received ``w_e`` tokens (token, top-k slot assignments). Choose
quotas ``q_p >= 0`` with ``sum_{p: phy2log[p]=e} q_p = w_e`` that minimise
``max_g sum_{p on g} q_p``. This is a transportation problem: source -> expert (capacity
``w_e``) -> GPU (unbounded, where the expert has a replica) -> sink (capacity ``T``). By
Gale's / Hall's theorem ``T`` is feasible iff ``w(S) <= T * |N(S)|`` for every set ``S`` of
experts, with ``N(S)`` the GPUs holding a replica of one of them, so

    T* = max over expert sets S of  w(S) / |N(S)|.

Algorithm: Newton's (Dinkelbach's) method on that ratio. Start from the lower bound
``max(ceil(total / G), max_e ceil(w_e / |N(e)|))``; run a max flow (OR-Tools
``SimpleMaxFlow``, push-relabel, C++) with sink capacities ``T``; if it does not carry
everything, the source side of the min cut is a violated set ``S`` and the next
``T = ceil(w(S) / |N(S)|)`` is strictly larger. It stops at the exact integer optimum (flows
are integral, so with integer token counts the best integer max load is ``ceil(T*)``),
usually after one to three max flows. Quotas are the flows; an expert with several replicas on
one GPU splits that GPU's share evenly over them.

Non-integer loads (fractions, probabilities) are scaled to integers with a resolution of
``2**-30`` of the total before the flow, and the quotas scaled back.

UltraEP (token quotas per replica, re-planned per micro-batch and layer) motivates this mode;
the flow formulation and the algorithm here are ours.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.graph.python import max_flow, min_cost_flow

__all__ = ["QuotaSolution", "cross_node_tokens", "even_split_gpu_loads", "locality_quotas", "solve_quotas"]

_FLOAT_RESOLUTION = 2**30  # non-integer loads: 2**-30 of the total per unit (module docstring)
_UNBOUNDED = 2**62  # an arc capacity no flow reaches, within OR-Tools' int64 capacities
# Integer loads are used as they are while their sum stays below 2**50: exact in float64
# (53-bit mantissa) with room for the flow's int64 arithmetic.
_EXACT_INTEGER_SUM = 2**50


@dataclass(frozen=True)
class QuotaSolution:
    """Quotas for one layer. ``quota``: tokens per physical slot ``[P]``; ``gpu_load``: ``[G]``.

    ``max_load`` is the busiest GPU; ``lower_bound`` the exact optimum of the continuous
    problem (``w(S*)/|N(S*)|`` of the binding set), so ``max_load - lower_bound`` is below one
    token for integer loads. ``max_flows`` counts the max-flow solves.
    """

    quota: np.ndarray
    gpu_load: np.ndarray
    max_load: float
    lower_bound: float
    max_flows: int
    binding_gpus: tuple[int, ...] = ()


def _scale(loads: np.ndarray) -> tuple[np.ndarray, float]:
    """Integer loads and the factor that turned ``loads`` into them."""
    if np.all(loads == np.round(loads)) and loads.sum() < _EXACT_INTEGER_SUM:
        return loads.astype(np.int64), 1.0
    total = float(loads.sum())
    factor = _FLOAT_RESOLUTION / total if total > 0 else 1.0
    return np.round(loads * factor).astype(np.int64), factor


def _edges(phy2log: np.ndarray, gpu_of_slot: np.ndarray, num_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (expert, gpu) pairs of a placement, sorted, and the slot count of each."""
    keys = phy2log.astype(np.int64) * num_gpus + gpu_of_slot.astype(np.int64)
    uniq, counts = np.unique(keys, return_counts=True)
    return uniq, counts


def solve_quotas(
    loads: np.ndarray, phy2log: np.ndarray, gpu_of_slot: np.ndarray, num_gpus: int
) -> QuotaSolution:
    """Min-max token quotas for one layer (see the module docstring).

    ``loads``: ``[E]`` tokens per logical expert; ``phy2log``, ``gpu_of_slot``: ``[P]``.
    Every expert with load must have a replica (``ValueError`` otherwise).
    """
    loads = np.asarray(loads, dtype=np.float64)
    num_experts = loads.shape[0]
    w, factor = _scale(loads)
    keys, slot_counts = _edges(np.asarray(phy2log), np.asarray(gpu_of_slot), num_gpus)
    edge_e, edge_g = keys // num_gpus, keys % num_gpus
    replicas = np.bincount(edge_e, minlength=num_experts)
    if np.any((replicas == 0) & (w > 0)):
        missing = int(np.flatnonzero((replicas == 0) & (w > 0))[0])
        raise ValueError(f"expert {missing} has load but no replica")
    # Step 1: the flow network: source 0, experts 1..E, GPUs E+1..E+G, sink E+G+1.
    sink = num_experts + num_gpus + 1
    flow = max_flow.SimpleMaxFlow()
    tails = np.concatenate([np.zeros(num_experts), 1 + edge_e, 1 + num_experts + np.arange(num_gpus)])
    heads = np.concatenate([1 + np.arange(num_experts), 1 + num_experts + edge_g, np.full(num_gpus, sink)])
    total = int(w.sum())
    lower = max(-(-total // num_gpus), int(np.max(-(-w // np.maximum(replicas, 1)))))
    caps = np.concatenate([w, np.full(edge_e.shape[0], _UNBOUNDED), np.full(num_gpus, lower)])
    arcs = flow.add_arcs_with_capacity(tails.astype(np.int32), heads.astype(np.int32), caps.astype(np.int64))
    sink_arcs = np.asarray(arcs[-num_gpus:], dtype=np.int32)
    edge_arcs = np.asarray(arcs[num_experts:-num_gpus], dtype=np.int32)
    # Step 2: Newton on the binding set until the flow carries every token.
    level, ratio, solves, binding = lower, total / num_gpus, 0, None
    while True:
        flow.solve(0, sink)
        solves += 1
        if flow.optimal_flow() >= total:
            break
        side = np.asarray(flow.get_source_side_min_cut())
        experts = side[(side >= 1) & (side <= num_experts)] - 1
        gpus = side[side > num_experts] - 1 - num_experts
        gpus = gpus[gpus < num_gpus]
        ratio = max(ratio, float(w[experts].sum()) / max(len(gpus), 1))
        binding = gpus
        level = max(level + 1, -(-int(w[experts].sum()) // max(len(gpus), 1)))
        flow.set_arcs_capacity(sink_arcs, np.full(num_gpus, level, dtype=np.int64))
    # Step 3: quotas per slot (a GPU's share of an expert split evenly over its slots there).
    edge_flow = np.asarray(flow.flows(edge_arcs), dtype=np.float64) / factor
    quota = _per_slot(edge_flow, slot_counts, keys, phy2log, gpu_of_slot, num_gpus)
    gpu_load = np.bincount(np.asarray(gpu_of_slot), weights=quota, minlength=num_gpus)
    lower_bound = max(ratio, float(total) / num_gpus, float(np.max(w / np.maximum(replicas, 1))))
    if binding is None:
        binding = np.flatnonzero(gpu_load >= gpu_load.max() * (1 - 1e-12))
    return QuotaSolution(
        quota, gpu_load, float(gpu_load.max()), lower_bound / factor, solves,
        tuple(int(g) for g in np.sort(binding)),
    )


def _per_slot(edge_flow, slot_counts, keys, phy2log, gpu_of_slot, num_gpus) -> np.ndarray:
    slot_keys = np.asarray(phy2log).astype(np.int64) * num_gpus + np.asarray(gpu_of_slot)
    idx = np.searchsorted(keys, slot_keys)
    return edge_flow[idx] / slot_counts[idx]


def even_split_gpu_loads(
    loads: np.ndarray, phy2log: np.ndarray, gpu_of_slot: np.ndarray, num_gpus: int
) -> np.ndarray:
    """GPU loads ``[..., G]`` when every expert's tokens split evenly over its replicas.

    ``loads`` ``[..., E]`` and ``phy2log`` ``[..., P]`` share leading (layer) dimensions.
    """
    loads, phy2log = np.asarray(loads, dtype=np.float64), np.asarray(phy2log)
    out = np.zeros(phy2log.shape[:-1] + (num_gpus,))
    for idx in np.ndindex(*phy2log.shape[:-1]):
        phy = phy2log[idx]
        counts = np.bincount(phy, minlength=loads.shape[-1])
        out[idx] = np.bincount(gpu_of_slot, weights=loads[idx][phy] / counts[phy], minlength=num_gpus)
    return out


def cross_node_tokens(
    loads: np.ndarray, phy2log: np.ndarray, quota: np.ndarray, node_of_slot: np.ndarray, num_nodes: int
) -> float:
    """Tokens that cross nodes when dispatch prefers a replica on the token's own node.

    Model (ours; only per-expert totals are known, not which tokens co-occur): tokens of
    every expert originate evenly on the ``num_nodes`` nodes (attention is data parallel over
    the EP group), and the dispatcher sends a token to a replica on its own node while that
    node's quota for the expert lasts. Expert ``e`` with quota ``Q[e,n]`` on node ``n`` then
    keeps ``sum_n min(w_e / N, Q[e,n])`` tokens local; the rest cross nodes.
    """
    loads = np.asarray(loads, dtype=np.float64)
    num_experts = loads.shape[0]
    per_node = np.zeros((num_experts, num_nodes))
    np.add.at(per_node, (np.asarray(phy2log), np.asarray(node_of_slot)), np.asarray(quota))
    local = np.minimum(per_node, (loads / num_nodes)[:, None]).sum(1)
    return float(loads.sum() - local.sum())


def locality_quotas(
    loads: np.ndarray,
    phy2log: np.ndarray,
    gpu_of_slot: np.ndarray,
    node_of_gpu: np.ndarray,
    max_gpu_load: float,
) -> np.ndarray:
    """Quotas ``[P]`` that minimise cross-node tokens with every GPU at most ``max_gpu_load``.

    A min-cost flow (OR-Tools ``SimpleMinCostFlow``): supply ``w_e / N`` at each (expert,
    origin node) pair, arcs to the GPUs holding the expert (cost 0 on the origin node, 1
    elsewhere), GPU -> sink capacity ``max_gpu_load``. With ``max_gpu_load`` at the min-max
    optimum this is the most local of the best-balanced quotas; raising it trades balance for
    locality (the curve in ``benchmarks/expert_placement.py``). Raises ``ValueError`` when the
    cap is below the optimum.
    """
    loads = np.asarray(loads, dtype=np.float64)
    phy2log, gpu_of_slot = np.asarray(phy2log), np.asarray(gpu_of_slot)
    node_of_gpu = np.asarray(node_of_gpu)
    num_experts, num_gpus = loads.shape[0], node_of_gpu.shape[0]
    num_nodes = int(node_of_gpu.max()) + 1
    w, factor = _scale(loads)
    w, factor = w * num_nodes, factor * num_nodes  # so every node's origin share is whole
    origin = np.repeat((w // num_nodes)[:, None], num_nodes, axis=1)
    keys, slot_counts = _edges(phy2log, gpu_of_slot, num_gpus)
    edge_e, edge_g = keys // num_gpus, keys % num_gpus
    # Nodes: origins (e, n) 0..E*N-1, GPUs E*N..E*N+G-1, sink last.
    base_gpu, sink = num_experts * num_nodes, num_experts * num_nodes + num_gpus
    tails = (edge_e[:, None] * num_nodes + np.arange(num_nodes)[None, :]).ravel()
    heads = np.repeat(base_gpu + edge_g, num_nodes)
    costs = (np.arange(num_nodes)[None, :] != node_of_gpu[edge_g][:, None]).astype(np.int64).ravel()
    cap = int(np.floor(max_gpu_load * factor + 1e-6))  # a cap equal to an integer optimum stays feasible
    flow = min_cost_flow.SimpleMinCostFlow()
    arcs = flow.add_arcs_with_capacity_and_unit_cost(
        np.concatenate([tails, base_gpu + np.arange(num_gpus)]).astype(np.int32),
        np.concatenate([heads, np.full(num_gpus, sink)]).astype(np.int32),
        # Unbounded arcs at 2**60: headroom below int64 for the min-cost flow's sums of capacities.
        np.concatenate([np.full(tails.shape[0], _UNBOUNDED // 4), np.full(num_gpus, cap)]).astype(np.int64),
        np.concatenate([costs, np.zeros(num_gpus, dtype=np.int64)]),
    )
    supplies = np.concatenate([origin.ravel(), np.zeros(num_gpus), [-int(w.sum())]]).astype(np.int64)
    flow.set_nodes_supplies(np.arange(supplies.shape[0], dtype=np.int32), supplies)
    if flow.solve() != flow.OPTIMAL:
        raise ValueError(f"no quotas keep every GPU under {max_gpu_load:g} tokens")
    per_edge = np.asarray(flow.flows(np.asarray(arcs[: tails.shape[0]], dtype=np.int32)), dtype=np.float64)
    edge_flow = per_edge.reshape(-1, num_nodes).sum(1) / factor
    return _per_slot(edge_flow, slot_counts, keys, phy2log, gpu_of_slot, num_gpus)
