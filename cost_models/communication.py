"""Alpha-beta time of collectives over a group of GPUs, from what the group sees.

Bus-bandwidth factors are those of nccl-tests (``doc/PERFORMANCE.md``): for n ranks and a
buffer of S bytes, all-reduce moves 2(n-1)/n * S per rank, all-gather and reduce-scatter
(n-1)/n * S (S = the full, gathered size), all-to-all (n-1)/n * S (S = one rank's send
buffer). Time = latency + bytes / bus bandwidth (Hockney's alpha-beta model).

A ring over members spread across domains (nodes, NVL72 racks) is limited by the slower of
the fast tier and the scale-out tier; the scale-out tier serves a node's ``k`` members through
k NICs in parallel (NCCL builds one ring per NIC), so its bus bandwidth is k times one GPU's
NIC share. Link tiers are data (``topologies.GroupView``); efficiencies are calibration
parameters (``Profile.link_efficiency``). Libraries whose algorithms do not follow the busbw
factors (gloo: its reduce-scatter and all-gather are not bandwidth-optimal rings) get a
fitted factor per collective on the latency and on the bandwidth
(``Profile.op_factors``, 1 for NCCL). On the machine ``planner calibrate`` measured, a group
inside one domain of the measured tier is priced from the measured times by size instead
(:func:`measured_s`): between its latency and bandwidth regimes gloo's time is no alpha-beta
line (a 2-process all-reduce of 256 KiB measured 4.0 ms where the two-regime fit gives 2.1).
"""
from __future__ import annotations

import math
from functools import lru_cache

from cost_models.profile import Profile
from topologies.cluster import GroupView


def arrival_skew_s(segment_s: float, prof: Profile) -> float:
    """What a blocking collective after ``segment_s`` of compute waits beyond its table time
    for the slower rank (``Profile.collective_skew_sqrt_s``: the gap of two ranks' random-walk
    delays grows as the square root of the segment; the tables already hold the skew of their
    ``collective_burst_s`` burst). 0 where the profile measured none.

    Source: OS noise as independent delays accumulated per interval, which a collective
    synchronises (Hoefler, Schneider and Lumsdaine, "Characterizing the Influence of System
    Noise on Large-Scale Applications by Simulation", SC'10); the sum of independent
    jitters over a segment has a spread growing as its square root. The coefficient is
    measured by ``planner calibrate``'s interleaved compute/collective rounds
    (``cost_models.fitting``), not assumed."""
    if prof.collective_skew_sqrt_s <= 0 or segment_s <= 0:
        return 0.0
    return prof.collective_skew_sqrt_s * max(
        0.0, math.sqrt(segment_s) - math.sqrt(prof.collective_burst_s))


def bus_bandwidth(view: GroupView, prof: Profile) -> float:
    """Bytes/s a ring collective over the group sustains per rank (nccl-tests busbw)."""
    rates = []
    if view.intra is not None:
        rates.append(view.intra.bw_bytes_per_s * prof.link_eff(view.intra.name))
    if view.inter is not None:
        rates.append(view.members_per_domain * view.inter.bw_bytes_per_s
                     * prof.link_eff(view.inter.name))
    return min(rates) if rates else math.inf


def _ring_latency_s(view: GroupView, steps_per_member: float) -> float:
    """Latency of a ring: one hop per member, each paid on its tier. A ring pass over p
    members takes p - 1 steps, each paying the link's latency; the ring all-reduce is a
    reduce-scatter pass and an all-gather pass, 2 (p - 1) steps (Patarasuk and Yuan,
    "Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC 69(2),
    2009; ``steps_per_member`` 2); across domains k - 1 hops inside each of the domains and
    one hop out of each on the scale-out tier."""
    intra = view.intra.latency_s if view.intra else 0.0
    inter = view.inter.latency_s if view.inter else 0.0
    k, n_dom = view.members_per_domain, view.num_domains
    return steps_per_member * ((k - 1) * n_dom * intra + n_dom * inter if n_dom > 1
                               else (k - 1) * intra)


def measured_s(view: GroupView, op: str, size_bytes: float, prof: Profile) -> float | None:
    """The calibrated machine's measured time of ``op`` at ``size_bytes`` for this group
    (``Profile.collective_tables``), or None: only for a group inside one domain of the tier
    the table was measured on, with a table for its size. Log-log interpolation between
    measured sizes (collective time is close to a power law between the latency and the
    bandwidth regimes, Hockney's alpha-beta curve); below the smallest size its time (the
    latency floor), above the largest the last two points' slope in bytes (the bandwidth
    regime)."""
    if not prof.collective_tables or view.inter is not None or view.intra is None:
        return None
    rows = prof.collective_tables.get(f"{view.intra.name}:{op}:{view.size}")
    if not rows:
        return None
    rows = sorted(rows)
    if size_bytes <= rows[0][0]:
        return rows[0][1]
    for (b0, t0), (b1, t1) in zip(rows, rows[1:]):
        if size_bytes <= b1:
            w = math.log(size_bytes / b0) / math.log(b1 / b0)
            return math.exp((1 - w) * math.log(t0) + w * math.log(t1))
    (b0, t0), (b1, t1) = rows[-2], rows[-1]
    return t1 + (size_bytes - b1) * max(t1 - t0, 0.0) / (b1 - b0)


def all_reduce_s(view: GroupView, size_bytes: float, prof: Profile) -> float:
    """Ring all-reduce; latency is the smaller of ring and tree (NCCL picks per size).

    The tree's latency is its depth twice (reduce up, broadcast down): NCCL's double binary
    tree spans the nodes at logarithmic depth ("Massively Scale Your Deep Learning Training
    with NCCL 2.4", NVIDIA technical blog, 2019). Inside a domain the formula takes
    log2(k) hops too, where NCCL chains a node's GPUs (k - 1 hops): at NVLink's ~1 us
    latency a few microseconds per all-reduce, only where the tree beats the ring (small
    messages; an estimate, not fitted)."""
    n = view.size
    if n <= 1 or size_bytes <= 0:
        return 0.0
    table = measured_s(view, "all_reduce", size_bytes, prof)
    if table is not None:
        return table
    ring_lat = _ring_latency_s(view, 2.0)
    inter = view.inter.latency_s if view.inter else 0.0
    intra = view.intra.latency_s if view.intra else 0.0
    tree_lat = 2.0 * (math.log2(max(view.num_domains, 1)) * inter + math.log2(
        max(view.members_per_domain, 1)) * intra)
    lat_f, bw_f = prof.op_factors("all_reduce")
    return lat_f * min(ring_lat, tree_lat) + 2.0 * (n - 1) / n * size_bytes / (
        bw_f * bus_bandwidth(view, prof))


def _ring_one_pass_s(view: GroupView, size_bytes: float, prof: Profile, op: str) -> float:
    n = view.size
    if n <= 1 or size_bytes <= 0:
        return 0.0
    table = measured_s(view, op, size_bytes, prof)
    if table is not None:
        return table
    lat_f, bw_f = prof.op_factors(op)
    return lat_f * _ring_latency_s(view, 1.0) + (n - 1) / n * size_bytes / (
        bw_f * bus_bandwidth(view, prof))


def all_gather_s(view: GroupView, size_bytes: float, prof: Profile) -> float:
    """Ring all-gather of a ``size_bytes`` result (each rank holds size/n)."""
    return _ring_one_pass_s(view, size_bytes, prof, "all_gather")


def reduce_scatter_s(view: GroupView, size_bytes: float, prof: Profile) -> float:
    """Ring reduce-scatter of a ``size_bytes`` input (same traffic as all-gather)."""
    return _ring_one_pass_s(view, size_bytes, prof, "reduce_scatter")


def all_to_all_s(view: GroupView, send_bytes: float, prof: Profile) -> float:
    """All-to-all where each rank sends ``send_bytes`` spread evenly over the group.

    Traffic to peers in the same domain uses the fast tier, the rest one GPU's NIC share; the
    two run in parallel, so the slower part decides. NCCL runs an all-to-all as one group of
    point-to-point sends and receives, one per peer (NCCL User Guide, "Point-to-point
    communication", all-to-all example), spread over its p2p channels, so transfers to NVLink
    peers and to network peers proceed at the same time; bytes per rank (n - 1)/n of its
    send buffer (nccl-tests ``src/alltoall.cu``, its bus-bandwidth factor).
    """
    n = view.size
    if n <= 1 or send_bytes <= 0:
        return 0.0
    table = measured_s(view, "all_to_all", send_bytes, prof)
    if table is not None:
        return table
    k = view.members_per_domain
    lat_f, bw_f = prof.op_factors("all_to_all")
    t_intra = t_inter = 0.0
    if view.intra is not None:
        t_intra = (k - 1) / n * send_bytes / (bw_f * view.intra.bw_bytes_per_s * prof.link_eff(
            view.intra.name)) + lat_f * view.intra.latency_s
    if view.inter is not None:
        t_inter = (n - k) / n * send_bytes / (bw_f * view.inter.bw_bytes_per_s * prof.link_eff(
            view.inter.name)) + lat_f * view.inter.latency_s
    return max(t_intra, t_inter)


def _none_drawn(total: float, held: float, k: int) -> float:
    """Chance that ``k`` draws without replacement from ``total`` miss all ``held`` of them:
    C(total - held, k) / C(total, k), as a product."""
    miss = 1.0
    for i in range(k):
        miss *= max(0.0, (total - held - i) / (total - i))
    return miss


def distinct_groups_hit(num_experts: int, top_k: int, groups: int, router_groups: int = 1,
                        router_group_topk: int = 1) -> float:
    """Expected number of ``groups`` (consecutive slices of the ``num_experts`` experts: GPUs,
    or the nodes of an EP group; expert x in slice ``x * groups // num_experts``, so uneven
    counts give slices of whole experts) that one token's ``top_k`` distinct experts fall in,
    routing uniform (the force-balanced load the published MoE runs use): the sum over the
    slices of ``1 - C(E - c_s, k) / C(E, k)``, the hypergeometric chance that a slice of c_s
    experts holds one of the k.

    With group-limited routing (``MoESpec.router_groups`` G, ``router_group_topk`` t;
    DeepSeek-V3 report, sec. 2.1.2: each token's experts on at most 4 nodes) the token first
    picks t of the G consecutive expert groups and then its k experts among theirs. Megatron's
    force-balanced router does the same on random scores (``moe_router_force_load_balancing``
    draws the logits, then ``group_limited_topk``), so both picks are uniform: a slice holding
    m_j experts of router group j is missed with probability the sum over the sets T of its
    groups that were picked of P(T) * C(t E/G - sum_T m_j, k) / C(t E/G, k)."""
    e, k, g = num_experts, top_k, max(1, groups)
    if k <= 0 or e <= 0:
        return 0.0
    if router_groups <= 1:
        return sum(1.0 - _none_drawn(e, c, k) for c in _slice_sizes(e, g))
    return _limited_hit(e, k, g, router_groups, router_group_topk)


def _slice_sizes(e: int, g: int) -> list[int]:
    """Experts in each of ``g`` consecutive slices of ``e``: x in slice ``x * g // e``."""
    edges = [-(-s * e // g) for s in range(g + 1)]
    return [edges[s + 1] - edges[s] for s in range(g)]


@lru_cache(maxsize=256)
def _limited_hit(e: int, k: int, g: int, big_g: int, t: int) -> float:
    """:func:`distinct_groups_hit` under group-limited routing, slice by slice (slices and
    router groups both consecutive; a slice may straddle groups when neither count divides the
    other). A slice holds whole router groups and at most two partial ones at its edges, and a
    picked set's chance and miss depend only on how many of its whole groups and which partial
    ones were picked, so the sum runs over those counts (a few terms per slice whatever G)."""
    per_group, pool = e // big_g, t * e // big_g
    total, lo = 0.0, 0
    for size in _slice_sizes(e, g):
        hi = lo + size
        held = [min(hi, (j + 1) * per_group) - max(lo, j * per_group)
                for j in range(lo // per_group, -(-hi // per_group))] if size else []
        whole = sum(1 for h in held if h == per_group)
        parts = [h for h in held if h != per_group]
        miss = 0.0
        for n_whole in range(min(whole, t) + 1):
            for mask in range(1 << len(parts)):  # which partial groups were picked
                picked = [h for i, h in enumerate(parts) if mask >> i & 1]
                n = n_whole + len(picked)
                if n > t:
                    continue
                # this many whole groups and exactly these partial ones of the slice's
                p_sets = (math.comb(whole, n_whole) * math.comb(big_g - len(held), t - n)
                          / math.comb(big_g, t))
                miss += p_sets * _none_drawn(pool, n_whole * per_group + sum(picked), k)
        total += 1.0 - miss
        lo = hi
    return total


def dedup_dispatch_s(view: GroupView, tokens: float, top_k: int, num_experts: int,
                     bytes_per_token: float, prof: Profile, router_groups: int = 1,
                     router_group_topk: int = 1) -> float:
    """One dispatch (or combine) of a flex token dispatcher (Megatron-Core
    ``--moe-token-dispatcher-type flex`` with the DeepEP or HybridEP backend) for ``tokens``
    tokens per rank, each ``bytes_per_token`` wide, top-``top_k`` of ``num_experts`` experts
    spread evenly over the group.

    A token travels once to each distinct GPU holding one of its experts, not once per expert
    (Megatron-Core ``MoEFlexTokenDispatcher``: a routing map of tokens to ranks), and across the
    scale-out network once per distinct destination node, then over NVLink to that node's GPUs
    (DeepEP README, normal kernels: "asymmetric-domain bandwidth forwarding, such as from NVLink
    domain to RDMA domain"; DeepSeek-V3 report, sec. 3.2.2: "sent through IB to the GPUs with
    the same in-node index on their target nodes" and forwarded through NVLink). The network and
    NVLink parts run at once; the slower decides, as in :func:`all_to_all_s`. With every member
    in one domain only the per-GPU deduplication applies. Group-limited routing
    (``router_groups``, ``router_group_topk``) puts a token's experts on fewer GPUs and nodes
    (:func:`distinct_groups_hit`)."""
    n = view.size
    if n <= 1 or tokens <= 0:
        return 0.0
    limit = (router_groups, router_group_topk)
    to_gpus = distinct_groups_hit(num_experts, top_k, n, *limit)  # destination GPUs per token
    if view.inter is None:
        table = measured_s(view, "all_to_all", tokens * to_gpus * bytes_per_token, prof)
        if table is not None:
            return table
    k, domains = view.members_per_domain, view.num_domains
    lat_f, bw_f = prof.op_factors("all_to_all")
    t_intra = t_inter = 0.0
    if view.intra is not None:  # each GPU copy but the one already on the receiving GPU
        forwarded = tokens * to_gpus * (k - 1) / k * bytes_per_token
        t_intra = forwarded / (bw_f * view.intra.bw_bytes_per_s * prof.link_eff(
            view.intra.name)) + lat_f * view.intra.latency_s
    if view.inter is not None:  # once per distinct remote node
        to_nodes = distinct_groups_hit(num_experts, top_k, domains, *limit)
        remote = tokens * to_nodes * (domains - 1) / domains * bytes_per_token
        t_inter = remote / (bw_f * view.inter.bw_bytes_per_s * prof.link_eff(
            view.inter.name)) + lat_f * view.inter.latency_s
    return max(t_intra, t_inter)


def send_recv_s(view: GroupView, size_bytes: float, prof: Profile) -> float:
    """Point-to-point transfer between two group members (pipeline neighbours)."""
    if view.size <= 1 or size_bytes <= 0:
        return 0.0
    table = measured_s(view, "send_recv", size_bytes, prof)
    if table is not None:
        return table
    tier = view.inter if view.inter is not None else view.intra
    lat_f, bw_f = prof.op_factors("send_recv")
    return lat_f * tier.latency_s + size_bytes / (bw_f * tier.bw_bytes_per_s
                                                  * prof.link_eff(tier.name))
