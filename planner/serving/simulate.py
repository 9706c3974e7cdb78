"""A serving deployment through the request-level simulator (:mod:`solvers.serving.simulator`).

The simulator's step times come from the same cost model as the closed forms of
:mod:`planner.serving.estimate`, so the two differ only in what the closed forms assume about
scheduling (steady batch, batched prefills, Poisson queueing):

* decode step of an instance running ``batch`` requests holding ``context`` KV tokens:
  ``decode_step(costing, batch / dp, context / batch, 1)`` (requests spread evenly over the
  ``dp`` attention ranks; one token per step: MTP is not simulated);
* prefill step over prompts ``lens``: the prompts are dealt round-robin to the ``dp`` attention
  ranks, which prefill in parallel; the step takes the slowest rank's ``prefill_step``, divided
  by ``pp`` (pipeline stages overlap successive prefills, as ``prefill_per_request_s`` assumes).
  Each rank has its own chunk budget, so an instance admits ``PREFILL_CHUNK_TOKENS * dp``
  prompt tokens per step. A prefix-cache hit ``h`` makes ``len * (1 - h)`` tokens new;
* KV per instance: ``kv_capacity_tokens`` of one attention rank times ``dp``; requests per
  instance: ``batch * dp`` (a prefill pool: the prompts one chunk per rank holds, whatever
  its ``batch``).

Loads: the workload's ``rate_per_s`` (Poisson), its ``concurrency`` (closed loop), or else a
closed loop that keeps every attention rank at its full ``batch``.
"""
from __future__ import annotations

import random

from dataclasses import replace
from functools import lru_cache

from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile
from cost_models.serving.config import PoolLayout, ServingWorkload
from cost_models.serving.latency import decode_step, prefill_step
from cost_models.serving.memory import PREFILL_CHUNK_TOKENS, pool_memory
from cost_models.serving.profile import ServingProfile
from planner.plan.document import Plan
from planner.serving.estimate import Calibration, Deployment, PoolSpec, _transfer_s, costing
from solvers.serving.simulator import LatencyModel, PoolSim, SimProblem, SimResult, simulate
from topologies.catalog import GpuSpec
from topologies.cluster import Cluster

MIN_ROUNDS = 5  # simulate_plan: requests >= this many times the deployment's in-flight room
WARMUP = 0.3  # simulate_plan: requests left out while the deployment fills (> 1 round)

__all__ = ["latency_model", "pool_sim", "simulation_problem", "deployment_of_plan",
           "simulate_plan"]


def latency_model(model: ModelSpec, pool: PoolSpec, wl: ServingWorkload, cluster: Cluster,
                  gpu: GpuSpec, cal: Calibration, dep: Deployment | None = None
                  ) -> LatencyModel:
    """Step times of one instance of ``pool`` (module docstring)."""
    graphs = dep.cuda_graphs if dep is not None else True
    overlap = dep.overlap_comm if dep is not None else False
    c = costing(model, pool, wl, cluster, cal, gpu, graphs, overlap)
    lay = pool.layout
    hit = wl.prefix_hit

    @lru_cache(maxsize=None)
    def decode_at(batch: int, context_per_request: int) -> float:
        return decode_step(c, batch / lay.dp, float(context_per_request), 1.0).total_s

    def decode_s(batch: int, context_tokens: int) -> float:
        return decode_at(batch, max(1, round(context_tokens / max(batch, 1))))

    @lru_cache(maxsize=None)
    def prefill_ranks(rank_lens: tuple[tuple[int, ...], ...]) -> float:
        worst = 0.0
        for lens in rank_lens:
            if not lens:
                continue
            # one cached length per call: use the mean prefix of the rank's prompts
            new = tuple(max(1.0, n * (1.0 - hit)) for n in lens)
            cached = sum(n - m for n, m in zip(lens, new)) / len(lens)
            worst = max(worst, prefill_step(c, new, cached).total_s)
        return worst / lay.pp

    def prefill_s(lens: tuple[int, ...]) -> float:
        ranks = tuple(tuple(sorted(lens[r::lay.dp])) for r in range(lay.dp))
        return prefill_ranks(ranks)

    return LatencyModel(prefill_s, decode_s)


def pool_sim(model: ModelSpec, pool: PoolSpec, wl: ServingWorkload, gpu: GpuSpec,
             cal: Calibration) -> PoolSim:
    """The simulator's view of ``pool``; ValueError when one request's KV (isl + osl) does
    not fit an attention rank."""
    lay = pool.layout
    prof, sprof = cal.profiles[gpu.name], cal.serving[gpu.name]
    mem = pool_memory(model, lay, wl, gpu.hbm_bytes, sprof, prof.reserved_bytes)
    if mem.kv_capacity_tokens < wl.isl + wl.osl:
        raise ValueError(f"{pool.role} pool: one attention rank holds {mem.kv_capacity_tokens} "
                         f"KV tokens, a request needs isl + osl = {wl.isl + wl.osl}")
    batch = lay.batch * lay.dp
    if pool.role == "prefill":  # a prefill batch is what one chunk per rank holds
        batch = lay.dp * max(1, int(PREFILL_CHUNK_TOKENS // max(1.0, wl.new_input_tokens)))
    return PoolSim(instances=lay.workers, max_batch=batch,
                   kv_capacity_tokens=mem.kv_capacity_tokens * lay.dp,
                   max_prefill_tokens=PREFILL_CHUNK_TOKENS * lay.dp)


def _load(wl: ServingWorkload, serving_pool: PoolLayout) -> dict:
    if wl.rate_per_s is not None:
        return {"arrival_rate_per_s": float(wl.rate_per_s)}
    if wl.concurrency is not None:
        return {"concurrency": int(wl.concurrency)}
    return {"concurrency": serving_pool.workers * serving_pool.batch * serving_pool.dp}


def _gpu(cluster: Cluster, name: str) -> GpuSpec:
    """The GPU type ``name`` of one of the cluster's node groups."""
    return next(g.gpu for g in cluster.node_groups if g.gpu.name == name)


def simulation_problem(model: ModelSpec, deployment: Deployment, wl: ServingWorkload,
                       cluster: Cluster, cal: Calibration, requests: int = 4000,
                       seed: int = 0, warmup_fraction: float = 0.1,
                       lengths: list | None = None) -> SimProblem:
    """``requests`` requests of ``wl.isl`` in, ``wl.osl`` out on ``deployment`` (each pool on
    the GPU type it names), loaded as the module docstring says."""
    if requests < 1:
        raise ValueError(f"requests must be >= 1, got {requests}")
    if lengths:  # replay the sample, shuffled with the seed
        order = random.Random(seed).sample(range(len(lengths)), len(lengths))
        picked = [lengths[order[i % len(order)]] for i in range(requests)]
        lens = {"input_lens": tuple(int(a) for a, _ in picked),
                "output_lens": tuple(int(b) for _, b in picked)}
    else:
        lens = {"input_lens": (wl.isl,) * requests, "output_lens": (wl.osl,) * requests}
    if deployment.mode == "colocated":
        pool = deployment.pool("colocated")
        gpu = _gpu(cluster, pool.gpu)
        return SimProblem(mode="colocated",
                          latency=latency_model(model, pool, wl, cluster, gpu, cal, deployment),
                          pool=pool_sim(model, pool, wl, gpu, cal), seed=seed,
                          warmup_fraction=warmup_fraction, **lens, **_load(wl, pool.layout))
    if deployment.mode == "afd":
        return _afd_problem(model, deployment, wl, cluster, cal, seed, warmup_fraction, lens)
    pre, dec = deployment.pool("prefill"), deployment.pool("decode")
    transfer_s = _kv_transfer(model, wl, cluster, cal, pre, dec)

    g_pre, g_dec = _gpu(cluster, pre.gpu), _gpu(cluster, dec.gpu)
    return SimProblem(mode="disagg",
                      latency=latency_model(model, dec, wl, cluster, g_dec, cal, deployment),
                      pool=pool_sim(model, dec, wl, g_dec, cal),
                      prefill_latency=latency_model(model, pre, wl, cluster, g_pre, cal,
                                                    deployment),
                      prefill_pool=pool_sim(model, pre, wl, g_pre, cal),
                      kv_transfer_s=transfer_s, seed=seed,
                      warmup_fraction=warmup_fraction, **lens, **_load(wl, dec.layout))


def _kv_transfer(model: ModelSpec, wl: ServingWorkload, cluster: Cluster, cal: Calibration,
                 pre: PoolSpec, dest: PoolSpec):
    """Seconds to move the KV of a prompt of ``tokens`` tokens from the prefill pool to
    ``dest`` (memoised by length)."""
    @lru_cache(maxsize=None)
    def transfer_s(tokens: int) -> float:
        return _transfer_s(model, replace(wl, isl=max(1, int(tokens))), cluster, cal, pre,
                           dest, pre.gpu)
    return transfer_s


def _afd_problem(model: ModelSpec, dep: Deployment, wl: ServingWorkload, cluster: Cluster,
                 cal: Calibration, seed: int, warmup_fraction: float, lens: dict) -> SimProblem:
    """A prefill pool feeding AFD units: each unit is one decode "instance" of the simulator
    whose step is the unit's ping-pong step (:func:`planner.serving.afd.unit_step_s`) for the
    requests it runs; its KV room is its attention instances'."""
    from planner.serving.afd import unit_of_deployment, unit_step_s
    pre, att = dep.pool("prefill"), dep.pool("attention")
    gpus = {g.gpu.name: g.gpu for g in cluster.node_groups}
    lay, unit = unit_of_deployment(model, dep, wl, cluster, gpus, cal)

    @lru_cache(maxsize=None)
    def decode_at(batch: int, context_per_request: int) -> float:
        return unit_step_s(unit, wl, lay, float(batch), float(context_per_request))

    def decode_s(batch: int, context_tokens: int) -> float:
        return decode_at(batch, max(1, round(context_tokens / max(batch, 1))))

    kv_token = unit.memory.kv_bytes_per_request / max(1.0, float(wl.isl + wl.osl))
    per_instance = int(max(0.0, unit.memory.attention_capacity_bytes
                           - unit.memory.attention_weights_bytes) // kv_token)
    if per_instance < wl.isl + wl.osl:
        raise ValueError(f"attention pool: one instance holds {per_instance} KV tokens, a "
                         f"request needs isl + osl = {wl.isl + wl.osl}")
    decode_pool = PoolSim(instances=dep.pool("ffn").layout.workers, max_batch=lay.requests,
                          kv_capacity_tokens=per_instance * lay.attention_ranks,
                          max_prefill_tokens=PREFILL_CHUNK_TOKENS)
    transfer_s = _kv_transfer(model, wl, cluster, cal, pre, att)
    g_pre = _gpu(cluster, pre.gpu)
    load = _load(wl, PoolLayout(batch=lay.requests, workers=decode_pool.instances))
    return SimProblem(mode="disagg", latency=LatencyModel(lambda lens: 0.0, decode_s),
                      pool=decode_pool,
                      prefill_latency=latency_model(model, pre, wl, cluster, g_pre, cal, dep),
                      prefill_pool=pool_sim(model, pre, wl, g_pre, cal),
                      kv_transfer_s=transfer_s, seed=seed, warmup_fraction=warmup_fraction,
                      **lens, **load)


def deployment_of_plan(plan: Plan) -> Deployment:
    """The Deployment a serving plan describes (pools in the plan's order, each starting at
    the first GPU of its first node)."""
    cluster = plan.cluster()
    first = {p.role: cluster.node_first_rank(p.node_order[0]) for p in plan.pools}
    pools = tuple(
        PoolSpec(p["role"], p["gpu"], PoolLayout(
            tp=p["tp"], pp=p["pp"], dp=p["dp"], ep=p["ep"], etp=p["etp"], batch=p["batch"],
            workers=p["workers"], redundant=p.get("redundant", 0)), first.get(p["role"], 0))
        for p in plan.serving["pools"])
    return Deployment(plan.serving["mode"], pools, plan.serving.get("engine", "sglang"),
                      micro_batches=int(plan.serving.get("micro_batches", 1)))


def calibration_of_plan(plan: Plan) -> Calibration:
    """The profiles a serving plan was made with (every GPU type's, when it has several)."""
    if "profiles" in plan.inputs:
        per = plan.inputs["profiles"]
        return Calibration({g: Profile(**v["profile"]) for g, v in per.items()},
                           {g: ServingProfile(**v["serving_profile"]) for g, v in per.items()})
    gpu = plan.serving["pools"][0]["gpu"]
    return Calibration({gpu: Profile(**plan.inputs["profile"])},
                       {gpu: ServingProfile(**plan.inputs["serving_profile"])})


def _stats(s) -> dict:
    return {"mean": s.mean_s, "p50": s.p50_s, "p90": s.p90_s, "p99": s.p99_s}


def _rel(sim: float, pred: float) -> float | None:
    return sim / pred - 1.0 if pred else None


def simulate_plan(plan: Plan, requests: int = 4000, seed: int = 0) -> dict:
    """Simulate a serving plan and set the result next to its closed-form prediction.

    The plan's prediction is at the request rate the search chose (its workload usually has no
    rate): without a rate or concurrency in the workload the simulation runs Poisson arrivals
    at the prediction's ``request_rate_per_s``. It simulates at least ``MIN_ROUNDS`` times the
    requests the deployment holds in flight and leaves the first ``WARMUP`` of
    them out (more than one fill).
    ValueError for a plan that is not serving."""
    if plan.kind != "serving" or plan.serving is None:
        raise ValueError(f"a serving plan, got a {plan.kind} plan")
    model, cluster = plan.model_spec(), plan.cluster()
    wl = ServingWorkload(**plan.inputs["workload"])
    pred = plan.prediction
    if wl.rate_per_s is None and wl.concurrency is None and pred.get("request_rate_per_s"):
        wl = replace(wl, rate_per_s=float(pred["request_rate_per_s"]))
    dep = deployment_of_plan(plan)
    cal = calibration_of_plan(plan)
    if dep.mode == "afd":  # in flight: every attention instance's batch
        att = dep.pool("attention").layout
        in_flight = att.workers * att.batch
    else:
        lay = dep.pools[-1].layout if dep.mode == "colocated" else dep.pool("decode").layout
        in_flight = lay.workers * lay.batch * lay.dp
    requests = max(requests, MIN_ROUNDS * in_flight)
    problem = simulation_problem(model, dep, wl, cluster, cal, requests, seed,
                                 warmup_fraction=WARMUP,
                                 lengths=plan.serving["workload"].get("lengths"))
    res: SimResult = simulate(problem)
    ttft_t = wl.ttft_ms / 1e3 if wl.ttft_ms else float("inf")
    tpot_t = wl.tpot_ms / 1e3 if wl.tpot_ms else float("inf")
    per_gpu = res.output_tokens_per_s / dep.gpus
    load = ({"kind": "rate", "rate_per_s": wl.rate_per_s} if wl.rate_per_s is not None else
            {"kind": "concurrency", "concurrency": problem.concurrency})
    simulated = {"ttft_s": _stats(res.ttft), "tpot_s": _stats(res.tpot),
                 "e2e_s": _stats(res.e2e), "output_tokens_per_s": res.output_tokens_per_s,
                 "output_tokens_per_s_per_gpu": per_gpu,
                 "request_rate_per_s": res.request_rate_per_s,
                 "slo_attainment": res.slo_attainment(ttft_t, tpot_t),
                 "preemptions": res.preemptions, "mean_decode_batch": res.mean_decode_batch}
    predicted = {k: pred.get(k) for k in ("ttft_s", "ttft_p90_s", "ttft_p99_s", "tpot_s",
                                          "output_tokens_per_s_per_gpu", "request_rate_per_s")}
    relative = {"ttft_s": _rel(res.ttft.mean_s, predicted["ttft_s"] or 0.0),
                "ttft_p90_s": _rel(res.ttft.p90_s, predicted["ttft_p90_s"] or 0.0),
                "ttft_p99_s": _rel(res.ttft.p99_s, predicted["ttft_p99_s"] or 0.0),
                "tpot_s": _rel(res.tpot.mean_s, predicted["tpot_s"] or 0.0),
                "output_tokens_per_s_per_gpu": _rel(per_gpu,
                                                    predicted["output_tokens_per_s_per_gpu"]
                                                    or 0.0)}
    return {"mode": dep.mode, "gpus": dep.gpus, "requests": requests, "seed": seed,
            "load": load, "ttft_ms_target": wl.ttft_ms, "tpot_ms_target": wl.tpot_ms,
            "simulated": simulated, "predicted": predicted, "relative_difference": relative}
