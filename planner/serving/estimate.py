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
from functools import lru_cache

import numpy as np

from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile, default_profile
from cost_models.serving.config import PoolLayout, ServingWorkload, check_layout
from cost_models.serving.latency import (
    Costing, InstanceHardware, StepTime, decode_step, kv_transfer_s, prefill_request_s,
    prefill_step)
from cost_models.serving.memory import (
    PREFILL_CHUNK_TOKENS, PoolMemory, kv_bytes_per_token, pool_memory)
from cost_models.serving.profile import ServingProfile, default_serving_profile
from solvers.serving.queueing import (
    birth_death_in_system, md1_mean_wait_s, mgc_mean_wait_s, mgc_wait_probability,
    wait_quantile_s)
from topologies.catalog import GpuSpec
from planner.serving.sites import instance_ranks
from topologies.cluster import Cluster, group_view

MAX_UTILISATION = 0.98  # prefill utilisation above which the queue is taken as unstable


@dataclass(frozen=True)
class PoolSpec:
    """One pool of a deployment: its role, GPU type and layout; ``first_rank`` is the cluster
    rank its GPUs start from (its node group's, on a cluster of several GPU types)."""

    role: str  # colocated | prefill | decode | attention | ffn
    gpu: str
    layout: PoolLayout
    first_rank: int = 0


@dataclass(frozen=True)
class Deployment:
    mode: str  # colocated | disagg | afd
    pools: tuple[PoolSpec, ...]
    engine: str = "sglang"
    cuda_graphs: bool = True
    overlap_comm: bool = False
    micro_batches: int = 1  # afd: micro-batches each attention instance ping-pongs

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
class Ttft:
    """Time to first token: a fixed part plus queue waits, each (mean, probability of waiting).
    A quantile adds the waits' quantiles (an upper bound of the sum's quantile)."""

    base_s: float
    waits: tuple[tuple[float, float], ...] = ()

    @property
    def mean_s(self) -> float:
        return self.base_s + sum(mean for mean, _ in self.waits)

    def quantile_s(self, q: float | None) -> float:
        if q is None:
            return self.mean_s
        return self.base_s + sum(wait_quantile_s(mean, pw, q) for mean, pw in self.waits)


@dataclass(frozen=True)
class ServingEstimate:
    mode: str
    gpus: int
    ttft: Ttft
    tpot_s: float
    request_rate_per_s: float
    output_tokens_per_s: float
    pools: tuple[PoolEstimate, ...]
    fits: bool
    kv_transfer_s: float
    bound: str  # what limits the rate: "decode", "prefill", "load"
    # TPOT with every slot busy (colocated; the mean ``tpot_s`` is at the slots the rate
    # keeps busy): what the TPOT target is judged on. Requests' own TPOTs spread around the
    # mean with the prefills they meet (Llama-3.1-70B on 8 H100, TP8: simulated p90 59 ms at
    # a 44 ms mean); the full-slot TPOT bounds the mean and keeps a margin for that spread.
    # None: the same as ``tpot_s`` (disaggregated and AFD decode steps meet no prefills, so
    # their TPOT does not spread with them; the mean is judged).
    tpot_full_s: float | None = None

    @property
    def ttft_s(self) -> float:
        return self.ttft.mean_s

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.gpus

    @property
    def output_tokens_per_s_per_user(self) -> float:
        return 1.0 / self.tpot_s if self.tpot_s > 0 else math.inf

    @property
    def tpot_target_s(self) -> float:
        """The TPOT the target is judged on (:attr:`tpot_full_s`, else the mean)."""
        return self.tpot_full_s if self.tpot_full_s is not None else self.tpot_s

    def meets(self, wl: ServingWorkload) -> bool:
        ttft = self.ttft.quantile_s(wl.ttft_quantile)
        return self.fits and not self.overloaded(wl) and math.isfinite(ttft) and (
            wl.ttft_ms is None or ttft * 1e3 <= wl.ttft_ms + 1e-9) and (
            wl.tpot_ms is None or self.tpot_target_s * 1e3 <= wl.tpot_ms + 1e-9)

    def overloaded(self, wl: ServingWorkload) -> bool:
        """The offered rate is more than the deployment serves: the queue grows without end."""
        return wl.rate_per_s is not None and wl.rate_per_s > self.request_rate_per_s * (
            1 + 1e-9)

    def as_dict(self, wl: ServingWorkload) -> dict:
        """The estimate's JSON: an unbounded wait (an overloaded queue) is ``null``, so that
        the document stays standard JSON."""
        def finite(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"mode": self.mode, "gpus": self.gpus, "ttft_s": finite(self.ttft_s),
                "ttft_p90_s": finite(self.ttft.quantile_s(0.9)),
                "ttft_p99_s": finite(self.ttft.quantile_s(0.99)),
                "ttft_quantile": wl.ttft_quantile,  # the share of requests the target holds for
                "ttft_at_quantile_s": finite(self.ttft.quantile_s(wl.ttft_quantile)),
                "overloaded": self.overloaded(wl), "offered_rate_per_s": wl.rate_per_s,
                "tpot_s": self.tpot_s, "tpot_full_s": self.tpot_target_s,
                "request_rate_per_s": self.request_rate_per_s,
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


def slot_wait(lam: float, alone_s: float, tpot_s: float, out_tokens: int, slots: int,
              output_scv: float = 0.0) -> tuple[float, float]:
    """(mean wait, probability of waiting) for a free decode slot of an instance: each request
    holds one of ``slots`` for its prefill and its decode (``alone + (L-1)*TPOT``), a time as
    variable as the output lengths (scv 0 when they are fixed)."""
    hold = alone_s + out_tokens * tpot_s
    return (mgc_mean_wait_s(lam, hold, slots, service_scv=output_scv),
            mgc_wait_probability(lam, hold, slots))


def prefill_pool_ttft(table: "PrefillTable", lam: float, workers: int, transfer_s: float,
                      input_scv: float = 0.0) -> Ttft:
    """TTFT on a pool of ``workers`` prefill instances fed ``lam`` requests/s.

    An instance runs whatever waits in its next step (up to a full step), so the more wait,
    the faster it serves: a birth-death chain whose rate with ``n`` requests in the pool is
    ``n / P(1)`` while instances are free and ``W * m / P(m)`` beyond, ``m = n / W`` requests
    per instance's step (least-loaded routing spreads them). Little's law turns its mean
    occupancy into the time in the pool; the chain's waits are exponential, a step is not, so
    the wait beyond one's own prefill is scaled by ``(1 + scv) / 2`` of the prefill times,
    which follow the input lengths (Allen-Cunneen); an arrival waits when the pool is not
    empty. Then the KV transfer (SGLang and vLLM stream the first token from
    the decode side)."""
    mean_n, p_empty = birth_death_in_system(lam, table.pool_rates(workers))
    if math.isinf(mean_n):
        return Ttft(table.alone_s + transfer_s, ((math.inf, 1.0),))
    scale = (1.0 + input_scv) / 2.0
    waiting = scale * max(0.0, mean_n / lam - table.alone_s) if lam > 0 else 0.0
    return Ttft(table.alone_s + transfer_s, ((waiting, 1.0 - p_empty),))


def colocated_ttft(alone_s: float, step_s: float, lam: float, p: float, out_tokens: int,
                   slot: tuple[float, float], input_scv: float = 0.0) -> Ttft:
    """One prefill, half a decode step, the prefill queue (M/G/1: the M/D/1 wait times
    ``1 + scv`` of the prefill times, which follow the input lengths; Pollaczek-Khinchine) and
    the wait for a decode slot ``slot`` = (mean, probability of waiting)."""
    rho = min(lam * p, MAX_UTILISATION)
    return Ttft(alone_s + (step_s / 2.0 if out_tokens else 0.0),
                (((1.0 + input_scv) * md1_wait_s(rho, p), rho), slot))


def instance_hardware(cluster: Cluster, gpu: GpuSpec, layout: PoolLayout,
                      first_rank: int = 0) -> InstanceHardware:
    """Rates of ``gpu`` and the group views of an instance on the site that starts at rank
    ``first_rank``, on the GPUs the plan gives one instance there
    (:func:`planner.serving.sites.instance_ranks`: one RDMA network where one holds it, so an
    instance no network can hold is priced with its collectives on sockets)."""
    n = cluster.num_gpus
    stage = layout.tp * layout.dp
    ranks = instance_ranks(cluster, stage * layout.pp, first_rank)
    tp_ranks = list(ranks[:layout.tp])
    ep_ranks = list(ranks[:min(n, stage)])
    pp_view = (group_view(cluster, [ranks[0], ranks[stage % len(ranks)]])
               if layout.pp > 1 and n > stage else None)
    return InstanceHardware(peak_flops=gpu.peak_flops_for("bf16"),
                            hbm_bytes_per_s=gpu.hbm_bw_bytes_per_s, hbm_bytes=gpu.hbm_bytes,
                            tp_view=group_view(cluster, tp_ranks),
                            ep_view=group_view(cluster, ep_ranks), pp_view=pp_view,
                            flops_per_exp=gpu.tensor_flops_per_exp2)


def costing(model: ModelSpec, pool: PoolSpec, wl: ServingWorkload, cluster: Cluster,
            cal: Calibration, gpu: GpuSpec, cuda_graphs: bool = True,
            overlap_comm: bool = False) -> Costing:
    check_layout(model, pool.layout)
    return Costing(overlap_comm=overlap_comm,
                   model=model, layout=pool.layout,
                   hw=instance_hardware(cluster, gpu, pool.layout, pool.first_rank),
                   prof=cal.profiles[gpu.name], sprof=cal.serving[gpu.name],
                   precision=wl.precision, kv_dtype=wl.kv_dtype,
                   moe_imbalance=wl.moe_imbalance if model.is_moe else 1.0,
                   cuda_graphs=cuda_graphs)


@dataclass(frozen=True)
class PrefillTable:
    """What prefills cost an instance, by how many requests one prefill step batches.

    A step's prompts are dealt to the ``dp`` attention ranks, each takes up to the chunk
    budget, and the step lasts as long as its fullest rank (the MoE layers of every rank run
    together), so one lone request costs the whole instance a full prompt's time while a full
    step shares it among ``dp * per_rank`` requests. ``step_s[j-1]`` is the step with ``j``
    prompts on the fullest rank, divided by ``pp`` (stages overlap successive steps).
    """

    alone_s: float  # one request's prefill latency
    dp: int
    step_s: tuple[float, ...]

    @property
    def max_batch(self) -> int:
        return self.dp * len(self.step_s)

    def step_time_s(self, k: float) -> float:
        per_rank = min(len(self.step_s), max(1, math.ceil(k / self.dp - 1e-9)))
        return self.step_s[per_rank - 1]

    def per_request_s(self, k: float) -> float:
        k = min(max(k, 1.0), float(self.max_batch))
        return self.step_time_s(k) / k

    @property
    def full_per_request_s(self) -> float:
        return self.per_request_s(self.max_batch)

    def batch_at(self, lam: float, gap_s: float) -> float:
        """Requests a step batches at arrival rate ``lam``: those that arrive during the step
        before it and the ``gap_s`` between steps (prefill priority runs waiting prompts at
        the next step boundary): the fixed point ``k = lam * (gap + P(k))`` between 1 and a
        full step. ``P`` is constant while the fullest rank holds ``j`` prompts, so the first
        ``j`` whose ``k`` fits in ``j * dp`` gives it exactly."""
        for j, step in enumerate(self.step_s, start=1):
            k = lam * (gap_s + step)
            if k <= j * self.dp:
                return max(1.0, k)
        return float(self.max_batch)

    def per_request_at(self, lam: float, gap_s: float) -> float:
        return self.per_request_s(self.batch_at(lam, gap_s))

    def pool_rates(self, workers: int) -> np.ndarray:
        """Completion rate of ``workers`` instances with n = 1, 2, ... requests in the pool
        (:func:`prefill_pool_ttft`)."""
        return _pool_rates(self, workers)


@lru_cache(maxsize=4096)
def _pool_rates(table: PrefillTable, workers: int) -> np.ndarray:
    m = np.arange(1, table.max_batch + 1, dtype=float)
    per_instance = m / np.array([table.step_time_s(x) for x in m])
    return np.concatenate((np.arange(1, workers + 1) / table.step_time_s(1.0),
                           workers * np.repeat(per_instance[1:], workers)))


MAX_PER_RANK_TABLE = 64  # prompts per rank priced one by one; more are interpolated


def prefill_table(c: Costing, wl: ServingWorkload) -> PrefillTable:
    """The :class:`PrefillTable` of an instance for ``wl``'s prompts."""
    new = max(1.0, wl.new_input_tokens)
    cached = wl.isl - new
    alone = prefill_request_s(c, new, cached, PREFILL_CHUNK_TOKENS)
    per_rank = max(1, int(PREFILL_CHUNK_TOKENS // new))
    if per_rank == 1:
        steps = (alone,)
    else:
        priced = sorted({j for j in range(1, min(per_rank, MAX_PER_RANK_TABLE) + 1)}
                        | {per_rank})
        times = {j: prefill_step(c, (new,) * j, cached).total_s for j in priced}
        steps = tuple(float(np.interp(j, priced, [times[x] for x in priced]))
                      for j in range(1, per_rank + 1))
    return PrefillTable(alone, c.layout.dp, tuple(t / c.layout.pp for t in steps))


def prefill_per_request_s(c: Costing, wl: ServingWorkload) -> tuple[float, float]:
    """(one request's prefill latency alone, the instance time per request of a full step)."""
    table = prefill_table(c, wl)
    return table.alone_s, table.full_per_request_s


def colocated_rate(n: float, s: float, d: float, out: int, table: PrefillTable) -> float:
    """Requests/s an instance sustains with ``n`` running: ``lambda = n*s/(d*(L-1) +
    n*s*p(lambda))``, where a prefill's cost ``p`` depends on how many arrivals one step
    batches; a fixed point (``p`` falls as the rate rises)."""
    lam = n * s / (d * out + n * s * table.full_per_request_s)
    for _ in range(40):
        p = table.per_request_at(lam, d)
        lam_next = n * s / (d * out + n * s * p)
        if abs(lam_next - lam) < 1e-9 * lam:
            break
        lam = 0.5 * (lam + lam_next)
    return lam


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
    table = prefill_table(c, wl)
    alone = table.alone_s
    n = _running_per_instance(lay, wl, lay.workers)
    step = _decode(c, wl, n / lay.dp)
    d = d_full = step.total_s
    if wl.rate_per_s is None:
        # closed loop: with fixed lengths the requests admitted together finish together and
        # their successors arrive together, so prefill steps run full
        capacity = n * s / (d * out + n * s * table.full_per_request_s)
    else:  # open loop: a prefill step batches what arrived since the last one
        capacity = colocated_rate(n, s, d, out, table)
    lam, bound = capacity, "decode"
    if wl.rate_per_s is not None:
        offered = wl.rate_per_s / lay.workers
        if offered < capacity:
            lam, bound = offered, "load"
            # fewer requests in flight at this rate: Little's law n = lam * (time in system)
            for _ in range(30):
                d_n = _decode(c, wl, n / lay.dp).total_s
                busy = min(lam * table.per_request_at(lam, d_n), MAX_UTILISATION)
                tpot_n = d_n / (s * (1 - busy))
                n = min(float(lay.requests_per_instance), max(1.0, lam * (out * tpot_n + alone)))
            step = _decode(c, wl, n / lay.dp)
            d = step.total_s
    p = (table.per_request_at(lam, d) if wl.rate_per_s is not None
         else table.full_per_request_s)
    rho = min(lam * p, MAX_UTILISATION)
    tpot = d / (s * (1.0 - rho)) if out else 0.0
    rho_full = min(lam * (table.per_request_at(lam, d_full) if wl.rate_per_s is not None
                          else table.full_per_request_s), MAX_UTILISATION)
    tpot_full = d_full / (s * (1.0 - rho_full)) if out else 0.0
    if wl.rate_per_s is not None:
        slot = slot_wait(lam, alone, tpot, out, lay.requests_per_instance, wl.osl_scv)
    else:  # closed loop: the requests beyond the slots wait their turn (Little's law)
        extra = (wl.concurrency or 0) / lay.workers - lay.requests_per_instance
        slot = (extra / lam, 1.0) if extra > 0 and lam > 0 else (0.0, 0.0)
    ttft = colocated_ttft(alone, d, lam, p, out, slot, wl.isl_scv)
    pe = PoolEstimate("colocated", gpu.name, lay, mem, step, lam * lay.workers,
                      capacity * lay.workers, rho)
    return ServingEstimate("colocated", lay.gpus, ttft, tpot, lam * lay.workers,
                           lam * lay.workers * wl.osl, (pe,), mem.fits, 0.0, bound,
                           max(tpot, tpot_full))


def _transfer_s(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
                prefill: PoolSpec, decode: PoolSpec, gpu_name: str) -> float:
    """KV of one request from a prefill GPU to a decode GPU: pools sit on disjoint ranks (the
    prefill pool first, unless they start in different node groups); the link is what
    ``group_view`` of the two ranks sees."""
    n = cluster.num_gpus
    src = prefill.first_rank
    dst = (decode.first_rank if decode.first_rank != prefill.first_rank
           else min(src + prefill.layout.gpus, n - 1))
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


@dataclass(frozen=True)
class DecodeSide:
    """What the prefill/decode arithmetic needs of a decode side: ``step_at(n)`` is the decode
    step with ``n`` requests running per worker (decode instance, or AFD unit), ``full`` the
    most a worker runs, ``workers`` how many there are, and ``transfer_to`` the pool the
    prefill pool sends KV to."""

    step_at: object  # Callable[[float], StepTime]
    full: float
    workers: int
    transfer_to: PoolSpec


def _disagg(model, dep: Deployment, wl, cluster, cal, gpus) -> ServingEstimate:
    dec = dep.pool("decode")
    cd = costing(model, dec, wl, cluster, cal, gpus[dec.gpu], dep.cuda_graphs,
                 dep.overlap_comm)
    mem_d = pool_memory(model, dec.layout, wl, gpus[dec.gpu].hbm_bytes, cd.sprof,
                        cd.prof.reserved_bytes)
    side = DecodeSide(lambda n: _decode(cd, wl, n / dec.layout.dp),
                      _running_per_instance(dec.layout, wl, dec.layout.workers),
                      dec.layout.workers, dec)
    pre_est, lam, step, decode_cap, ttft, transfer, bound = prefill_and_decode(
        model, dep, wl, cluster, cal, gpus, side)
    tpot = step.total_s / wl.tokens_per_step if wl.osl > 1 else 0.0
    pes = (pre_est, PoolEstimate("decode", dec.gpu, dec.layout, mem_d, step, lam, decode_cap,
                                 lam / decode_cap if decode_cap else 0.0))
    return ServingEstimate("disagg", dep.gpus, ttft, tpot, lam, lam * wl.osl, pes,
                           pre_est.memory.fits and mem_d.fits, transfer, bound)


def prefill_and_decode(model, dep: Deployment, wl: ServingWorkload, cluster: Cluster,
                       cal: Calibration, gpus: dict[str, GpuSpec], side: DecodeSide):
    """A prefill pool feeding a decode side (module docstring, disaggregated): the prefill
    pool's estimate, the rate, the decode step at that rate, the decode side's capacity,
    TTFT, the KV transfer time and what bounds the rate."""
    pre = dep.pool("prefill")
    cp = costing(model, pre, wl, cluster, cal, gpus[pre.gpu], dep.cuda_graphs,
                 dep.overlap_comm)
    mem_p = pool_memory(model, pre.layout, wl, gpus[pre.gpu].hbm_bytes, cp.sprof,
                        cp.prof.reserved_bytes)
    s, out = wl.tokens_per_step, max(wl.osl - 1, 0)
    table = prefill_table(cp, wl)
    prefill_cap = pre.layout.workers / table.full_per_request_s
    n = side.full
    step = side.step_at(n)
    decode_cap = side.workers * (n * s / (step.total_s * out) if out else math.inf)
    lam = min(prefill_cap * MAX_UTILISATION, decode_cap)
    bound = "prefill" if prefill_cap * MAX_UTILISATION < decode_cap else "decode"
    if wl.rate_per_s is not None:  # the decode batch settles where Little's law puts it
        if wl.rate_per_s < lam * (1 - 1e-9):
            bound = "load"
        lam = min(lam, wl.rate_per_s)
        per_worker = lam / side.workers
        n = min(side.full, max(1.0, per_worker * out * step.total_s / s))
        for _ in range(20):
            step = side.step_at(n)
            n = min(side.full, max(1.0, per_worker * out * step.total_s / s))
    transfer = _transfer_s(model, wl, cluster, cal, pre, side.transfer_to, pre.gpu)
    p = table.per_request_at(lam / pre.layout.workers, 0.0)
    rho = lam * p / pre.layout.workers
    ttft = prefill_pool_ttft(table, lam, pre.layout.workers, transfer, wl.isl_scv)
    new = max(1.0, wl.new_input_tokens)
    pre_est = PoolEstimate("prefill", pre.gpu, pre.layout, mem_p,
                           prefill_step(cp, (new,), wl.isl - new), lam, prefill_cap, rho)
    return pre_est, lam, step, decode_cap, ttft, transfer, bound


def estimate(model: ModelSpec, dep: Deployment, wl: ServingWorkload, cluster: Cluster,
             gpus: dict[str, GpuSpec], cal: Calibration, overlap_comm: bool = False
             ) -> ServingEstimate:
    """Predict ``dep`` under ``wl`` (module docstring). ConfigError for a layout that cannot
    shard the model."""
    dep = replace(dep, overlap_comm=overlap_comm or dep.overlap_comm)
    if dep.mode == "afd":
        from planner.serving.afd import estimate_afd  # afd builds on this module
        return estimate_afd(model, dep, wl, cluster, gpus, cal)
    if dep.mode == "colocated":
        pool = dep.pool("colocated")
        return _colocated(model, pool, wl, cluster, cal, gpus[pool.gpu], dep)
    return _disagg(model, dep, wl, cluster, cal, gpus)
