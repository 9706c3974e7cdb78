"""The serving Plan of one deployment: a pool per role on disjoint nodes, the engine instances
and the router (the ``serving`` section of ``docs/serving.md``).

Each pool is a mesh of ``tp * pp * (dp * workers)`` ranks in the one rank order
(:func:`cost_models.parallel.rank_grid`): attention-DP ranks of all instances form the data
axis, and instance ``i`` owns data ranks ``i*dp .. (i+1)*dp - 1``. Pools take whole nodes of
their GPU type, prefill first.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from cost_models.parallel import Degrees
from cost_models.serving.config import ServingWorkload
from planner import __version__
from planner.plan.fabric import serving_fabric_section
from planner.plan.document import SCHEMA_VERSION, Plan, inputs_hash, model_to_plain, cluster_to_plain
from planner.plan.ranks import make_pool
from planner.serving.estimate import Calibration, Deployment, ServingEstimate
from planner.serving.sites import instance_ranks, island_order, sites
from cost_models.model_spec import ModelSpec
from cost_models.profile import profile_to_dict
from topologies.cluster import Cluster, runs_on_sockets

FIRST_PORT = 30000
ROUTER_PORT = 8000
ROLE_ORDER = ("prefill", "colocated", "decode", "attention", "ffn")


def pool_degrees(dep_pool) -> Degrees:
    lay = dep_pool.layout
    return Degrees(tp=lay.tp, pp=lay.pp, dp=lay.dp * lay.workers, cp=1, ep=lay.ep,
                   etp=lay.expert_tp)


def _position_sets(pool, lay) -> list[list[int]]:
    """The pool's node positions (node ranks) that must share one network: those of each
    instance, merged where instances share a node; each set ascending, sets by first
    position."""
    parent = list(range(len(pool.nodes)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first: dict[int, int] = {}
    for r in pool.rank_rows():
        inst = r["dp"] // lay.dp
        here = find(r["node_rank"])
        there = find(first.setdefault(inst, r["node_rank"]))
        parent[max(here, there)] = min(here, there)
    sets: dict[int, list[int]] = {}
    for pos in range(len(pool.nodes)):
        sets.setdefault(find(pos), []).append(pos)
    return sorted(sets.values())


def _instances(pool, role: str, lay) -> list[dict[str, Any]]:
    """Per instance the hosts and local GPUs of its ranks, in rank order."""
    rows = pool.rank_rows()
    nodes = {n["node_rank"]: n for n in pool.nodes}
    out = []
    for i in range(lay.workers):
        mine = [r for r in rows if r["dp"] // lay.dp == i]
        per_node: dict[int, list[int]] = {}
        for r in sorted(mine, key=lambda r: r["rank"]):
            per_node.setdefault(r["node_rank"], []).append(r["local"])
        out.append({"role": role, "index": i, "nodes": [
            {"host": nodes[nr]["host"], "cluster_node": nodes[nr]["node"], "gpus": sorted(g)}
            for nr, g in per_node.items()]})
    return out


MAX_LENGTH_SAMPLE = 2000  # request lengths a plan keeps for the simulator (every k-th)


def _sample(lengths) -> list[list[int]]:
    """At most ``MAX_LENGTH_SAMPLE`` (input, output) pairs, evenly strided over the file."""
    pairs = list(zip(lengths.input_tokens, lengths.output_tokens))
    stride = max(1, -(-len(pairs) // MAX_LENGTH_SAMPLE))
    return [list(p) for p in pairs[::stride]]


def _ports(instances: list[dict[str, Any]]) -> None:
    """Ports count up from FIRST_PORT per instance on the host of its first node."""
    next_port: dict[str, int] = {}
    for inst in instances:
        host = inst["nodes"][0]["host"]
        inst["port"] = next_port.get(host, FIRST_PORT)
        next_port[host] = inst["port"] + 1


def build_serving_plan(model: ModelSpec, cluster: Cluster, dep: Deployment,
                       wl: ServingWorkload, est: ServingEstimate, cal: Calibration,
                       objective: str = "goodput", why: str = "",
                       model_path: str | None = None, notes: list[str] | None = None,
                       lengths=None) -> Plan:
    """The Plan of ``dep`` (the caller validates it before writing)."""
    pools, instances, used = [], [], set()
    site_of = {site.gpu.name: site for site in sites(cluster)}
    ordered = sorted(dep.pools, key=lambda p: ROLE_ORDER.index(p.role))
    for spec in ordered:
        d = pool_degrees(spec)
        site = site_of[spec.gpu]  # the nodes of the pool's GPU type
        free = [n for n in site.nodes if n not in used]
        per_node = site.gpus_per_node
        count = -(-d.num_gpus // per_node)
        if d.num_gpus % per_node or count > len(free):
            raise ValueError(f"pool {spec.role}: {d.num_gpus} GPUs is not whole nodes of "
                             f"{per_node} {spec.gpu} GPUs among the {len(free)} free")
        order = free[:count]
        pool = make_pool(spec.role, spec.role, cluster, d, order)
        order, spanning = island_order(cluster, free, _position_sets(pool, spec.layout))
        if order != free[:count]:
            pool = make_pool(spec.role, spec.role, cluster, d, order)
        if spanning:
            lay = spec.layout
            priced = instance_ranks(cluster, lay.tp * lay.dp * lay.pp, site.first_rank)
            on_sockets = runs_on_sockets([cluster.node_groups[cluster.locate(r)[0]]
                                          for r in priced])
            how = ("the estimate prices them so (no network holds one)" if on_sockets else
                   "the estimate does not price that (it prices an instance one network holds)")
            notes = [*(notes or []), f"{spec.role} pool: {spanning} engine instance(s) span RDMA "
                     f"networks (no network has enough free nodes): their collectives run on "
                     f"TCP sockets; {how}"]
        used.update(order)
        pools.append(pool)
        instances += _instances(pool, spec.role, spec.layout)
    _ports(instances)
    gpu0 = dep.pools[0].gpu
    inputs = {"model": model_to_plain(model), "cluster": cluster_to_plain(cluster),
              "workload": asdict(wl), "profile": profile_to_dict(cal.profiles[gpu0]),
              "serving_profile": asdict(cal.serving[gpu0]), "objective": objective}
    others = sorted({p.gpu for p in dep.pools} - {gpu0})
    if others:  # several GPU types: every type's profiles
        inputs["profiles"] = {g: {"profile": profile_to_dict(cal.profiles[g]),
                                  "serving_profile": asdict(cal.serving[g])}
                              for g in [gpu0, *others]}
    serving = {
        "mode": dep.mode, "engine": dep.engine,
        "model_path": model_path or model.name,
        "precision": wl.precision, "kv_dtype": wl.kv_dtype,
        "max_model_len": wl.isl + wl.osl,
        "workload": {"isl": wl.isl, "osl": wl.osl, "rate_per_s": wl.rate_per_s,
                     "concurrency": wl.concurrency, "ttft_ms": wl.ttft_ms,
                     "tpot_ms": wl.tpot_ms, "prefix_hit": wl.prefix_hit,
                     **({"lengths": _sample(lengths)} if lengths is not None else {})},
        "pools": [{"role": p.role, "gpu": p.gpu, **p.layout.as_dict(),
                   "gpus_per_instance": p.layout.gpus_per_instance} for p in ordered],
        **({"micro_batches": dep.micro_batches} if dep.mode == "afd" else {}),
        "instances": instances,
        "router": {"host": instances[0]["nodes"][0]["host"], "port": ROUTER_PORT},
    }
    prediction = est.as_dict(wl)
    prediction["why"] = why
    return Plan(schema_version=SCHEMA_VERSION, kind="serving", planner_version=__version__,
                inputs_hash=inputs_hash(inputs), inputs=inputs, pools=pools,
                prediction=prediction, serving=serving, notes=list(notes or []),
                fabric=serving_fabric_section(cluster, pools, instances))
