"""Attention/FFN disaggregated decode units: predict one, and search them exactly.

:func:`evaluate` prices one :class:`~cost_models.serving.afd.AfdLayout` on two GPU types of a
cluster: stage times from :mod:`cost_models.serving.afd`, the step from the ping-pong pipeline
of :mod:`solvers.serving.pingpong` (dense layers as attention-only rounds, then the MoE
layers), plus what a step pays once. TPOT is the step over the tokens a step emits per request.

:func:`search` enumerates every attention GPU type and FFN GPU type of the cluster, attention TP
(divisors of a node that divide the heads), expert GPUs (divisors of the expert count),
attention instances, micro-batch count ``m`` (1..:data:`MAX_MICRO_BATCHES`) and batch per
instance (a multiple of ``m``). For fixed degrees the decode throughput per GPU never falls
as the batch grows (every stage time is a maximum or sum of functions ``a + b * x`` with
``a >= 0``, or concave with value >= 0 at 0, in the micro-batch size, so time per request is
non-increasing), while TPOT and KV memory only grow; so the best batch is the largest that
meets TPOT and memory, found by bisection, and the search is exact over the integer grid
(a test checks it against trying every batch). The attention pool sits on the first nodes of
its GPU type and the FFN pool on the next whole nodes; the link between them is what the
cluster's topology gives those two ranks.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

from cost_models.model_spec import ModelSpec
from cost_models.serving.afd import (AfdLayout, AfdMemory, AfdStages, PoolLink, afd_memory,
                                     afd_stages)
from cost_models.serving.config import PoolLayout, ServingWorkload
from cost_models.parallel import ConfigError
from cost_models.serving.latency import Costing, StepTime
from cost_models.serving.memory import PoolMemory
from planner.serving.estimate import (Calibration, DecodeSide, Deployment, PoolEstimate,
                                      PoolSpec, ServingEstimate, instance_hardware,
                                      prefill_and_decode)
from planner.serving.sites import Site, sites
from solvers.serving.pingpong import pipeline_s, round_s
from topologies.catalog import GpuSpec
from topologies.cluster import Cluster, group_view

MAX_MICRO_BATCHES = 8  # MegaScale-Infer runs 3-4 in practice (sec. 4.2)
STAGE_NAMES = ("attention", "dispatch", "experts", "combine")


@dataclass(frozen=True)
class AfdPlacement:
    """Where the unit runs: each pool's GPU type and first rank."""

    attention_gpu: GpuSpec
    ffn_gpu: GpuSpec
    attention_first_rank: int
    ffn_first_rank: int


@dataclass(frozen=True)
class AfdEstimate:
    layout: AfdLayout
    attention_gpu: str
    ffn_gpu: str
    stages: AfdStages
    memory: AfdMemory
    step_s: float
    tpot_s: float
    output_tokens_per_s: float
    bound: str  # the stage that sets a round's time, or "ring" (too few micro-batches)

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.layout.gpus

    @property
    def fits(self) -> bool:
        return self.layout.batch <= self.memory.max_batch and self.memory.ffn_fits

    def as_dict(self) -> dict:
        lay = self.layout
        return {"attention_gpu": self.attention_gpu, "ffn_gpu": self.ffn_gpu,
                "attention_tp": lay.attention_tp, "attention_instances": lay.attention_ranks,
                "ffn_gpus": lay.ffn_gpus, "micro_batches": lay.micro_batches,
                "batch": lay.batch, "gpus": lay.gpus, "step_s": self.step_s,
                "tpot_s": self.tpot_s, "output_tokens_per_s": self.output_tokens_per_s,
                "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
                "bound": self.bound, "stages": self.stages.as_dict(),
                "memory": self.memory.as_dict(), "fits": self.fits}


def placement(att: Site, ffn: Site, lay: AfdLayout) -> AfdPlacement:
    """Attention on the first GPUs of its site; the FFN pool on the next whole node of the same
    site, or first on its own site. Pools take whole nodes (as every serving pool does), so
    attention-to-expert traffic leaves the node."""
    a0 = att.first_rank
    if ffn.gpu.name != att.gpu.name:
        return AfdPlacement(att.gpu, ffn.gpu, a0, ffn.first_rank)
    return AfdPlacement(att.gpu, ffn.gpu, a0, a0 + _whole(lay.attention_gpus, att))


def _whole(gpus: int, site: Site) -> int:
    """GPUs of the whole nodes ``gpus`` GPUs take."""
    return -(-gpus // site.gpus_per_node) * site.gpus_per_node


def fits_sites(lay: AfdLayout, att: Site, ffn: Site) -> bool:
    """One unit fits its sites, each pool in whole nodes of its own."""
    if lay.attention_gpus % att.gpus_per_node or lay.ffn_gpus % ffn.gpus_per_node:
        return False
    if att.gpu.name != ffn.gpu.name:
        return lay.attention_gpus <= att.gpus and lay.ffn_gpus <= ffn.gpus
    return _whole(lay.attention_gpus, att) + _whole(lay.ffn_gpus, att) <= att.gpus


def engine_allows(lay: AfdLayout, engine: str | None) -> bool:
    """vLLM runs AFD through vllm-project/afd-plugin, whose CUDA connector needs attention
    ranks (GPUs) >= FFN ranks in an exact multiple (``validate_p2p_topology``); other engines
    have no CUDA AFD to constrain it."""
    if engine != "vllm":
        return True
    return lay.attention_gpus >= lay.ffn_gpus and lay.attention_gpus % lay.ffn_gpus == 0


def _link(cluster: Cluster, place: AfdPlacement, cal: Calibration) -> PoolLink:
    n = cluster.num_gpus
    view = group_view(cluster, [place.attention_first_rank % n, place.ffn_first_rank % n])
    tier = view.inter or view.intra
    if tier is None:
        return PoolLink(0.0, 0.0)
    prof = cal.profiles[place.attention_gpu.name]
    group, node, _ = cluster.locate(place.ffn_first_rank % n)
    per_node = cluster.node_groups[group].gpus_per_node
    forward = float("inf")
    if per_node > 1:  # the FFN node's own fabric forwards tokens to its GPUs
        f0 = place.ffn_first_rank % n
        inside = group_view(cluster, [f0, f0 + 1]).intra
        if inside is not None:
            forward = inside.bw_bytes_per_s * cal.profiles[place.ffn_gpu.name].link_eff(
                inside.name)
    return PoolLink(tier.bw_bytes_per_s * prof.link_eff(tier.name), tier.latency_s,
                    per_node, forward)


def costings(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
             place: AfdPlacement, lay: AfdLayout) -> tuple[Costing, Costing, PoolLink]:
    a, f = place.attention_gpu, place.ffn_gpu
    att_layout = PoolLayout(tp=lay.attention_tp)
    att = Costing(model=model, layout=att_layout,
                  hw=instance_hardware(cluster, a, att_layout, place.attention_first_rank),
                  prof=cal.profiles[a.name], sprof=cal.serving[a.name],
                  precision=wl.precision, kv_dtype=wl.kv_dtype)
    ffn = Costing(model=model, layout=PoolLayout(),
                  hw=instance_hardware(cluster, f, PoolLayout(), place.ffn_first_rank),
                  prof=cal.profiles[f.name], sprof=cal.serving[f.name],
                  precision=wl.precision, kv_dtype=wl.kv_dtype,
                  moe_imbalance=wl.moe_imbalance)
    return att, ffn, _link(cluster, place, cal)


def _capacity(cal: Calibration, gpu: GpuSpec) -> float:
    name = gpu.name
    return gpu.hbm_bytes * cal.serving[name].mem_fraction - cal.profiles[name].reserved_bytes


def _context(wl: ServingWorkload) -> tuple[float, float]:
    """(mean context a decode step reads, full context the KV must hold)."""
    return wl.isl + wl.osl / 2.0, float(wl.isl + wl.osl)


def step_of(stages: AfdStages, m: int) -> tuple[float, str]:
    """Decode step time and what binds a MoE round."""
    rounds = [((stages.dense_layer_s, 0.0, 0.0, 0.0), stages.dense_layers),
              (stages.moe_stages, stages.moe_layers)]
    step = pipeline_s(rounds, m) + stages.once_s
    moe = stages.moe_stages
    if round_s(moe, m) > m * max(moe) * (1 + 1e-12):
        return step, "ring"
    return step, STAGE_NAMES[max(range(4), key=lambda i: moe[i])]


@dataclass(frozen=True)
class _Unit:
    """What an AFD layout's price needs besides its batch and micro-batch count."""

    att_gpu: str
    ffn_gpu: str
    att: Costing
    ffn: Costing
    link: PoolLink
    memory: AfdMemory


def _unit(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
          place: AfdPlacement, lay: AfdLayout) -> _Unit:
    c_att, c_ffn, link = costings(model, wl, cluster, cal, place, lay)
    mem = afd_memory(model, lay, wl.precision, wl.kv_dtype, _context(wl)[1],
                     _capacity(cal, place.attention_gpu), _capacity(cal, place.ffn_gpu))
    return _Unit(place.attention_gpu.name, place.ffn_gpu.name, c_att, c_ffn, link, mem)


def _price(unit: _Unit, wl: ServingWorkload, lay: AfdLayout, context: float | None = None
           ) -> AfdEstimate:
    """``lay`` on ``unit``, its requests holding ``context`` KV tokens each (default: the
    workload's mean during decode)."""
    s = wl.tokens_per_step
    stages = afd_stages(unit.att, unit.ffn, lay, unit.link,
                        _context(wl)[0] if context is None else context, 1.0 + wl.mtp_depth)
    step, bound = step_of(stages, lay.micro_batches)
    return AfdEstimate(lay, unit.att_gpu, unit.ffn_gpu, stages, unit.memory, step,
                       step / s, lay.requests * s / step, bound)


def evaluate(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
             att: Site, ffn: Site, lay: AfdLayout) -> AfdEstimate:
    """Predict one AFD unit placed on two sites as the search places it (module docstring)."""
    return evaluate_placed(model, wl, cluster, cal, placement(att, ffn, lay), lay)


def evaluate_placed(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
                    place: AfdPlacement, lay: AfdLayout) -> AfdEstimate:
    return _price(_unit(model, wl, cluster, cal, place, lay), wl, lay)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def attention_tps(model: ModelSpec, site: Site) -> list[int]:
    return [t for t in _divisors(site.gpus_per_node) if model.num_heads % t == 0]


def ffn_counts(model: ModelSpec, site: Site) -> list[int]:
    """Expert GPU counts that hold the experts evenly (no redundant slots) in whole nodes."""
    return [d for d in _divisors(model.moe.num_experts)
            if d <= site.gpus and d % site.gpus_per_node == 0]


@dataclass(frozen=True)
class AfdSearch:
    best: tuple[AfdEstimate, ...]  # best first, at most ``top_k`` (all with top_k None)
    evaluated: int  # layouts priced
    grid: int  # (GPU types, attention TP, instances, FFN GPUs) combinations that fit
    pruned: int  # (degrees) whose upper bound could not beat the top_k found before them
    pruned_bound: float = 0.0  # the largest upper bound among pruned (degrees)

    @property
    def gap(self) -> float:
        """Relative gap between the best found and the best any pruned branch could reach:
        0 when every pruned bound is below the best (always, as pruning requires it)."""
        if not self.best:
            return 0.0
        best = self.best[0].output_tokens_per_s_per_gpu
        return max(0.0, self.pruned_bound - best) / self.pruned_bound if (
            self.pruned_bound > 0) else 0.0

    def as_dict(self) -> dict:
        return {"layouts_priced": self.evaluated, "degree_combinations": self.grid,
                "pruned": self.pruned, "largest_pruned_bound": self.pruned_bound,
                "gap": self.gap}


def _best_batch(price, m: int, most: int, tpot_s: float | None):
    """Largest multiple of ``m`` up to ``most`` whose estimate meets ``tpot_s`` (bisection;
    TPOT grows with the batch), and its estimate; (None, calls) when even ``m`` misses."""
    hi = most // m
    if hi < 1:
        return None, 0
    calls = 1
    top = price(hi * m)
    if tpot_s is None or top.tpot_s <= tpot_s:
        return top, calls
    lo_est = price(m)
    calls += 1
    if lo_est.tpot_s > tpot_s:
        return None, calls
    lo = 1  # meets
    while hi - lo > 1:
        mid = (lo + hi) // 2
        est = price(mid * m)
        calls += 1
        if est.tpot_s <= tpot_s:
            lo, lo_est = mid, est
        else:
            hi = mid
    return lo_est, calls


def search(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
           top_k: int | None = 3, max_batch: int = 4096,
           price: dict[str, float] | None = None, within: tuple[Site, ...] | None = None,
           engine: str | None = None) -> AfdSearch:
    """Every AFD unit the cluster can hold (module docstring), best decode output tokens/s
    per GPU first among those meeting TPOT and memory; with ``price`` (per GPU type) per
    unit of cost instead. ``within``: the sites with the GPUs the units may take (default:
    all of the cluster's). ``engine``: its AFD rules apply (:func:`engine_allows`).
    ``top_k=None``: every layout's unit at its best batch, none pruned (what the whole-plan
    search needs: the unit that leaves the prefill pool the most room is not always the one
    with the best decode rate per GPU)."""
    if not model.is_moe:
        return AfdSearch((), 0, 0, 0)
    found: list[AfdEstimate] = []
    top: list[float] = []  # the top_k values found so far (a min-heap)
    evaluated = grid = pruned = 0
    pruned_bound = 0.0
    tpot = wl.tpot_ms / 1e3 if wl.tpot_ms is not None else None
    all_sites = within if within is not None else sites(cluster)
    for att in all_sites:
        for ffn in all_sites:
            for tp in attention_tps(model, att):
                for n_e in ffn_counts(model, ffn):
                    room = [r for r in range(1, att.gpus // tp + 1)
                            if fits_sites(AfdLayout(tp, r, n_e, 1, 1), att, ffn)  # nodes
                            and engine_allows(AfdLayout(tp, r, n_e, 1, 1), engine)]
                    for ranks in reversed(room):  # big units first: good plans early prune more
                        probe = AfdLayout(tp, ranks, n_e, 1, 1)
                        unit = _unit(model, wl, cluster, cal, placement(att, ffn, probe), probe)
                        if not unit.memory.ffn_fits:
                            break  # the experts need more GPUs than n_e, whatever the ranks
                        grid += 1
                        most = min(max_batch, unit.memory.max_batch)
                        if most < 1:
                            continue
                        bound = _upper_bound(unit, wl, AfdLayout(tp, ranks, n_e, 1, most)
                                             ) * probe.gpus / _cost(probe, att.gpu.name,
                                                                    ffn.gpu.name, price)
                        if top_k is not None and len(top) >= top_k and bound < top[0]:
                            pruned += 1  # cannot enter the top_k: the result is unchanged
                            pruned_bound = max(pruned_bound, bound)
                            continue
                        for m in range(1, MAX_MICRO_BATCHES + 1):

                            def at_batch(b, tp=tp, ranks=ranks, n_e=n_e, m=m, unit=unit):
                                return _price(unit, wl, AfdLayout(tp, ranks, n_e, m, b))
                            est, calls = _best_batch(at_batch, m, most, tpot)
                            evaluated += calls
                            if est is not None:
                                found.append(est)
                                heapq.heappush(top, _value(est, price))
                                if top_k is not None and len(top) > top_k:
                                    heapq.heappop(top)
    found.sort(key=lambda e: rank_key(e, price))
    return AfdSearch(tuple(found[:top_k] if top_k is not None else found), evaluated, grid,
                     pruned, pruned_bound)


def _upper_bound(unit: _Unit, wl: ServingWorkload, lay: AfdLayout) -> float:
    """Output tokens/s per GPU no batch up to ``lay.batch`` and no micro-batch count beats,
    TPOT aside: throughput never falls with the batch (module docstring), and ``m`` rounds of
    ``b/m`` take at least one stage's time for the whole batch (``m T(b/m) >= T(b)`` for every
    stage, each a star-shaped function of its load), so a step is at least the LM head and
    overheads, the dense layers, and the MoE layers' slowest stage, all at the full batch."""
    st = afd_stages(unit.att, unit.ffn, lay, unit.link, _context(wl)[0], 1.0 + wl.mtp_depth)
    step = st.once_s + st.dense_layers * st.dense_layer_s + st.moe_layers * max(st.moe_stages)
    return lay.requests * wl.tokens_per_step / step / lay.gpus


def _cost(lay: AfdLayout, att: str, ffn: str, price: dict[str, float] | None) -> float:
    if price is None:
        return float(lay.gpus)
    return lay.attention_gpus * price[att] + lay.ffn_gpus * price[ffn]


def _value(e: AfdEstimate, price: dict[str, float] | None) -> float:
    """Output tokens/s per GPU, or per unit of cost with ``price``."""
    return e.output_tokens_per_s / _cost(e.layout, e.attention_gpu, e.ffn_gpu, price)


def rank_key(e: AfdEstimate, price: dict[str, float] | None = None) -> tuple:
    lay = e.layout
    return (-_value(e, price), lay.gpus, e.attention_gpu, e.ffn_gpu,
            lay.attention_tp, lay.attention_ranks, lay.ffn_gpus, lay.micro_batches, lay.batch)


def brute_force(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
                max_batch: int, engine: str | None = None,
                price: dict[str, float] | None = None) -> AfdEstimate | None:
    """Every layout and every batch up to ``max_batch``: the reference :func:`search` is
    tested against on small clusters (``price``: per unit of cost, as there)."""
    best = None
    tpot = wl.tpot_ms / 1e3 if wl.tpot_ms is not None else None
    for att in sites(cluster):
        for ffn in sites(cluster):
            for tp in attention_tps(model, att):
                for n_e in ffn_counts(model, ffn):
                    for ranks in range(1, att.gpus // tp + 1):
                        for m in range(1, MAX_MICRO_BATCHES + 1):
                            for b in range(m, max_batch + 1, m):
                                lay = AfdLayout(tp, ranks, n_e, m, b)
                                if not fits_sites(lay, att, ffn) or not engine_allows(
                                        lay, engine):
                                    continue
                                e = evaluate(model, wl, cluster, cal, att, ffn, lay)
                                if not e.fits or (tpot is not None and e.tpot_s > tpot):
                                    continue
                                if best is None or rank_key(e, price) < rank_key(best, price):
                                    best = e
    return best



def afd_layout_of(dep: Deployment) -> AfdLayout:
    """One unit of an AFD deployment: the attention pool's instances are shared evenly by the
    FFN pool's units (``ffn.workers``)."""
    att, ffn = dep.pool("attention"), dep.pool("ffn")
    units = ffn.layout.workers
    return AfdLayout(att.layout.tp, att.layout.workers // units, ffn.layout.ep,
                     dep.micro_batches, att.layout.batch, ffn.layout.redundant)


def afd_deployment(prefill: PoolSpec, place: AfdPlacement, lay: AfdLayout, units: int,
                   engine: str) -> Deployment:
    """A prefill pool and ``units`` AFD units as one serving deployment (pools prefill,
    attention, ffn; FFN layouts carry ``dp = ep`` so that their GPUs count as ``ep``)."""
    att = PoolSpec("attention", place.attention_gpu.name,
                   PoolLayout(tp=lay.attention_tp, batch=lay.batch,
                              workers=lay.attention_ranks * units), place.attention_first_rank)
    ffn = PoolSpec("ffn", place.ffn_gpu.name,
                   PoolLayout(dp=lay.ffn_gpus, ep=lay.ffn_gpus, workers=units,
                              redundant=lay.redundant), place.ffn_first_rank)
    return Deployment("afd", (prefill, att, ffn), engine, micro_batches=lay.micro_batches)


def _pool_steps(est: AfdEstimate) -> tuple[StepTime, StepTime]:
    """The step seen by each pool: its own busy time, the wait for the other side (as
    ``comm_s``: dispatch, the other pool's compute, combine) and the once-per-step part."""
    st, m = est.stages, est.layout.micro_batches
    once = st.once_s
    att_busy = m * (st.dense_layers * st.dense_layer_s + st.moe_layers * st.attention_s)
    ffn_busy = m * st.moe_layers * st.experts_s
    att = StepTime(0.0, att_busy, 0.0, max(0.0, est.step_s - att_busy - once), once)
    ffn = StepTime(0.0, 0.0, ffn_busy, max(0.0, est.step_s - ffn_busy - once), once)
    return att, ffn


def estimate_afd(model: ModelSpec, dep: Deployment, wl: ServingWorkload, cluster: Cluster,
                 gpus: dict[str, GpuSpec], cal: Calibration) -> ServingEstimate:
    """A prefill pool feeding AFD decode units: rates, TTFT and transfer as for prefill/decode
    disaggregation (:func:`planner.serving.estimate.prefill_and_decode`), the decode step of a
    unit from :func:`evaluate_placed` at the batch the load leaves running."""
    att, ffn = dep.pool("attention"), dep.pool("ffn")
    if att.layout.workers % ffn.layout.workers:
        raise ConfigError("attention workers", f"a multiple of the {ffn.layout.workers} FFN "
                          f"units", att.layout.workers)
    lay, unit = unit_of_deployment(model, dep, wl, cluster, gpus, cal)
    last: list[AfdEstimate] = []

    def price(n: float) -> AfdEstimate:  # n requests running on one unit
        last[:] = [_price(unit, wl, replace(lay, batch=max(1.0, n / lay.attention_ranks)))]
        return last[0]

    side = DecodeSide(lambda n: StepTime(0.0, 0.0, 0.0, 0.0, price(n).step_s),
                      float(lay.requests), ffn.layout.workers, att)
    pre_est, lam, step, cap, ttft, transfer, bound = prefill_and_decode(
        model, dep, wl, cluster, cal, gpus, side)
    att_step, ffn_step = _pool_steps(last[0])  # the unit at the load's running batch
    mem = unit.memory
    kv_token = mem.kv_bytes_per_request / max(1.0, _context(wl)[1])
    att_mem = PoolMemory(mem.attention_weights_bytes, mem.kv_bytes_per_request * lay.batch,
                         0.0, mem.attention_capacity_bytes,
                         int(max(0.0, mem.attention_capacity_bytes
                                 - mem.attention_weights_bytes) // kv_token) if kv_token else 0)
    ffn_mem = PoolMemory(mem.ffn_weights_bytes, 0.0, 0.0, mem.ffn_capacity_bytes, 0)
    util = lam / cap if cap else 0.0
    pes = (pre_est,
           PoolEstimate("attention", att.gpu, att.layout, att_mem, att_step, lam, cap, util),
           PoolEstimate("ffn", ffn.gpu, ffn.layout, ffn_mem, ffn_step, lam, cap, util))
    tpot = step.total_s / wl.tokens_per_step if wl.osl > 1 else 0.0
    return ServingEstimate("afd", dep.gpus, ttft, tpot, lam, lam * wl.osl, pes,
                           pre_est.memory.fits and att_mem.fits and ffn_mem.fits, transfer,
                           bound)


def sensitivity(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
                unit: AfdEstimate, max_batch: int = 4096) -> dict[str, list[dict]]:
    """The unit's decode throughput per GPU as its micro-batch count varies (degrees fixed)
    and as its attention:FFN ratio varies (attention nodes, ``m`` and FFN GPUs fixed), each
    row at the largest batch meeting TPOT and memory (none: the row says so)."""
    by_name = {s.gpu.name: s for s in sites(cluster)}
    att, ffn = by_name[unit.attention_gpu], by_name[unit.ffn_gpu]
    lay = unit.layout
    tpot = wl.tpot_ms / 1e3 if wl.tpot_ms is not None else None

    def best(tp: int, ranks: int, n_e: int, m: int) -> dict:
        probe = AfdLayout(tp, ranks, n_e, m, 1)
        u = _unit(model, wl, cluster, cal, placement(att, ffn, probe), probe)
        est, _ = _best_batch(lambda b: _price(u, wl, replace(probe, batch=b)), m,
                             min(max_batch, u.memory.max_batch), tpot)
        row = {"attention_gpus": probe.attention_gpus, "ffn_gpus": n_e, "micro_batches": m}
        if est is None:
            return {**row, "batch": None, "tpot_s": None, "output_tokens_per_s_per_gpu": None,
                    "bound": "tpot or memory"}
        return {**row, "batch": est.layout.batch, "tpot_s": est.tpot_s,
                "output_tokens_per_s_per_gpu": est.output_tokens_per_s_per_gpu,
                "bound": est.bound}

    by_m = [best(lay.attention_tp, lay.attention_ranks, lay.ffn_gpus, m)
            for m in range(1, MAX_MICRO_BATCHES + 1)]
    per_node = max(1, att.gpus_per_node // lay.attention_tp)
    top = min(att.gpus // lay.attention_tp, 2 * lay.attention_ranks)  # up to twice the plan's
    by_ratio = [best(lay.attention_tp, r, lay.ffn_gpus, lay.micro_batches)
                for r in range(per_node, top + 1, per_node)
                if fits_sites(AfdLayout(lay.attention_tp, r, lay.ffn_gpus, 1, 1), att, ffn)]
    return {"micro_batches": by_m, "ratio": by_ratio}


def unit_of_deployment(model: ModelSpec, dep: Deployment, wl: ServingWorkload,
                       cluster: Cluster, gpus: dict[str, GpuSpec], cal: Calibration
                       ) -> tuple[AfdLayout, _Unit]:
    att, ffn = dep.pool("attention"), dep.pool("ffn")
    lay = afd_layout_of(dep)
    place = AfdPlacement(gpus[att.gpu], gpus[ffn.gpu], att.first_rank, ffn.first_rank)
    return lay, _unit(model, wl, cluster, cal, place, lay)


def unit_step_s(unit: _Unit, wl: ServingWorkload, lay: AfdLayout, requests: float,
                context: float) -> float:
    """Decode step of one unit with ``requests`` running (spread over its attention
    instances), each holding ``context`` KV tokens: the simulator's step time."""
    batch = max(1.0, requests / lay.attention_ranks)
    return _price(unit, wl, replace(lay, batch=batch), context).step_s
