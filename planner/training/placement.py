"""Device mapping: which nodes serve which pipeline stage.

Megatron-LM fills ranks in the cluster's listing order (tp-cp-ep-dp-pp); on a homogeneous
cluster under a contiguous leaf/spine network that keeps TP inside a node and puts PP across
the slowest links, and this module leaves it alone. When nodes differ (intra-node fabric, NICs,
node size), the stage built from the slowest nodes paces the pipeline; grouping like nodes into
the same stage and letting the partition DP give slow stages fewer layers beats the listing
order. The assignment of nodes to stages is a CP-SAT problem (``solvers.mapping``); each
candidate placement is then judged by the full cost model, and Megatron's order is always a
candidate, so the result is never predicted slower than it.

With ``contain`` (``planner solve``'s default) a stage may not span RDMA networks
(``planner.training.containment``): CP-SAT gets the hard rule, and Megatron's order stays a
candidate only when it keeps every stage on one network or when no contained placement exists.

What CP-SAT did is said, not hidden: when it proves no mapping exists, finds none in its time
limit, or stops at its limit short of a proof of optimality, :func:`placement` returns a line
for the plan's notes (:func:`mapping_note`) along with the estimate. The limit is CP-SAT's
deterministic time (``solvers.mapping.cpsat``), so a time-limited placement is the same on
every run unless the wall-clock backstop fired, which the note then says too.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from cost_models.model_spec import ModelSpec
from cost_models.training.config import Workload
from cost_models.profile import Profile, gemm_efficiency_ratio
from cost_models.training.partition import partition_inputs
from cost_models.training.step import Estimate, estimate
from cost_models.groups import stage_views
from planner.training.containment import contained, off_network_stages
from planner.training.shares import refine_shares
from planner.training.slicing import refine_partition
from solvers.mapping import (InfeasibleMapping, Mapping, MappingProblem, MappingTimeout,
                             solve_mapping)
from topologies.cluster import Cluster
from topologies.spec import cluster_from_dict


def _uniform(cluster: Cluster) -> bool:
    """One kind of node: every placement is a relabelling of the listing order."""
    return len({_group_kind(g) for g in cluster.node_groups}) == 1


def _group_speed(model: ModelSpec, cluster: Cluster, group_index: int, workload: Workload,
                 est: Estimate, prof: Profile, sockets: bool = False,
                 with_sync: bool = False) -> float:
    """1 / per-micro-batch time of a stage's layers when its ranks sit on nodes of one group.

    Judged on a one-stage cluster of that group's nodes (same TP/CP/EP/DP degrees, pp = 1).
    ``sockets``: as in a stage that mixes RDMA networks, whose collectives NCCL runs over its
    socket transport: the group's NICs replaced by its socket NICs as TCP
    (:attr:`topologies.cluster.NodeGroup.socket_nics`). ``with_sync``: 1 / the whole step of
    that one-stage configuration instead, so that the data-parallel gradient sync, which
    crosses the stage's nodes once per step, counts (the network a stage's DP group runs on
    matters through it).
    """
    from planner.plan.document import cluster_to_plain  # the cluster as a spec, to cut one group out

    cfg = replace(est.config, degrees=replace(est.config.degrees, pp=1), vpp=1, stage_layer_counts=None,
                  zero_bubble=False, seq_slices=1)
    spec = cluster_to_plain(cluster)
    group = dict(spec["node_groups"][group_index])
    if sockets:
        socket = cluster.node_groups[group_index].socket_nics
        group["nics"] = [{"count": n.count, "gbps": n.gbps, "transport": "tcp"}
                         for n in socket]
        group.pop("rdma_island", None)
    nodes = -(-cfg.degrees.num_gpus // group["gpus_per_node"])
    group.update(count=nodes, hosts=None)
    spec["node_groups"] = [group]
    spec["network"]["tiers"] = [dict(t, nodes_per_switch=max(nodes, t["nodes_per_switch"]))
                                for t in spec["network"]["tiers"]]
    if cfg.degrees.num_gpus != nodes * group["gpus_per_node"]:
        return 0.0
    one = cluster_from_dict(spec)
    gpu = cluster.node_groups[group_index].gpu.name  # its own GEMM efficiency, as in the estimate
    if gpu != cluster.slowest_gpu.name:
        prof = replace(prof, gemm_efficiency=prof.gemm_efficiency
                       * gemm_efficiency_ratio(gpu, cluster.slowest_gpu.name))
    if with_sync:
        return 1.0 / estimate(model, one, workload, cfg, prof).step_time_s
    inputs = partition_inputs(model, one, workload, cfg, prof, stage_views(one, cfg.degrees))
    return 1.0 / sum(inputs.layer_time_s)


def mapping_problem(model: ModelSpec, cluster: Cluster, workload: Workload, est: Estimate,
                    prof: Profile, contain: bool = False) -> MappingProblem:
    """Nodes as units with the speed of a stage built on them, leaf switches as domains;
    ``contain``: no stage may span RDMA networks."""
    cfg = est.config
    groups = range(len(cluster.node_groups))
    # networks: nodes that can do RDMA with each other share one (TCP-only nodes their own);
    # with several, a stage that mixes them runs its DP sync on sockets, so speeds include it
    nets = {g.rdma_network for g in cluster.node_groups}
    sync = len(nets) > 1
    speeds = [_group_speed(model, cluster, g, workload, est, prof, with_sync=sync) or 1e-9
              for g in groups]
    leaf = cluster.tiers[0].nodes_per_switch if cluster.tiers else cluster.num_nodes
    units = range(cluster.num_nodes)
    of = [cluster.group_of_node(n) for n in units]
    network, socket = None, None
    if sync:
        ids = {net: i for i, net in enumerate(sorted(nets, key=lambda x: x or ("",)))}
        socket_speed = [min(speeds[g], _group_speed(model, cluster, g, workload, est, prof,
                                                    sockets=True, with_sync=True) or 1e-9)
                        for g in groups]
        network = tuple(ids[cluster.node_groups[of[n]].rdma_network] for n in units)
        socket = tuple(socket_speed[of[n]] for n in units)
    return MappingProblem(
        unit_gpus=tuple(cluster.node_groups[of[n]].gpus_per_node for n in units),
        unit_speed=tuple(speeds[of[n]] for n in units),
        unit_domain=tuple(n // leaf for n in units), num_stages=cfg.degrees.pp,
        gpus_per_stage=cfg.degrees.tp * cfg.degrees.cp * cfg.degrees.dp,
        unit_network=network, unit_socket_speed=socket, contain_networks=contain)


@dataclass(frozen=True)
class Placement:
    """A placed estimate and what happened on the way, as lines for the plan's notes."""

    estimate: Estimate
    notes: tuple[str, ...] = ()


def mapping_note(problem: MappingProblem, outcome: Mapping | Exception,
                 listing_used: bool) -> str | None:
    """One line on a CP-SAT mapping that did not end in a proven optimum (None when it did).

    ``outcome``: the mapping, or the :class:`InfeasibleMapping` / :class:`MappingTimeout`
    raised; ``listing_used``: the plan kept the listing order."""
    limit = f"{problem.time_limit_s:g} s limit (deterministic time)"
    if isinstance(outcome, InfeasibleMapping):
        return (f"placement: CP-SAT found no feasible mapping of nodes to the "
                f"{problem.num_stages} stages: {outcome}; listing order used")
    if isinstance(outcome, Exception):
        return f"placement: CP-SAT found no mapping within its {limit}; listing order used"
    wall = "stopped by its wall-clock backstop, so a rerun may place differently"
    if outcome.optimal:  # the tie-break among optima may still have been cut short
        if outcome.wall_clock_stopped:
            return f"placement: CP-SAT's tie-break among optimal placements was {wall}"
        if not outcome.tie_break_complete:
            return (f"placement: optimal, but CP-SAT's tie-break among optimal placements "
                    f"stopped at its {limit}, so not the one its rule picks")
        return None
    kept = "; listing order kept (predicted faster)" if listing_used else ""
    return (f"placement: CP-SAT hit its {limit}; best placement found, gap "
            f"{outcome.gap:.1%}{kept}" + (f"; {wall}" if outcome.wall_clock_stopped else ""))


def best_placement(model: ModelSpec, cluster: Cluster, workload: Workload, est: Estimate,
                   prof: Profile, contain: bool = False) -> Estimate:
    """The estimate of :func:`placement` (its notes dropped)."""
    return placement(model, cluster, workload, est, prof, contain).estimate


def placement(model: ModelSpec, cluster: Cluster, workload: Workload, est: Estimate,
              prof: Profile, contain: bool = False) -> Placement:
    """The fastest of Megatron's order and the CP-SAT placements, each with its best layer
    partition and DP batch shares: an estimate whose ``node_order`` is the placement (None: listing order), and
    the note on CP-SAT's outcome when it was not a proven optimum.

    On a mixed cluster the search's pick may be an interleaved schedule, whose even chunks the
    partition DP cannot reshape; the same degrees with 1F1B and ZB-H1 are placed too, since
    giving slow stages fewer layers can beat interleaving there. ``contain``: placements that
    keep every stage on one RDMA network win over any that do not (module docstring)."""
    if est.config.degrees.pp == 1 or _uniform(cluster):
        return _place(model, cluster, workload, est, prof, contain)
    variants = [est]
    if est.config.vpp > 1:
        for zb in (False, True):
            cfg = replace(est.config, vpp=1, zero_bubble=zb, stage_layer_counts=None)
            other = estimate(model, cluster, workload, cfg, prof)
            if other.memory.fits:
                variants.append(other)
    placed = [_place(model, cluster, workload, v, prof, contain) for v in variants]
    return min(placed, key=lambda p: (contain and not contained(cluster, p.estimate),
                                      round(p.estimate.step_time_s, 12)))


def stage_orders(cluster: Cluster, stage_units) -> list[tuple[tuple[int, ...], ...]]:
    """Orders of the mapping's stages to price: as CP-SAT lists them and reversed, and with
    like stages next to each other: stages on the same RDMA networks (and reversed), and
    stages of the same kind of nodes (GPU, fabric, NICs), their blocks in every order when
    there are at most :data:`KIND_BLOCK_ORDERS_UP_TO` kinds (else first seen first, and
    reversed). The mapping decides which nodes form each stage, not the stages' order, which
    sets the links between neighbouring stages (a send/recv between two stages runs at the
    slower side's NICs, and across networks on sockets, ``stage.pp_link_s``) and which stages
    hold the embedding and the LM head: grouped, the pipeline crosses from one kind to the
    next once instead of at every stage."""
    stages = tuple(tuple(units) for units in stage_units)
    orders = [stages, stages[::-1]]

    def add(order) -> None:
        if order not in orders:
            orders.append(order)

    def blocks(key) -> list[tuple]:
        keys = [key(units) for units in stages]
        kinds = list(dict.fromkeys(keys))  # first seen first
        return [tuple(u for u, k in zip(stages, keys) if k == kind) for kind in kinds]
    by_network = blocks(lambda units: cluster.node_groups[
        cluster.group_of_node(units[0])].rdma_network)
    if len(by_network) > 1:
        order = tuple(u for block in by_network for u in block)
        add(order)
        add(order[::-1])
    by_kind = blocks(lambda units: tuple(sorted(_node_kind(cluster, n) for n in units)))
    if len(by_kind) > 1:
        block_orders = (itertools.permutations(by_kind)
                        if len(by_kind) <= KIND_BLOCK_ORDERS_UP_TO else (by_kind, by_kind[::-1]))
        for arranged in block_orders:
            add(tuple(u for block in arranged for u in block))
    return orders


# Kinds of stages up to which every order of their blocks is priced (3: 6 orders)
KIND_BLOCK_ORDERS_UP_TO = 3


def kind_sorted_stages(cluster: Cluster, pp: int) -> tuple[tuple[int, ...], ...] | None:
    """Stages of like nodes: the nodes sorted by kind (first seen first, then listing order)
    and cut into ``pp`` stages of equal node counts; None when nodes differ in GPU count or
    do not divide into ``pp`` stages. A candidate beside the mapping's: CP-SAT minimises the
    slowest stage, so among mappings whose slowest stage is equal it may mix kinds that the
    layer partition could have balanced, had like nodes shared a stage."""
    n = cluster.num_nodes
    if n % pp or len({g.gpus_per_node for g in cluster.node_groups}) > 1:
        return None
    kinds = [_node_kind(cluster, node) for node in range(n)]
    rank = {k: i for i, k in enumerate(dict.fromkeys(kinds))}
    nodes = sorted(range(n), key=lambda node: (rank[kinds[node]], node))
    size = n // pp
    return tuple(tuple(nodes[s * size:(s + 1) * size]) for s in range(pp))


def _node_kind(cluster: Cluster, node: int) -> tuple:
    """What makes nodes alike for a placement, as a sortable key (:func:`_group_kind`)."""
    return _group_kind(cluster.node_groups[cluster.group_of_node(node)])


def _group_kind(g) -> tuple:
    """A node group's GPU, node size, fabric, NICs, NVLink domain and RDMA network: nodes
    alike in these are interchangeable in a placement (NICs and network as text, to sort)."""
    return (g.gpu.name, g.gpus_per_node, g.fabric, g.intra_bw_bytes_per_s, repr(g.nics),
            g.nvlink_domain_nodes, repr(g.rdma_network))


def _refine(model: ModelSpec, cluster: Cluster, workload: Workload, est: Estimate,
            prof: Profile) -> Estimate:
    """``est`` with its best layer partition, then its DP batch shares (each kept only when
    predicted faster: ``planner.training.slicing``, ``planner.training.shares``)."""
    return refine_shares(model, cluster, workload,
                         refine_partition(model, cluster, workload, est, prof), prof)


def _place(model: ModelSpec, cluster: Cluster, workload: Workload, est: Estimate,
           prof: Profile, contain: bool = False) -> Placement:
    """Megatron's order and the CP-SAT placements of ``est``'s configuration, the fastest."""
    megatron = _refine(model, cluster, workload, est, prof)
    smallest_node = min(g.gpus_per_node for g in cluster.node_groups)
    if (est.config.degrees.pp == 1 or _uniform(cluster)
            or cluster.num_gpus // est.config.degrees.pp < smallest_node):
        return Placement(megatron)  # nothing to place: one stage, equal nodes, or stages
        # smaller than a node (nodes are placed whole, so only the listing order exists)
    problem = mapping_problem(model, cluster, workload, est, prof, contain)
    try:
        mapping = solve_mapping(problem)
    except (InfeasibleMapping, MappingTimeout) as err:
        return Placement(megatron, (mapping_note(problem, err, listing_used=True),))
    candidates = [megatron]
    base = replace(est.config, stage_layer_counts=None)
    groupings = [mapping.stage_units]
    like = kind_sorted_stages(cluster, est.config.degrees.pp)
    if like is not None and not (contain and off_network_stages(
            cluster, est.config.degrees.pp, [n for stage in like for n in stage])):
        groupings.append(like)
    orders: list = []
    for grouping in groupings:
        orders += [o for o in stage_orders(cluster, grouping) if o not in orders]
    for stages in orders:
        node_order = tuple(n for stage in stages for n in stage)
        placed = estimate(model, cluster, workload, base, prof, node_order)
        if placed.memory.fits:
            candidates.append(_refine(model, cluster, workload, placed, prof))
    best = min(candidates, key=lambda e: (contain and not contained(cluster, e),
                                          round(e.step_time_s, 12), e.node_order is not None))
    note = mapping_note(problem, mapping, listing_used=best.node_order is None)
    return Placement(best, (note,) if note else ())
