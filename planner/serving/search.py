"""Search serving deployments: colocated and prefill/decode disaggregated, side by side.

For every layout an instance can take (TP within a node, attention-DP and EP for MoE, PP when
the weights need it) the search evaluates, once, the parts every deployment is made of: the
largest batch whose KV fits, one request's prefill latency and the instance time per request,
and the decode step time at each batch of a geometric grid. Deployments are then priced from
those parts by the closed forms of :mod:`planner.serving.estimate`:

* colocated: per layout and batch, the request rate an instance sustains, lowered until the
  mean TTFT meets its target (M/D/1 prefill queue); kept when TPOT meets its target;
* disaggregated: prefill layouts ranked by the rate per GPU at which TTFT meets its target,
  decode layouts by the rate per GPU at the largest batch whose TPOT meets its target; the
  best few of each are paired and the instance counts split the cluster's GPUs
  (``solvers.serving.ratio``).

Every kept deployment is re-estimated in full (:func:`estimate`) at the rate the search chose,
so what the search ranks is what ``planner serve estimate`` prints for that layout.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from cost_models.model_spec import ModelSpec
from cost_models.parallel import ConfigError
from cost_models.serving.config import PoolLayout, ServingWorkload, check_layout
from cost_models.serving.memory import max_batch_by_memory
from planner.serving.estimate import (
    MAX_UTILISATION, Calibration, Deployment, PoolSpec, PrefillTable, ServingEstimate,
    _decode, _transfer_s, colocated_rate, colocated_ttft, costing, estimate, prefill_pool_ttft,
    prefill_table, slot_wait)
from planner.serving import afd
from planner.serving.sites import Site, sites
from solvers.serving.ratio import best_split, whole_unit_step
from topologies.catalog import GpuSpec
from topologies.cluster import Cluster

BATCHES = (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
# Plans run an instance at no more than this share of the rate it sustains with every decode
# slot full. Up to it the closed-form TTFT (M/D/1 prefill queue + M/G/c slot queue) tracks the
# request-level simulator within ~20% (p90 included); past ~95% the simulator's slot queue
# grows without bound while the closed form still predicts short waits (docs/serving.md).
CAPACITY_HEADROOM = 0.9


@dataclass(frozen=True)
class LayoutParts:
    layout: PoolLayout  # batch 1, workers 1
    max_batch: int
    prefill: PrefillTable
    decode_s: dict[int, float]  # batch per attention rank -> decode step seconds


@dataclass(frozen=True)
class Candidate:
    deployment: Deployment
    estimate: ServingEstimate
    meets_slo: bool


@dataclass(frozen=True)
class SearchResult:
    colocated: tuple[Candidate, ...]  # best first
    disagg: tuple[Candidate, ...]
    pareto: tuple[dict, ...]  # {"mode", "tokens_per_s_per_gpu", "tokens_per_s_per_user", ...}
    layouts_evaluated: int
    total_gpus: int
    afd: tuple[Candidate, ...] = ()
    afd_units: tuple[afd.AfdEstimate, ...] = ()  # the unit of each ``afd`` plan, full batch
    afd_searches: tuple[dict, ...] = ()  # each AFD unit search's counts, bound and gap

    def best(self) -> Candidate | None:
        both = [c for c in (self.colocated[:1] + self.disagg[:1] + self.afd[:1])]
        if not both:
            return None
        return max(both, key=_rank_key)


def _rank_key(c: Candidate) -> tuple:
    e = c.estimate
    return (c.meets_slo, round(e.output_tokens_per_s_per_gpu, 6), -e.gpus,
            c.deployment.mode == "colocated")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def engine_launches(engine: str | None, lay: PoolLayout, gpus_per_node: int) -> bool:
    """Whether ``engine`` can start an instance of ``lay`` on nodes of ``gpus_per_node``
    GPUs. vLLM (the rule ``planner emit vllm`` holds, ``_vllm_layout``): an instance over
    several nodes runs whole DP ranks (``tp * pp`` GPUs) per node, or is one DP rank
    (``--nnodes``); its expert parallelism spans the instance (``ep = tp * dp``) or is off."""
    if engine != "vllm":
        return True
    if lay.ep > 1 and lay.ep != lay.tp * lay.dp:
        return False
    if lay.tp * lay.pp * lay.dp <= gpus_per_node:
        return True
    return gpus_per_node % (lay.tp * lay.pp) == 0 or lay.dp == 1


def layouts(model: ModelSpec, gpus_per_node: int, total_gpus: int,
            engine: str | None = None) -> list[PoolLayout]:
    """Instance layouts worth pricing: TP a divisor of the node (and of the heads), attention
    DP for MoE models (power-of-two multiples up to the cluster), EP over the whole
    instance or pure TP experts, PP up to 8 stages; only those ``engine`` can start
    (:func:`engine_launches`)."""
    out = []
    tps = [t for t in _divisors(gpus_per_node) if model.num_heads % t == 0]
    dps = [1] + ([2 ** i for i in range(1, 12) if 2 ** i <= total_gpus] if model.is_moe else [])
    for pp in (1, 2, 4, 8):
        for tp in tps:
            for dp in dps:
                g = tp * pp * dp
                if g > total_gpus:
                    continue
                eps = [1] if not model.is_moe else sorted({1, tp * dp})
                for ep in eps:
                    lay = PoolLayout(tp=tp, pp=pp, dp=dp, ep=ep)
                    try:
                        check_layout(model, lay)
                    except ConfigError:
                        continue
                    if engine_launches(engine, lay, gpus_per_node):
                        out.append(lay)
    return out


def layout_parts(model, lay, wl, cluster, cal, gpu: GpuSpec, first_rank: int = 0
                 ) -> LayoutParts | None:
    c = costing(model, PoolSpec("decode", gpu.name, lay, first_rank), wl, cluster, cal, gpu)
    cap = max_batch_by_memory(model, lay, wl, gpu.hbm_bytes, c.sprof, c.prof.reserved_bytes)
    if cap < 1:
        return None
    table = prefill_table(c, wl)
    grid = [b for b in BATCHES if b <= cap] + ([cap] if cap not in BATCHES and cap < 1025
                                                else [])
    steps = {b: _decode(c, wl, float(b)).total_s for b in sorted(set(grid))}
    return LayoutParts(lay, cap, table, steps)


def _bisect_rate(ttft, target_s: float | None, top: float, floor_s: float) -> float:
    """Highest rate up to ``top`` whose TTFT meets ``target_s`` (bisection; TTFT grows with the
    rate). Out of reach: a light load (5% of ``top``)."""
    cap = lam = top
    goal = target_s if target_s is not None else 10 * floor_s
    if ttft(lam) <= goal:
        return lam
    lo, hi = 0.0, lam
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ttft(mid) <= goal else (lo, mid)
    return lo if lo > 0 else 0.05 * cap


def _colocated_points(parts: LayoutParts, wl: ServingWorkload):
    """(rate per instance, tpot, ttft, batch) for each batch of the grid."""
    s, out = wl.tokens_per_step, max(wl.osl - 1, 1)
    lay, table = parts.layout, parts.prefill
    tt = wl.ttft_ms / 1e3 if wl.ttft_ms else None
    for b, d in parts.decode_s.items():
        n = b * lay.dp
        cap = colocated_rate(n, s, d, out, table)

        def tpot_at(lam: float, d: float = d) -> float:
            return d / (s * (1 - min(lam * table.per_request_at(lam, d), MAX_UTILISATION)))

        def ttft(lam: float, d: float = d, n: int = n) -> float:
            slot = slot_wait(lam, table.alone_s, tpot_at(lam), out, n, wl.osl_scv)
            return colocated_ttft(table.alone_s, d, lam, table.per_request_at(lam, d), out,
                                  slot, wl.isl_scv).quantile_s(wl.ttft_quantile)

        lam = _bisect_rate(ttft, tt, cap * CAPACITY_HEADROOM, table.alone_s)
        yield lam, tpot_at(lam), ttft(lam), b


OBJECTIVES = ("goodput", "min-gpus", "per-dollar")


def prices(cluster: Cluster) -> dict[str, float | None]:
    """Price per GPU hour of each GPU type (None where the cluster file gives none)."""
    return {site.gpu.name: site.price_per_gpu_hour for site in sites(cluster)}


def cost_per_hour(dep: Deployment, cluster: Cluster) -> float | None:
    """What the deployment's GPUs cost per hour, if the cluster file prices them."""
    price = prices(cluster)
    if any(price[p.gpu] is None for p in dep.pools):
        return None
    return sum(p.layout.gpus * price[p.gpu] for p in dep.pools)


def search(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
           engine: str = "sglang", top_k: int = 3,
           modes: tuple[str, ...] = ("colocated", "disagg"),
           objective: str = "goodput") -> SearchResult:
    """Best deployments of ``model`` on ``cluster`` per mode, best first.

    Every pool runs on the nodes of one GPU type (a :class:`Site`): a colocated pool on one
    site, a disaggregated deployment's prefill and decode pools on the same site or on two.
    ``goodput``: the most output tokens/s per GPU used meeting the targets. ``min-gpus``: the
    fewest GPUs (whole nodes) that serve ``wl.rate_per_s`` within the targets (one GPU type).
    ``per-dollar``: the most output tokens per unit of what the GPUs cost (every node group
    priced). ``cal`` holds a profile for every GPU type of the cluster."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
    if objective == "min-gpus" and wl.rate_per_s is None:
        raise ValueError("objective min-gpus needs a target request rate (rate_per_s)")
    places = sites(cluster)
    if objective == "per-dollar" and any(p.price_per_gpu_hour is None for p in places):
        raise ValueError("objective per-dollar needs price_per_gpu_hour on every node group")
    price = {p: (p.price_per_gpu_hour if objective == "per-dollar" else 1.0) for p in places}
    if objective == "min-gpus" and len(places) > 1:
        raise ValueError("objective min-gpus plans one GPU type; the cluster has "
                         f"{', '.join(p.gpu.name for p in places)}")
    same_tp = same_tp_required(model, engine)
    tpot_t = wl.tpot_ms / 1e3 if wl.tpot_ms else math.inf
    pareto: list[dict] = []
    parts_of = {site: [p for lay in layouts(model, site.gpus_per_node, site.gpus, engine)
                       if (p := layout_parts(model, lay, wl, cluster, cal, site.gpu,
                                             site.first_rank)) is not None]
                for site in places}
    colocated: list[tuple[bool, float, Site, PoolLayout, float]] = []
    if "colocated" in modes:
        for site, all_parts in parts_of.items():
            colocated += _colocated_candidates(site, all_parts, wl, tpot_t, pareto)
    rates = {site: _pool_rates(model, wl, cluster, cal, site, parts, tpot_t, pareto)
             for site, parts in parts_of.items()} if {"disagg", "afd"} & set(modes) else {}
    disagg: list[tuple[float, Deployment, float]] = []
    for pre_site, dec_site in ((a, b) for a in rates for b in rates if "disagg" in modes):
        disagg += _disagg_pairs(pre_site, rates[pre_site][0], dec_site, rates[dec_site][1],
                                wl, same_tp, price[pre_site], price[dec_site])
    disagg.sort(key=lambda x: (-x[0], x[1].gpus))
    layouts_seen = sum(len(p) for p in parts_of.values())
    if objective == "min-gpus":
        site = places[0]
        co_deps, dis_deps = _min_gpu_deployments(
            wl.rate_per_s, [c[:1] + c[2:] for c in colocated], rates.get(site, ([], [])), site,
            same_tp)
        # ranked by GPUs, the key's value (negated), fewest first: priced until no
        # deployment left can enter the top k
        co = _finalise_ranked(model, wl, cluster, cal, engine,
                              [(-d.gpus, d, r) for d, r in co_deps], top_k, _fewest_key)
        dis = _finalise_ranked(model, wl, cluster, cal, engine,
                               [(-d.gpus, d, r) for d, r in dis_deps], top_k, _fewest_key)
        return SearchResult(co, dis, tuple(_pareto_front(pareto)), layouts_seen,
                            cluster.num_gpus)
    # Ranked by the closed form's value, which is the final rank's (the estimate prices each
    # deployment at the closed form's rate); those failing the closed form's TPOT check with
    # every slot busy, which the estimate makes too (``tpot_full_s``), cannot meet the
    # targets and are priced only top_k deep (``_finalise_ranked``)
    colocated.sort(key=lambda x: (-x[1] / price[x[2]], x[3].gpus_per_instance, x[3].tp,
                                  x[3].dp, x[3].batch))
    key = _dollar_key(cluster) if objective == "per-dollar" else None
    per_hour = 3600.0 if objective == "per-dollar" else 1.0  # the keys' units
    co = _finalise_ranked(model, wl, cluster, cal, engine,
                          [(per_hour * value / price[site],
                            Deployment("colocated", (PoolSpec("colocated", site.gpu.name, lay,
                                                              site.first_rank),), engine), rate,
                            tpot_ok) for tpot_ok, value, site, lay, rate in colocated],
                          top_k, key)
    dis = _finalise_ranked(model, wl, cluster, cal, engine,
                           [(per_hour * v, dep, rate) for v, dep, rate in disagg], top_k, key)
    units: tuple[afd.AfdEstimate, ...] = ()
    af: tuple[Candidate, ...] = ()
    stats = []
    if "afd" in modes and model.is_moe:
        by_gpu = {p.gpu.name: price[p] for p in places}
        pairs, unit_of, stats = afd_candidates(model, wl, cluster, cal, rates, places, price,
                                               engine)
        for e in sorted(unit_of.values(), key=lambda e: afd.rank_key(e, by_gpu)):
            pareto.append({"mode": "afd-decode",
                           "tokens_per_s_per_gpu": e.output_tokens_per_s_per_gpu,
                           "tokens_per_s_per_user": 1.0 / e.tpot_s, "layout": e.layout,
                           "batch": e.layout.batch, "gpu": f"{e.attention_gpu}+{e.ffn_gpu}"})
        pairs.sort(key=lambda x: (-x[0], x[1].gpus))
        af = _finalise_ranked(model, wl, cluster, cal, engine,
                              [(per_hour * v, d, r) for v, d, r in pairs], top_k, key)
        # each AFD plan's unit at its full batch, for the verdict and the sensitivity tables
        units = tuple(unit_of[(c.deployment.pool("attention").gpu,
                               c.deployment.pool("ffn").gpu, afd.afd_layout_of(c.deployment))]
                      for c in af)
    return SearchResult(co, dis, tuple(_pareto_front(pareto)), layouts_seen, cluster.num_gpus,
                        af, units, tuple(stats))


def afd_candidates(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
                   rates: dict, places: tuple[Site, ...], price: dict, engine: str,
                   keep=None) -> tuple[list, dict, list[dict]]:
    """(rate per cost, AFD deployment, request rate) of each AFD unit paired with each prefill
    layout on each site, the units keyed by (GPU types, layout), and the unit search's
    counts per prefill site. ``keep`` picks the units and prefill layouts paired
    (:func:`best_per` by default; the tests pass every one)."""
    keep = keep or best_per
    by_gpu = {p.gpu.name: price[p] for p in places}
    pairs: list = []
    unit_of: dict[tuple, afd.AfdEstimate] = {}
    stats: list[dict] = []
    for pre_site, (prefill, _) in rates.items():
        # units leave room for the smallest prefill pool (whole nodes) on its site
        least = min((_whole_nodes(pp_.layout.gpus_per_instance, pre_site)
                     for _, pp_, _ in prefill), default=None)
        if least is None or least >= pre_site.gpus and len(places) == 1:
            continue
        within = tuple(replace(p, gpus=p.gpus - least) if p == pre_site else p
                       for p in places)
        # every unit, not the best few by decode rate: the one that leaves the prefill
        # pool the most room can rate lower per GPU and still make the better plan
        found = afd.search(model, wl, cluster, cal, top_k=None, price=by_gpu,
                           within=tuple(p for p in within if p.gpus > 0), engine=engine)
        units_kept = keep(list(found.best), _unit_size, _unit_rate)
        pairs += _afd_pairs(units_kept, {pre_site: rates[pre_site]}, places, wl, engine,
                            price, keep)
        unit_of.update({(e.attention_gpu, e.ffn_gpu, e.layout): e for e in units_kept})
        stats.append({"prefill_on": pre_site.gpu.name, **found.as_dict()})
    return pairs, unit_of, stats


def _whole_nodes(gpus: int, site: Site) -> int:
    return -(-gpus // site.gpus_per_node) * site.gpus_per_node


def best_per(entries: list, key, rate) -> list:
    """Of ``entries`` (best first), the first with the highest ``rate`` for each ``key``, in
    their order. How many instances of two pools fill the cluster (:func:`best_split`,
    :func:`afd_split`) depends on a layout only through its GPUs (per instance, or per AFD
    unit and GPU type) and the request rate it sustains, and the plan's rate never falls as
    that rate rises; so a layout another of the same size out-rates never makes the better
    plan, and pairing one layout per size finds the same best plan as pairing them all."""
    kept: dict = {}
    for x in entries:
        k = key(x)
        if k not in kept or rate(x) > rate(kept[k]):
            kept[k] = x
    return [x for x in entries if kept[key(x)] is x]


def _unit_size(e: afd.AfdEstimate) -> tuple:
    return (e.attention_gpu, e.ffn_gpu, e.layout.attention_gpus, e.layout.ffn_gpus)


def _unit_rate(e: afd.AfdEstimate) -> float:
    return e.layout.requests / e.step_s


def _pool_size(x: tuple) -> int:
    return x[1].layout.gpus_per_instance


def _pool_size_tp(x: tuple) -> tuple[int, int]:
    return x[1].layout.gpus_per_instance, x[1].layout.tp


def _pool_rate(x: tuple) -> float:
    return x[2]


def _afd_pairs(units, rates: dict, places: tuple[Site, ...], wl: ServingWorkload, engine: str,
               price: dict, keep=None) -> list[tuple[float, Deployment, float]]:
    """Each AFD unit with each prefill layout that no other of its size out-rates
    (:func:`best_per`): how many prefill instances and units (:func:`afd_split`), on the
    sites' GPUs."""
    by_name = {p.gpu.name: p for p in places}
    s, out = wl.tokens_per_step, max(wl.osl - 1, 1)
    found = []
    for e in units:
        att, ffn = by_name[e.attention_gpu], by_name[e.ffn_gpu]
        place = afd.placement(att, ffn, e.layout)
        rd = CAPACITY_HEADROOM * e.layout.requests * s / (e.step_s * out)
        for pre_site, (prefill, _) in rates.items():
            for _, pp_, rp in (keep or best_per)(prefill, _pool_size, _pool_rate):
                split = afd_split(pre_site, pp_.layout.gpus_per_instance, rp, att, ffn,
                                  e.layout, rd, price)
                if split is None:
                    continue
                n_p, n_d, rate, cost = split
                pre = PoolSpec("prefill", pre_site.gpu.name, replace(pp_.layout, workers=n_p),
                               pre_site.first_rank)
                found.append((rate * wl.osl / cost,
                              afd.afd_deployment(pre, place, e.layout, n_d, engine), rate))
    return found


def afd_split(pre: Site, gp: int, rp: float, att: Site, ffn: Site, lay: afd.AfdLayout,
              rd: float, price: dict) -> tuple[int, int, float, float] | None:
    """(prefill instances, AFD units, request rate, cost) with the highest rate per cost,
    ``min(np*rp, nd*rd) / cost``: the prefill, attention and FFN pools each fill whole nodes
    and each site holds what is put on it; ties to the higher rate, then fewer GPUs. Every
    pair of counts is tried."""
    unit_cost = lay.attention_gpus * price[att] + lay.ffn_gpus * price[ffn]
    step_p = whole_unit_step(gp, pre.gpus_per_node)
    step_d = math.lcm(whole_unit_step(lay.attention_gpus, att.gpus_per_node),
                      whole_unit_step(lay.ffn_gpus, ffn.gpus_per_node))
    best = None
    for n_p in range(step_p, pre.gpus // gp + 1, step_p):
        for n_d in range(step_d, att.gpus // lay.attention_gpus + 1, step_d):
            use = {pre.gpu.name: 0, att.gpu.name: 0, ffn.gpu.name: 0}
            use[pre.gpu.name] += n_p * gp
            use[att.gpu.name] += n_d * lay.attention_gpus
            use[ffn.gpu.name] += n_d * lay.ffn_gpus
            if any(use[p.gpu.name] > p.gpus for p in (pre, att, ffn)):
                break
            rate = min(n_p * rp, n_d * rd)
            cost = n_p * gp * price[pre] + n_d * unit_cost
            cand = (rate / cost, rate, -(n_p * gp + n_d * lay.gpus))
            if best is None or cand > best[0]:
                best = (cand, n_p, n_d, rate, cost)
    if best is None:
        return None
    _, n_p, n_d, rate, cost = best
    return n_p, n_d, rate, cost


def _colocated_candidates(site: Site, all_parts: list[LayoutParts], wl: ServingWorkload,
                          tpot_t: float, pareto: list[dict]) -> list[tuple]:
    """(meets TPOT, tokens/s per GPU, site, layout with batch and instances, rate) of every
    layout and batch: instances fill the site."""
    out = []
    for parts in all_parts:
        if site.gpus % parts.layout.gpus_per_instance:
            continue  # instances fill the site's nodes
        inst = site.gpus // parts.layout.gpus_per_instance
        for lam, tpot, ttft, b in _colocated_points(parts, wl):
            per_gpu = lam * wl.osl / parts.layout.gpus_per_instance
            pareto.append({"mode": "colocated", "tokens_per_s_per_gpu": per_gpu,
                           "tokens_per_s_per_user": 1 / tpot, "layout": parts.layout,
                           "batch": b, "gpu": site.gpu.name})
            out.append((tpot <= tpot_t + 1e-12, per_gpu, site,
                        replace(parts.layout, batch=b, workers=inst), lam * inst))
    return out


def same_tp_required(model: ModelSpec, engine: str) -> bool:
    """Engines' rule for the KV transfer: vLLM wants equal TP on both sides; SGLang fails when
    prefill and decode TP differ on non-MLA models (sgl-project/sglang#15674)."""
    return engine == "vllm" or (engine == "sglang" and model.mla is None)


def _pool_rates(model, wl, cluster, cal, site: Site, all_parts, tpot_t, pareto):
    """Per layout on ``site``: the request rate of one prefill instance at which TTFT meets its
    target, and of one decode instance at the largest batch whose TPOT meets its target;
    each list best (per GPU) first."""
    tt = wl.ttft_ms / 1e3 if wl.ttft_ms else None
    s, out = wl.tokens_per_step, max(wl.osl - 1, 1)
    prefill = []  # (requests/s per GPU, parts, requests/s per instance)
    decode = []  # (requests/s per GPU, parts, requests/s per instance, batch)
    for parts in all_parts:
        lay = parts.layout
        spec = PoolSpec("prefill", site.gpu.name, lay, site.first_rank)
        transfer = _transfer_s(model, wl, cluster, cal, spec, spec, site.gpu.name)
        table = parts.prefill

        def ttft(lam: float, table: PrefillTable = table, transfer: float = transfer) -> float:
            return prefill_pool_ttft(table, lam, 1, transfer, wl.isl_scv).quantile_s(
                wl.ttft_quantile)

        rate = _bisect_rate(ttft, tt, MAX_UTILISATION / table.full_per_request_s,
                            table.alone_s)
        prefill.append((rate / lay.gpus_per_instance, parts, rate))
        best, smallest = None, None
        for b, d in parts.decode_s.items():
            rate = CAPACITY_HEADROOM * b * lay.dp * s / (d * out)
            per_gpu = rate * wl.osl / lay.gpus_per_instance
            pareto.append({"mode": "disagg-decode", "tokens_per_s_per_gpu": per_gpu,
                           "tokens_per_s_per_user": s / d, "layout": lay, "batch": b,
                           "gpu": site.gpu.name})
            if d / s <= tpot_t + 1e-12 and (best is None or rate > best[2]):
                best = (rate / lay.gpus_per_instance, b, rate)
            if smallest is None:
                smallest = (rate / lay.gpus_per_instance, b, rate)
        best = best or smallest  # TPOT target out of reach: the fastest batch
        decode.append((best[0], parts, best[2], best[1]))
    key = lambda x: (-x[0], x[1].layout.gpus_per_instance, x[1].layout.tp, x[1].layout.dp)
    return sorted(prefill, key=key), sorted(decode, key=key)


def _disagg_pairs(pre_site: Site, prefill: list, dec_site: Site, decode: list,
                  wl: ServingWorkload, same_tp: bool, price_p: float = 1.0,
                  price_d: float = 1.0, keep=None) -> list[tuple[float, Deployment, float]]:
    """Prefill and decode layouts paired, instance counts splitting whole nodes: one site's
    GPUs between both pools, or each pool its own site; of each pool's layouts of one size
    (and TP, where the engine needs the same TP on both) only the fastest
    (:func:`best_per`), which loses no better plan. Ranked by output tokens/s per GPU,
    weighted by the prices (1: per GPU)."""
    found = []
    shared = pre_site == dec_site
    unit = min(pre_site.gpus_per_node, dec_site.gpus_per_node)
    keep = keep or best_per
    for _, pp_, rp in keep(prefill, _pool_size_tp if same_tp else _pool_size, _pool_rate):
        fitting = [x for x in decode if not same_tp or x[1].layout.tp == pp_.layout.tp]
        for _, dp_, rd, b in keep(fitting, _pool_size, _pool_rate):
            split = best_split(pre_site.gpus, pp_.layout.gpus_per_instance, rp,
                               dp_.layout.gpus_per_instance, rd, unit,
                               None if shared else dec_site.gpus, price_p, price_d)
            if split is None:
                continue
            n_p, n_d, rate = split
            cost = (n_p * pp_.layout.gpus_per_instance * price_p
                    + n_d * dp_.layout.gpus_per_instance * price_d)
            dep = Deployment("disagg", (
                PoolSpec("prefill", pre_site.gpu.name, replace(pp_.layout, workers=n_p),
                         pre_site.first_rank),
                PoolSpec("decode", dec_site.gpu.name, replace(dp_.layout, batch=b,
                                                              workers=n_d),
                         dec_site.first_rank)))
            found.append((rate * wl.osl / cost, dep, rate))
    return found


def _round_up(count: float, step: int) -> int:
    return max(step, math.ceil(count / step - 1e-9) * step)


def _min_gpu_deployments(target: float, colocated: list, rates: tuple[list, list], site: Site,
                         same_tp: bool):
    """Deployments serving ``target`` requests/s with the fewest whole nodes: instances of each
    candidate layout at the rate the search found for it, rounded up to fill nodes."""
    total, per_node, name = site.gpus, site.gpus_per_node, site.gpu.name
    co = []
    for meets_tpot, _, lay, rate in colocated:
        per_instance = rate / lay.workers
        n = _round_up(target / per_instance, whole_unit_step(lay.gpus_per_instance, per_node))
        if meets_tpot and n * lay.gpus_per_instance <= total:
            co.append((n * lay.gpus_per_instance, replace(lay, workers=n)))
    co.sort(key=lambda x: (x[0], x[1].gpus_per_instance, x[1].tp, x[1].dp, x[1].batch))
    dis = []
    prefill, decode = rates
    for _, pp_, rp in prefill:
        n_p = _round_up(target / rp, whole_unit_step(pp_.layout.gpus_per_instance, per_node))
        for _, dp_, rd, b in decode:
            if same_tp and dp_.layout.tp != pp_.layout.tp:
                continue
            n_d = _round_up(target / rd, whole_unit_step(dp_.layout.gpus_per_instance, per_node))
            gpus = n_p * pp_.layout.gpus_per_instance + n_d * dp_.layout.gpus_per_instance
            if gpus <= total:
                dis.append((gpus, Deployment("disagg", (
                    PoolSpec("prefill", name, replace(pp_.layout, workers=n_p),
                             site.first_rank),
                    PoolSpec("decode", name, replace(dp_.layout, batch=b, workers=n_d),
                             site.first_rank)))))
    dis.sort(key=lambda x: (x[0], x[1].pools[0].layout.gpus_per_instance,
                            x[1].pools[1].layout.gpus_per_instance))
    return ([(Deployment("colocated", (PoolSpec("colocated", name, lay, site.first_rank),)),
              target) for _, lay in co], [(dep, target) for _, dep in dis])


def _dollar_key(cluster: Cluster):
    def key(c: Candidate) -> tuple:
        tokens_per_hour = c.estimate.output_tokens_per_s * 3600.0
        return (c.meets_slo, round(tokens_per_hour / cost_per_hour(c.deployment, cluster), 6))
    return key


def _fewest_key(c: Candidate) -> tuple:
    return (c.meets_slo, -c.estimate.gpus, round(c.estimate.output_tokens_per_s_per_gpu, 6))


def _finalise_ranked(model, wl, cluster, cal, engine, ranked, top_k,
                     key=None) -> tuple[Candidate, ...]:
    """The ``top_k`` best of ``ranked`` (value, deployment, request rate[, may meet]), best
    value first, by the full estimate (``key``, default :func:`_rank_key`), pricing only as
    many as it takes: ``value`` is the key's value the deployment reaches if it meets the
    targets (the estimate prices it at that rate; overloaded it reaches less), so once
    ``top_k`` priced deployments meet the targets and the next value is below the ``top_k``-th
    of them, no deployment left can enter. ``may meet`` False: the closed form's check (the
    same the estimate makes, e.g. the colocated TPOT with every slot busy) already fails, so
    only the first ``top_k`` such are priced, to show when nothing meets the targets. Equal to
    pricing them all (tests)."""
    key = key or _rank_key
    gpus = {site.gpu.name: site.gpu for site in sites(cluster)}
    priced: list[Candidate] = []
    meeting: list[float] = []  # the key values of the priced ones that meet, best first
    hopeless = 0  # priced ones the closed form already said cannot meet the targets
    for value, dep, rate, *may_meet in ranked:
        # strictly below the k-th, beyond the keys' rounding (6 decimals) and float noise
        if len(meeting) >= top_k and value < meeting[top_k - 1] - max(
                1e-6, 1e-9 * abs(meeting[top_k - 1])):
            break
        if may_meet and not may_meet[0]:
            if hopeless >= top_k:  # enough of them to show should nothing meet the targets
                continue
            hopeless += 1
        dep = replace(dep, engine=engine)
        est = estimate(model, dep, replace(wl, rate_per_s=rate, concurrency=None), cluster,
                       gpus, cal)
        cand = Candidate(dep, est, est.meets(wl))
        priced.append(cand)
        if cand.meets_slo:
            meeting.append(key(cand)[1])
            meeting.sort(reverse=True)
    priced.sort(key=key, reverse=True)
    return tuple(priced[:top_k])


def _pareto_front(points: list[dict]) -> list[dict]:
    """Points no other point beats on both tokens/s/GPU and tokens/s/user, per mode."""
    front = []
    for mode in sorted({p["mode"] for p in points}):
        pts = sorted((p for p in points if p["mode"] == mode),
                     key=lambda p: (-p["tokens_per_s_per_user"], -p["tokens_per_s_per_gpu"]))
        best = -1.0
        for p in pts:
            if p["tokens_per_s_per_gpu"] > best + 1e-12:
                front.append({"mode": mode, "tokens_per_s_per_gpu": p["tokens_per_s_per_gpu"],
                              "tokens_per_s_per_user": p["tokens_per_s_per_user"],
                              **p["layout"].as_dict(), "batch": p["batch"],
                              "gpu": p["gpu"]})
                best = p["tokens_per_s_per_gpu"]
    return front
