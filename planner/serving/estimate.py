"""Closed-form prediction of one serving deployment: colocated or prefill/decode disaggregated.

Per instance, with ``n`` running requests, ``d`` the decode step time, ``s`` tokens per step
(MTP), ``p`` the prefill time of one request on the instance (batched prompts share a chunk;
attention-DP ranks prefill in parallel) and ``L`` the output length:

* colocated (continuous batching, prefill priority as vLLM and SGLang schedule by default):
  prefills take the share ``lambda*p`` of the instance's time and decode steps the rest, so
  ``lambda*(L-1) = n*s*(1 - lambda*p)/d`` in steady state, giving
  ``lambda = n*s / (d*(L-1) + n*s*p)`` and ``TPOT = d / (s*(1 - lambda*p))`` (the decode
  stalls of "Sarathi-Serve", Agrawal et al. OSDI 2024, sec. 2.3);
* disaggregated: prefill instances serve requests at ``1/p`` each, decode instances at
  ``n*s/(d*(L-1))`` each, ``TPOT = d/s`` (DistServe, Zhong et al. OSDI 2024, sec. 3);
* TTFT = one request's prefill + the wait for the running step (colocated: half a decode step)
  + the M/D/1 queueing delay of prefills at utilisation ``rho = lambda*p``
  (``solvers.serving.queueing``) + the KV transfer (disaggregated).

Loads: ``concurrency`` (closed loop: that many requests in flight over the deployment),
``rate_per_s`` (open loop), or neither (every attention rank runs its full ``batch``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile, default_profile
from cost_models.serving.config import PoolLayout, ServingWorkload, check_layout
from cost_models.serving.latency import (
    Costing, InstanceHardware, StepTime, decode_step, kv_transfer_s, prefill_request_s,
    prefill_step)
from cost_models.serving.memory import (
    PREFILL_CHUNK_TOKENS, PoolMemory, kv_bytes_per_token, pool_memory)
from cost_models.serving.profile import ServingProfile, default_serving_profile
from solvers.serving.queueing import md1_mean_wait_s, mgc_mean_wait_s
from topologies.catalog import GpuSpec
from topologies.cluster import Cluster, group_view

MAX_UTILISATION = 0.98  # prefill utilisation above which the queue is taken as unstable


@dataclass(frozen=True)
class PoolSpec:
    """One pool of a deployment: its role, GPU type and layout."""

    role: str  # colocated | prefill | decode
    gpu: str
    layout: PoolLayout


@dataclass(frozen=True)
class Deployment:
    mode: str  # colocated | disagg
    pools: tuple[PoolSpec, ...]
    engine: str = "sglang"
    cuda_graphs: bool = True
    overlap_comm: bool = False

    @property
    def gpus(self) -> int:
        return sum(p.layout.gpus for p in self.pools)

    def pool(self, role: str) -> PoolSpec:
        return next(p for p in self.pools if p.role == role)


@dataclass(frozen=True)
class PoolEstimate:
    role: str
    gpu: str
    layout: PoolLayout
    memory: PoolMemory
    step: StepTime  # the decode step (colocated, decode) or one request's prefill (prefill)
    request_rate_per_s: float  # what the pool serves at this load
    capacity_per_s: float  # what it serves at its full batch (saturated)
    utilisation: float

    def as_dict(self) -> dict:
        return {"role": self.role, "gpu": self.gpu, "gpus": self.layout.gpus,
                **self.layout.as_dict(), "memory": self.memory.as_dict(),
                "step": self.step.as_dict(), "request_rate_per_s": self.request_rate_per_s,
                "capacity_per_s": self.capacity_per_s, "utilisation": self.utilisation}


@dataclass(frozen=True)
class ServingEstimate:
    mode: str
    gpus: int
    ttft_s: float
    tpot_s: float
    request_rate_per_s: float
    output_tokens_per_s: float
    pools: tuple[PoolEstimate, ...]
    fits: bool
    kv_transfer_s: float
    bound: str  # what limits the rate: "decode", "prefill", "load"

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.gpus

    @property
    def output_tokens_per_s_per_user(self) -> float:
        return 1.0 / self.tpot_s if self.tpot_s > 0 else math.inf

    def meets(self, wl: ServingWorkload) -> bool:
        return self.fits and (wl.ttft_ms is None or self.ttft_s * 1e3 <= wl.ttft_ms + 1e-9) and (
            wl.tpot_ms is None or self.tpot_s * 1e3 <= wl.tpot_ms + 1e-9)

    def as_dict(self, wl: ServingWorkload) -> dict:
        return {"mode": self.mode, "gpus": self.gpus, "ttft_s": self.ttft_s,
                "tpot_s": self.tpot_s, "request_rate_per_s": self.request_rate_per_s,
                "output_tokens_per_s": self.output_tokens_per_s,
                "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
                "output_tokens_per_s_per_user": self.output_tokens_per_s_per_user,
                "input_tokens_per_s_per_gpu": self.request_rate_per_s * wl.isl / self.gpus,
                "kv_transfer_s": self.kv_transfer_s, "bound": self.bound, "fits": self.fits,
                "meets_slo": self.meets(wl),
                "memory": {p.role: p.memory.as_dict() for p in self.pools},
                "pools": [p.as_dict() for p in self.pools]}


@dataclass(frozen=True)
class Calibration:
    """Profiles per GPU type (training physics + serving overheads)."""

    profiles: dict[str, Profile]
    serving: dict[str, ServingProfile]

    @staticmethod
    def defaults(gpus: tuple[str, ...]) -> "Calibration":
        return Calibration({g: default_profile(g) for g in gpus},
                           {g: default_serving_profile(g) for g in gpus})


def md1_wait_s(rho: float, service_s: float) -> float:
    """M/D/1 mean wait at utilisation ``rho`` with service ``service_s``."""
    return md1_mean_wait_s(rho / service_s, service_s) if service_s > 0 and rho > 0 else 0.0


def slot_wait_s(lam: float, alone_s: float, tpot_s: float, out_tokens: int, slots: int) -> float:
    """Mean wait for a free decode slot of an instance: each request holds one of ``slots``
    for its prefill and its decode (``alone + (L-1)*TPOT``); fixed lengths make the holding
    time nearly deterministic (scv 0)."""
    return mgc_mean_wait_s(lam, alone_s + out_tokens * tpot_s, slots, service_scv=0.0)


def instance_hardware(cluster: Cluster, gpu: GpuSpec, layout: PoolLayout,
                      first_rank: int = 0) -> InstanceHardware:
    """Rates of ``gpu`` and the group views of an instance on ranks from ``first_rank``."""
    n = cluster.num_gpus
    tp_ranks = [(first_rank + r) % n for r in range(layout.tp)]
    ep_ranks = [(first_rank + r) % n for r in range(min(n, layout.tp * layout.dp))]
    stage = layout.tp * layout.dp
    pp_view = (group_view(cluster, [first_rank % n, (first_rank + stage) % n])
               if layout.pp > 1 and n > stage else None)
    return InstanceHardware(peak_flops=gpu.peak_flops_for("bf16"),
                            hbm_bytes_per_s=gpu.hbm_bw_bytes_per_s, hbm_bytes=gpu.hbm_bytes,
                            tp_view=group_view(cluster, tp_ranks),
                            ep_view=group_view(cluster, ep_ranks), pp_view=pp_view)


def costing(model: ModelSpec, pool: PoolSpec, wl: ServingWorkload, cluster: Cluster,
            cal: Calibration, gpu: GpuSpec, cuda_graphs: bool = True,
            overlap_comm: bool = False) -> Costing:
    check_layout(model, pool.layout)
    return Costing(overlap_comm=overlap_comm,
                   model=model, layout=pool.layout,
                   hw=instance_hardware(cluster, gpu, pool.layout),
                   prof=cal.profiles[gpu.name], sprof=cal.serving[gpu.name],
                   precision=wl.precision, kv_dtype=wl.kv_dtype,
                   moe_imbalance=wl.moe_imbalance if model.is_moe else 1.0,
                   cuda_graphs=cuda_graphs)


def prefill_per_request_s(c: Costing, wl: ServingWorkload) -> tuple[float, float]:
    """(one request's prefill latency alone, the instance time per request when prompts are
    batched up to the chunk budget and attention-DP ranks prefill in parallel)."""
    new = max(1.0, wl.new_input_tokens)
    cached = wl.isl - new
    alone = prefill_request_s(c, new, cached, PREFILL_CHUNK_TOKENS)
    per_chunk = max(1, int(PREFILL_CHUNK_TOKENS // new))
    batched = (prefill_step(c, (new,) * per_chunk, cached).total_s / per_chunk
               if per_chunk > 1 else alone)
    return alone, batched / (c.layout.dp * c.layout.pp)


def _decode(c: Costing, wl: ServingWorkload, per_rank: float) -> StepTime:
    context = wl.isl + wl.osl / 2.0
    return decode_step(c, max(per_rank, 1e-9), context, 1.0 + wl.mtp_depth)


def _running_per_instance(layout: PoolLayout, wl: ServingWorkload, instances: int) -> float:
    cap = float(layout.requests_per_instance)
    if wl.concurrency is not None:
        return min(cap, wl.concurrency / instances)
    return cap


def _colocated(model, pool, wl, cluster, cal, gpu, dep: Deployment) -> ServingEstimate:
    lay = pool.layout
    c = costing(model, pool, wl, cluster, cal, gpu, dep.cuda_graphs, dep.overlap_comm)
    mem = pool_memory(model, lay, wl, gpu.hbm_bytes, c.sprof, c.prof.reserved_bytes)
    s, out = wl.tokens_per_step, max(wl.osl - 1, 0)
    alone, p = prefill_per_request_s(c, wl)
    n = _running_per_instance(lay, wl, lay.workers)
    step = _decode(c, wl, n / lay.dp)
    d = step.total_s
    capacity = n * s / (d * out + n * s * p)  # requests/s of one instance, closed loop
    lam, bound = capacity, "decode"
    if wl.rate_per_s is not None:
        offered = wl.rate_per_s / lay.workers
        if offered < capacity:
            lam, bound = offered, "load"
            # fewer requests in flight at this rate: Little's law n = lam * (time in system)
            for _ in range(30):
                busy = min(lam * p, MAX_UTILISATION)
                tpot_n = _decode(c, wl, n / lay.dp).total_s / (s * (1 - busy))
                n = min(float(lay.requests_per_instance), max(1.0, lam * (out * tpot_n + alone)))
            step = _decode(c, wl, n / lay.dp)
            d = step.total_s
    rho = min(lam * p, MAX_UTILISATION)
    tpot = d / (s * (1.0 - rho)) if out else 0.0
    ttft = alone + (d / 2.0 if out else 0.0) + md1_wait_s(rho, p) + slot_wait_s(
        lam, alone, tpot, out, lay.requests_per_instance)
    pe = PoolEstimate("colocated", gpu.name, lay, mem, step, lam * lay.workers,
                      capacity * lay.workers, rho)
    return ServingEstimate("colocated", lay.gpus, ttft, tpot, lam * lay.workers,
                           lam * lay.workers * wl.osl, (pe,), mem.fits, 0.0, bound)


def _transfer_s(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
                prefill: PoolSpec, decode: PoolSpec, gpu_name: str) -> float:
    """KV of one request from a prefill GPU to a decode GPU: pools sit on disjoint ranks, the
    prefill pool first; the link is what ``group_view`` of the two ranks sees."""
    n = cluster.num_gpus
    src, dst = 0, min(prefill.layout.gpus, n - 1)
    view = group_view(cluster, [src, dst])
    tier = view.inter or view.intra
    if tier is None:
        return 0.0
    # every GPU of the prefill instance sends its shard in parallel over its own link
    per_gpu = kv_bytes_per_token(model, wl.kv_dtype) * wl.isl / prefill.layout.tp
    if model.mla is not None:  # MLA's latent is replicated over TP: one rank's copy moves
        per_gpu = kv_bytes_per_token(model, wl.kv_dtype) * wl.isl
    return kv_transfer_s(per_gpu / prefill.layout.pp, tier.bw_bytes_per_s, tier.latency_s,
                         cal.serving[gpu_name].kv_transfer_efficiency)


def _disagg(model, dep: Deployment, wl, cluster, cal, gpus) -> ServingEstimate:
    pre, dec = dep.pool("prefill"), dep.pool("decode")
    cp = costing(model, pre, wl, cluster, cal, gpus[pre.gpu], dep.cuda_graphs,
                 dep.overlap_comm)
    cd = costing(model, dec, wl, cluster, cal, gpus[dec.gpu], dep.cuda_graphs,
                 dep.overlap_comm)
    mem_p = pool_memory(model, pre.layout, wl, gpus[pre.gpu].hbm_bytes, cp.sprof,
                        cp.prof.reserved_bytes)
    mem_d = pool_memory(model, dec.layout, wl, gpus[dec.gpu].hbm_bytes, cd.sprof,
                        cd.prof.reserved_bytes)
    s, out = wl.tokens_per_step, max(wl.osl - 1, 0)
    alone, p = prefill_per_request_s(cp, wl)
    prefill_cap = pre.layout.workers / p
    n = _running_per_instance(dec.layout, wl, dec.layout.workers)
    step = _decode(cd, wl, n / dec.layout.dp)
    decode_cap = dec.layout.workers * (n * s / (step.total_s * out) if out else math.inf)
    lam = min(prefill_cap * MAX_UTILISATION, decode_cap)
    bound = "prefill" if prefill_cap * MAX_UTILISATION < decode_cap else "decode"
    if wl.rate_per_s is not None and wl.rate_per_s < lam:
        lam, bound = wl.rate_per_s, "load"
        per_inst = lam / dec.layout.workers
        n = min(float(dec.layout.requests_per_instance),
                max(1.0, per_inst * out * step.total_s / s))
        for _ in range(20):
            step = _decode(cd, wl, n / dec.layout.dp)
            n = min(float(dec.layout.requests_per_instance),
                    max(1.0, per_inst * out * step.total_s / s))
    transfer = _transfer_s(model, wl, cluster, cal, pre, dec, pre.gpu)
    rho = lam / prefill_cap
    ttft = alone + md1_wait_s(min(rho, MAX_UTILISATION), p) + transfer
    tpot = step.total_s / s if out else 0.0
    pes = (PoolEstimate("prefill", pre.gpu, pre.layout, mem_p,
                        prefill_step(cp, (max(1.0, wl.new_input_tokens),),
                                     wl.isl - max(1.0, wl.new_input_tokens)),
                        lam, prefill_cap, rho),
           PoolEstimate("decode", dec.gpu, dec.layout, mem_d, step, lam, decode_cap,
                        lam / decode_cap if decode_cap else 0.0))
    return ServingEstimate("disagg", dep.gpus, ttft, tpot, lam, lam * wl.osl, pes,
                           mem_p.fits and mem_d.fits, transfer, bound)


def estimate(model: ModelSpec, dep: Deployment, wl: ServingWorkload, cluster: Cluster,
             gpus: dict[str, GpuSpec], cal: Calibration, overlap_comm: bool = False
             ) -> ServingEstimate:
    """Predict ``dep`` under ``wl`` (module docstring). ConfigError for a layout that cannot
    shard the model."""
    dep = replace(dep, overlap_comm=overlap_comm or dep.overlap_comm)
    if dep.mode == "colocated":
        pool = dep.pool("colocated")
        return _colocated(model, pool, wl, cluster, cal, gpus[pool.gpu], dep)
    return _disagg(model, dep, wl, cluster, cal, gpus)
