"""Attention/FFN disaggregated decode units: predict one, and search them exactly.

:func:`evaluate` prices one :class:`~cost_models.serving.afd.AfdLayout` on two GPU types of a
cluster: stage times from :mod:`cost_models.serving.afd`, the step from the ping-pong pipeline
of :mod:`solvers.serving.pingpong` (dense layers as attention-only rounds, then the MoE
layers), plus what a step pays once. TPOT is the step over the tokens a step emits per request.

:func:`search` enumerates every attention GPU type and FFN GPU type of the cluster, attention TP
(divisors of a node that divide the heads), expert GPUs (divisors of the expert slots),
attention instances, micro-batch count ``m`` (1..:data:`MAX_MICRO_BATCHES`) and batch per
instance (a multiple of ``m``). For fixed degrees the decode throughput per GPU never falls
as the batch grows (every stage time is a maximum or sum of functions ``a + b * x`` with
``a >= 0``, or concave with value >= 0 at 0, in the micro-batch size, so time per request is
non-increasing), while TPOT and KV memory only grow; so the best batch is the largest that
meets TPOT and memory, found by bisection, and the search is exact over the integer grid
(a test checks it against trying every batch). The attention pool sits on the first nodes of
its GPU type and the FFN pool on the next whole nodes (or the next GPUs when both fit in one
node); the link between them is what the cluster's topology gives those two ranks.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from cost_models.model_spec import ModelSpec
from cost_models.serving.afd import (AfdLayout, AfdMemory, AfdStages, PoolLink, afd_memory,
                                     afd_stages)
from cost_models.serving.config import PoolLayout, ServingWorkload
from cost_models.serving.latency import Costing
from planner.serving.estimate import Calibration, instance_hardware
from planner.serving.search import Site, sites
from solvers.serving.pingpong import pipeline_s, round_s
from topologies.cluster import Cluster, group_view

MAX_MICRO_BATCHES = 8  # MegaScale-Infer runs 3-4 in practice (sec. 4.2)
STAGE_NAMES = ("attention", "dispatch", "experts", "combine")


@dataclass(frozen=True)
class AfdPlacement:
    """Where the unit runs: GPU type and first rank of each pool."""

    attention: Site
    ffn: Site
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


def placement(cluster: Cluster, att: Site, ffn: Site, lay: AfdLayout) -> AfdPlacement:
    """Attention on the first GPUs of its site; FFN after it on the same site (the next whole
    node, or the next GPU when both pools fit in one node) or first on its own site."""
    a0 = att.first_rank
    if ffn.gpu.name != att.gpu.name:
        return AfdPlacement(att, ffn, a0, ffn.first_rank)
    per_node = att.gpus_per_node
    if lay.gpus <= per_node:
        return AfdPlacement(att, ffn, a0, a0 + lay.attention_gpus)
    return AfdPlacement(att, ffn, a0, a0 + -(-lay.attention_gpus // per_node) * per_node)


def fits_sites(lay: AfdLayout, att: Site, ffn: Site) -> bool:
    """The pools fit their sites (whole nodes each when they share a site and span nodes)."""
    if att.gpu.name != ffn.gpu.name:
        return lay.attention_gpus <= att.gpus and lay.ffn_gpus <= ffn.gpus
    if lay.gpus <= att.gpus_per_node:
        return lay.gpus <= att.gpus
    per = att.gpus_per_node
    return (-(-lay.attention_gpus // per) + -(-lay.ffn_gpus // per)) * per <= att.gpus


def _link(cluster: Cluster, place: AfdPlacement, cal: Calibration) -> PoolLink:
    n = cluster.num_gpus
    view = group_view(cluster, [place.attention_first_rank % n, place.ffn_first_rank % n])
    tier = view.inter or view.intra
    if tier is None:
        return PoolLink(0.0, 0.0)
    prof = cal.profiles[place.attention.gpu.name]
    return PoolLink(tier.bw_bytes_per_s * prof.link_eff(tier.name), tier.latency_s)


def costings(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
             place: AfdPlacement, lay: AfdLayout) -> tuple[Costing, Costing, PoolLink]:
    a, f = place.attention.gpu, place.ffn.gpu
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


def _capacity(cal: Calibration, site: Site) -> float:
    name = site.gpu.name
    return site.gpu.hbm_bytes * cal.serving[name].mem_fraction - cal.profiles[name].reserved_bytes


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
          att: Site, ffn: Site, lay: AfdLayout) -> _Unit:
    place = placement(cluster, att, ffn, lay)
    c_att, c_ffn, link = costings(model, wl, cluster, cal, place, lay)
    mem = afd_memory(model, lay, wl.precision, wl.kv_dtype, _context(wl)[1],
                     _capacity(cal, att), _capacity(cal, ffn))
    return _Unit(att.gpu.name, ffn.gpu.name, c_att, c_ffn, link, mem)


def _price(unit: _Unit, wl: ServingWorkload, lay: AfdLayout) -> AfdEstimate:
    s = wl.tokens_per_step
    stages = afd_stages(unit.att, unit.ffn, lay, unit.link, _context(wl)[0],
                        1.0 + wl.mtp_depth)
    step, bound = step_of(stages, lay.micro_batches)
    return AfdEstimate(lay, unit.att_gpu, unit.ffn_gpu, stages, unit.memory, step,
                       step / s, lay.requests * s / step, bound)


def evaluate(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
             att: Site, ffn: Site, lay: AfdLayout) -> AfdEstimate:
    """Predict one AFD unit (module docstring)."""
    return _price(_unit(model, wl, cluster, cal, att, ffn, lay), wl, lay)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def attention_tps(model: ModelSpec, site: Site) -> list[int]:
    return [t for t in _divisors(site.gpus_per_node) if model.num_heads % t == 0]


def ffn_counts(model: ModelSpec, most: int) -> list[int]:
    """Expert GPU counts that hold the experts evenly (no redundant slots)."""
    return [d for d in _divisors(model.moe.num_experts) if d <= most]


@dataclass(frozen=True)
class AfdSearch:
    best: tuple[AfdEstimate, ...]  # best first, at most ``top_k``
    evaluated: int  # layouts priced
    grid: int  # (degrees, m) combinations enumerated
    pruned: int  # (degrees) whose upper bound could not beat the top_k found before them


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
           top_k: int = 3, max_batch: int = 4096) -> AfdSearch:
    """Every AFD unit the cluster can hold (module docstring), best decode output tokens/s
    per GPU first among those meeting TPOT and memory."""
    if not model.is_moe:
        return AfdSearch((), 0, 0, 0)
    found: list[AfdEstimate] = []
    top: list[float] = []  # the top_k values found so far (a min-heap)
    evaluated = grid = pruned = 0
    tpot = wl.tpot_ms / 1e3 if wl.tpot_ms is not None else None
    all_sites = sites(cluster)
    for att in all_sites:
        for ffn in all_sites:
            for tp in attention_tps(model, att):
                for n_e in ffn_counts(model, ffn.gpus):
                    room = [r for r in range(1, att.gpus // tp + 1)
                            if fits_sites(AfdLayout(tp, r, n_e, 1, 1), att, ffn)]
                    for ranks in reversed(room):  # big units first: good plans early prune more
                        probe = AfdLayout(tp, ranks, n_e, 1, 1)
                        unit = _unit(model, wl, cluster, cal, att, ffn, probe)
                        if not unit.memory.ffn_fits:
                            break  # the experts need more GPUs than n_e, whatever the ranks
                        most = min(max_batch, unit.memory.max_batch)
                        if most < 1:
                            continue
                        bound = _upper_bound(unit, wl, AfdLayout(tp, ranks, n_e, 1, most))
                        if len(top) >= top_k and bound < top[0]:
                            pruned += 1  # cannot enter the top_k: the result is unchanged
                            continue
                        for m in range(1, MAX_MICRO_BATCHES + 1):
                            grid += 1

                            def price(b, tp=tp, ranks=ranks, n_e=n_e, m=m, unit=unit):
                                return _price(unit, wl, AfdLayout(tp, ranks, n_e, m, b))
                            est, calls = _best_batch(price, m, most, tpot)
                            evaluated += calls
                            if est is not None:
                                found.append(est)
                                heapq.heappush(top, est.output_tokens_per_s_per_gpu)
                                if len(top) > top_k:
                                    heapq.heappop(top)
    found.sort(key=_rank)
    return AfdSearch(tuple(found[:top_k]), evaluated, grid, pruned)


def _upper_bound(unit: _Unit, wl: ServingWorkload, lay: AfdLayout) -> float:
    """Output tokens/s per GPU no batch up to ``lay.batch`` and no micro-batch count beats,
    TPOT aside: throughput never falls with the batch (module docstring), and ``m`` rounds of
    ``b/m`` take at least one stage's time for the whole batch (``m T(b/m) >= T(b)`` for every
    stage, each a star-shaped function of its load), so a step is at least the LM head and
    overheads, the dense layers, and the MoE layers' slowest stage, all at the full batch."""
    st = afd_stages(unit.att, unit.ffn, lay, unit.link, _context(wl)[0], 1.0 + wl.mtp_depth)
    step = st.once_s + st.dense_layers * st.dense_layer_s + st.moe_layers * max(st.moe_stages)
    return lay.requests * wl.tokens_per_step / step / lay.gpus


def _rank(e: AfdEstimate) -> tuple:
    lay = e.layout
    return (-e.output_tokens_per_s_per_gpu, lay.gpus, e.attention_gpu, e.ffn_gpu,
            lay.attention_tp, lay.attention_ranks, lay.ffn_gpus, lay.micro_batches, lay.batch)


def brute_force(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
                max_batch: int) -> AfdEstimate | None:
    """Every layout and every batch up to ``max_batch``: the reference :func:`search` is
    tested against on small clusters."""
    best = None
    tpot = wl.tpot_ms / 1e3 if wl.tpot_ms is not None else None
    for att in sites(cluster):
        for ffn in sites(cluster):
            for tp in attention_tps(model, att):
                for n_e in ffn_counts(model, ffn.gpus):
                    for ranks in range(1, att.gpus // tp + 1):
                        for m in range(1, MAX_MICRO_BATCHES + 1):
                            for b in range(m, max_batch + 1, m):
                                lay = AfdLayout(tp, ranks, n_e, m, b)
                                if not fits_sites(lay, att, ffn):
                                    continue
                                e = evaluate(model, wl, cluster, cal, att, ffn, lay)
                                if not e.fits or (tpot is not None and e.tpot_s > tpot):
                                    continue
                                if best is None or _rank(e) < _rank(best):
                                    best = e
    return best

