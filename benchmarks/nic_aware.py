"""NIC-aware placement on Holmes-style clusters (issue 20).

    python benchmarks/nic_aware.py

For each scenario and model, ``planner solve`` picks degrees and a placement; we report its
predicted step time, the same degrees in the cluster's listing order (NIC-oblivious, Megatron's
order: ``prediction.listing_order``), and the best plan on an all-InfiniBand cluster of the same
size. An independent check (this file, not the planner's code) reads the plan's rank groups and
counts the tensor-, data-, context- and expert-parallel groups whose nodes are not all on one
RDMA network (same transport and island). Listing orders: "interleaved" (hosts sorted by name
across racks: IB, RoCE, TCP, IB, ...) and "grouped" (the spec's own group order).

Scenarios (Holmes, Yang et al. 2023, sec. 5): 4 IB + 4 RoCE + 4 TCP-only nodes (RoCE nodes also
have a 100G TCP port, which NCCL's sockets use); 5 IB + 3 RoCE + 4 TCP-only; two RoCE islands of
6 nodes without RDMA between them, their 400G ports carrying TCP between the islands. Models:
Llama-3.1-70B and Qwen3-30B-A3B with EP 16.

Also the mapping solver alone on 1,024 nodes in three NIC classes (time and gap).

Writes ``benchmarks/results/nic_aware.json`` and prints a markdown table.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.plan.file import load_plan  # noqa: E402
from solvers.mapping import MappingProblem, solve_mapping  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "nic_aware.json"
GROUP_KINDS = ("tp", "cp", "dp", "dp_cp", "ep", "edp")


def _node(name: str, transport: str, island: str | None = None) -> dict:
    nics = [{"count": 8, "gbps": 400 if transport != "tcp" else 100, "transport": transport}]
    if transport == "roce" and island is None:  # a separate 100G management/TCP port
        nics.append({"count": 1, "gbps": 100, "transport": "tcp"})
    g = {"name": name, "count": 1, "gpu": "H100", "gpus_per_node": 8, "fabric": "nvswitch",
         "nics": nics}
    if island:
        g["rdma_island"] = island
    return g


def scenario(kinds: list[tuple[str, str | None]], order: str) -> dict:
    """One node group per node (so the listing order is explicit)."""
    nodes = list(kinds)
    if order == "interleaved":
        by_kind: dict[tuple, list] = {}
        for k in nodes:
            by_kind.setdefault(k, []).append(k)
        nodes = []
        while any(by_kind.values()):
            for k in list(by_kind):
                if by_kind[k]:
                    nodes.append(by_kind[k].pop())
    groups = [_node(f"n{i:02d}", t, isl) for i, (t, isl) in enumerate(nodes)]
    return {"name": "holmes", "node_groups": groups,
            "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 16}]}}


SCENARIOS = {
    "4ib+4roce+4tcp": [("ib", None)] * 4 + [("roce", None)] * 4 + [("tcp", None)] * 4,
    "5ib+3roce+4tcp": [("ib", None)] * 5 + [("roce", None)] * 3 + [("tcp", None)] * 4,
    "2 roce islands (6+6)": [("roce", "a")] * 6 + [("roce", "b")] * 6,
}
MODELS = {"llama-3.1-70b": [], "qwen3-30b-a3b": ["--ep", "16"]}


def network_of(group: dict) -> tuple:
    nics = group["nics"]
    best = max(nics, key=lambda n: n["gbps"] * n["count"])["transport"]
    return ("tcp",) if best == "tcp" else (best, group.get("rdma_island") or "")


def off_network_groups(plan) -> dict[str, int]:
    """Groups of each kind whose nodes are on more than one RDMA network (independent of the
    planner's own transport code: reads the plan's rank table and the cluster spec)."""
    spec = plan.inputs["cluster"]
    node_net = []
    for g in spec["node_groups"]:
        node_net += [network_of(g)] * g["count"]
    pool = plan.pools[0]
    node_of_rank = {row["rank"]: pool.node_order[row["node_rank"]] for row in pool.rank_rows()}
    out = {}
    for kind in GROUP_KINDS:
        groups = pool.groups.get(kind, [])
        bad = sum(len({node_net[node_of_rank[r]] for r in members}) > 1 for members in groups)
        out[kind] = bad
    return out


def solve(spec: dict, model: str, extra: list[str], tmp: Path, tag: str) -> dict:
    from typer.testing import CliRunner

    from planner.cli.app import app
    path, out = tmp / f"{tag}.yaml", tmp / f"{tag}.plan.json"
    path.write_text(yaml.safe_dump(spec))
    t0 = time.perf_counter()
    res = CliRunner().invoke(app, ["solve", "--cluster", str(path), "--model", model,
                                   "--global-batch", "512", *extra, "--out", str(out)])
    wall = time.perf_counter() - t0
    if res.exit_code != 0:
        return {"error": res.output.strip().splitlines()[-1:], "seconds": wall}
    plan = load_plan(out)
    pred = plan.prediction
    listed = pred.get("listing_order") or {"step_time_s": pred["step_time_s"], "speedup": 1.0,
                                           "socket_groups": {}, "socket_groups_placed": {}}
    d = plan.pools[0].degrees
    return {"step_time_s": pred["step_time_s"], "degrees": {k: d.get(k, 1) for k in
                                                            ("tp", "pp", "dp", "cp", "ep")},
            "node_order": plan.pools[0].node_order, "listing_order": listed,
            "off_network_groups": off_network_groups(plan), "seconds": wall}


def all_ib(nodes: int) -> dict:
    return {"name": "all-ib", "node_groups": [
        {"name": "ib", "count": nodes, "gpu": "H100", "gpus_per_node": 8, "fabric": "nvswitch",
         "nics": [{"count": 8, "gbps": 400, "transport": "ib"}]}],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 16}]}}


def big_mapping() -> dict:
    """1,024 nodes in three NIC classes (IB 400, RoCE 512, TCP 112), 16 stages of 64 nodes."""
    classes = [(400, 1.0, 0.55), (512, 0.97, 0.5), (112, 0.6, 0.6)]
    gpus, speed, net, sock = [], [], [], []
    for k, (count, v, s) in enumerate(classes):
        gpus += [8] * count
        speed += [v] * count
        net += [k] * count
        sock += [s] * count
    n = len(gpus)
    interleaved = sorted(range(n), key=lambda u: (u % 3, u))  # listing mixes the classes
    p = MappingProblem([gpus[u] for u in interleaved], [speed[u] for u in interleaved],
                       [u // 32 for u in range(n)], num_stages=16, gpus_per_stage=8 * 64,
                       unit_network=[net[u] for u in interleaved],
                       unit_socket_speed=[sock[u] for u in interleaved], time_limit_s=10.0)
    t0 = time.perf_counter()
    m = solve_mapping(p)
    secs = time.perf_counter() - t0
    gap = (m.bound - m.objective) / m.bound if m.bound else 0.0
    mixed = sum(len({p.unit_network[u] for u in st}) > 1 for st in m.stage_units)
    return {"nodes": n, "classes": 3, "stages": 16, "seconds": secs, "optimal": m.optimal,
            "objective": m.objective, "bound": m.bound, "gap": gap, "mixed_stages": mixed}


def main() -> int:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, kinds in SCENARIOS.items():
            for model, extra in MODELS.items():
                ib = solve(all_ib(len(kinds)), model, extra, tmp, "ib")
                for order in ("interleaved", "grouped"):
                    tag = f"{len(results)}"
                    r = solve(scenario(kinds, order), model, extra, tmp, tag)
                    r.update({"scenario": name, "model": model, "listing": order,
                              "all_ib_step_time_s": ib.get("step_time_s")})
                    results.append(r)
                    print(f"{name} {model} {order}: {r.get('step_time_s')}", file=sys.stderr)
    big = big_mapping()
    doc = {"cases": results, "mapping_1024_nodes": big}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print("| scenario | model | listing | degrees | NIC-aware s/step | listing order s/step "
          "(x) | all-IB s/step (aware / all-IB) | groups off one network: aware / listing |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['scenario']} | {r['model']} | {r['listing']} | error: {r['error']} "
                  "| | | | |")
            continue
        d = r["degrees"]
        lo = r["listing_order"]
        off = sum(r["off_network_groups"].values())
        listed_off = sum(v for k, v in lo["socket_groups"].items() if k != "pp")
        ib = r["all_ib_step_time_s"]
        print(f"| {r['scenario']} | {r['model']} | {r['listing']} | tp{d['tp']} pp{d['pp']} "
              f"dp{d['dp']} ep{d['ep']} | {r['step_time_s']:.2f} | {lo['step_time_s']:.2f} "
              f"({lo['speedup']:.2f}x) | {ib:.2f} ({r['step_time_s'] / ib:.2f}) | {off} / "
              f"{listed_off} |")
    print(f"\nmapping, {big['nodes']} nodes in {big['classes']} NIC classes, {big['stages']} "
          f"stages: {big['seconds']:.2f} s, optimal {big['optimal']}, gap {big['gap']:.2%}, "
          f"stages spanning networks {big['mixed_stages']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
