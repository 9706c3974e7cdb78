"""NIC-aware placement on Holmes-style clusters (issue 20).

    python benchmarks/nic_aware.py

For each scenario and model, ``planner solve`` picks degrees and a placement (every TP/CP/DP/EP
group on one RDMA network whenever some plan allows it); we report its predicted step time, two
NIC-oblivious baselines, and the best plan on an all-InfiniBand cluster of the same size. The
baselines: the same degrees in the cluster's listing order (Megatron's order:
``prediction.listing_order``), and the plan a NIC-oblivious planner would choose: the all-IB
plan's configuration (degrees, schedule, options and layer split), run in the mixed cluster's
listing order and priced by the same cost model on the mixed cluster. An independent check (this file, not the planner's code) reads the plan's rank groups and
counts the tensor-, data-, context- and expert-parallel groups whose nodes are not all on one
RDMA network (same transport and island). Listing orders: "interleaved" (hosts sorted by name
across racks: IB, RoCE, TCP, IB, ...) and "grouped" (the spec's own group order).

Scenarios (Holmes, Yang et al. 2023, sec. 5): 4 IB + 4 RoCE + 4 TCP-only nodes (RoCE nodes also
have a 100G TCP port, which NCCL's sockets use); 5 IB + 3 RoCE + 4 TCP-only; two RoCE islands of
6 nodes without RDMA between them, their 400G ports carrying TCP between the islands. Models:
Llama-3.1-70B and Qwen3-30B-A3B with EP 16.

Also the mapping solver alone on 1,024 nodes in three NIC classes (time and gap), with mixed
stages allowed and with the containment rule (16 stages: infeasible; 128 stages: solved).

And ``planner solve`` itself on those 1,024 nodes (Llama-3.1-70B), with the rule and without.

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


def node_networks(spec: dict) -> list[tuple]:
    node_net = []
    for g in spec["node_groups"]:
        node_net += [network_of(g)] * g["count"]
    return node_net


def off_network_groups(plan) -> dict[str, int]:
    """Groups of each kind whose nodes are on more than one RDMA network (independent of the
    planner's own transport code: reads the plan's rank table and the cluster spec)."""
    node_net = node_networks(plan.inputs["cluster"])
    pool = plan.pools[0]
    node_of_rank = {row["rank"]: pool.node_order[row["node_rank"]] for row in pool.rank_rows()}
    out = {}
    for kind in GROUP_KINDS:
        groups = pool.groups.get(kind, [])
        bad = sum(len({node_net[node_of_rank[r]] for r in members}) > 1 for members in groups)
        out[kind] = bad
    return out


def oblivious(ib_plan_path: Path, plan_path: Path) -> dict:
    """The NIC-oblivious planner's plan: the all-IB plan's configuration in the mixed cluster's
    listing order, priced on the mixed cluster (model, workload and profile of the mixed plan),
    and its groups off one network (this file's reading: rank r on listed node r // 8)."""
    from cost_models.groups import groups_of
    from cost_models.training.step import estimate
    ib, mixed = load_plan(ib_plan_path), load_plan(plan_path)
    cfg = ib.parallel_config()
    est = estimate(mixed.model_spec(), mixed.cluster(), mixed.workload(), cfg, mixed.profile())
    node_net = node_networks(mixed.inputs["cluster"])
    gpus = mixed.inputs["cluster"]["node_groups"][0]["gpus_per_node"]
    off = {kind: sum(len({node_net[r // gpus] for r in members}) > 1
                     for members in groups_of(cfg.degrees, kind)) for kind in GROUP_KINDS}
    d = ib.pools[0].degrees
    return {"step_time_s": est.step_time_s, "fits": est.memory.fits,
            "degrees": {k: d.get(k, 1) for k in ("tp", "pp", "dp", "cp", "ep")},
            "schedule": ib.schedule, "off_network_groups": off}


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
    contained_note = [n for n in plan.notes if n.startswith("no contained plan")]
    listed = pred.get("listing_order") or {"step_time_s": pred["step_time_s"], "speedup": 1.0,
                                           "socket_groups": {}, "socket_groups_placed": {}}
    d = plan.pools[0].degrees
    return {"step_time_s": pred["step_time_s"], "degrees": {k: d.get(k, 1) for k in
                                                            ("tp", "pp", "dp", "cp", "ep")},
            "node_order": plan.pools[0].node_order, "listing_order": listed,
            "off_network_groups": off_network_groups(plan), "seconds": wall,
            "schedule": plan.schedule, "no_contained_plan": contained_note, "plan": str(out)}


def all_ib(nodes: int) -> dict:
    return {"name": "all-ib", "node_groups": [
        {"name": "ib", "count": nodes, "gpu": "H100", "gpus_per_node": 8, "fabric": "nvswitch",
         "nics": [{"count": 8, "gbps": 400, "transport": "ib"}]}],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 16}]}}


def big_mapping(num_stages: int = 16, contain: bool = False) -> dict:
    """1,024 nodes in three NIC classes (IB 400, RoCE 512, TCP 112) listed interleaved, cut into
    ``num_stages`` stages; ``contain``: no stage may span networks (16 stages of 64 nodes cannot
    be: 400 and 112 are not multiples of 64; 128 stages of 8 nodes can)."""
    from solvers.mapping import InfeasibleMapping
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
                       [u // 32 for u in range(n)], num_stages=num_stages,
                       gpus_per_stage=8 * n // num_stages,
                       unit_network=[net[u] for u in interleaved],
                       unit_socket_speed=[sock[u] for u in interleaved], time_limit_s=10.0,
                       contain_networks=contain)
    out = {"nodes": n, "classes": 3, "stages": num_stages, "contain": contain}
    t0 = time.perf_counter()
    try:
        m = solve_mapping(p)
    except InfeasibleMapping as err:
        return {**out, "seconds": time.perf_counter() - t0, "infeasible": str(err)}
    secs = time.perf_counter() - t0
    gap = (m.bound - m.objective) / m.bound if m.bound else 0.0
    mixed = sum(len({p.unit_network[u] for u in st}) > 1 for st in m.stage_units)
    return {**out, "seconds": secs, "optimal": m.optimal, "objective": m.objective,
            "bound": m.bound, "gap": gap, "mixed_stages": mixed}


def big_cluster() -> dict:
    """1,024 H100 nodes: 400 IB, 512 RoCE (with a 100G TCP port), 112 TCP-only, grouped."""
    def group(name: str, count: int, nics: list[dict]) -> dict:
        return {"name": name, "count": count, "gpu": "H100", "gpus_per_node": 8,
                "fabric": "nvswitch", "nics": nics}
    return {"name": "big3", "node_groups": [
        group("ib", 400, [{"count": 8, "gbps": 400, "transport": "ib"}]),
        group("roce", 512, [{"count": 8, "gbps": 400, "transport": "roce"},
                            {"count": 1, "gbps": 100, "transport": "tcp"}]),
        group("tcp", 112, [{"count": 8, "gbps": 100, "transport": "tcp"}])],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 32},
                              {"name": "spine", "nodes_per_switch": 1024}]}}


def big_solve(tmp: Path) -> list[dict]:
    """``planner solve`` (in process) of Llama-3.1-70B, global batch 4,096, top 3, on
    :func:`big_cluster`, with the containment rule and without."""
    out = []
    for tag, extra in (("contained", []), ("mixed allowed", ["--allow-mixed-networks"])):
        path, plan_path = tmp / "big.yaml", tmp / "big.plan.json"
        path.write_text(yaml.safe_dump(big_cluster()))
        from typer.testing import CliRunner

        from planner.cli.app import app
        t0 = time.perf_counter()
        res = CliRunner().invoke(app, ["solve", "--cluster", str(path), "--model",
                                       "llama-3.1-70b", "--global-batch", "4096", "--top-k", "3",
                                       *extra, "--out", str(plan_path)])
        wall = time.perf_counter() - t0
        if res.exit_code != 0:
            out.append({"case": tag, "error": res.output.strip().splitlines()[-1:]})
            continue
        plan = load_plan(plan_path)
        d = plan.pools[0].degrees
        out.append({"case": tag, "seconds": wall, "step_time_s": plan.prediction["step_time_s"],
                    "degrees": {k: d.get(k, 1) for k in ("tp", "pp", "dp", "cp", "ep")},
                    "off_network_groups": sum(off_network_groups(plan).values()),
                    "notes": plan.notes})
    return out


def _row(r: dict) -> str:
    if "error" in r:
        return f"| {r['scenario']} | {r['model']} | {r['listing']} | error: {r['error']} |" + \
            " |" * 7
    d, lo, ob = r["degrees"], r["listing_order"], r["oblivious"]
    off = sum(r["off_network_groups"].values())
    listed_off = sum(v for k, v in lo["socket_groups"].items() if k != "pp")
    ob_off = sum(ob["off_network_groups"].values())
    ib = r["all_ib_step_time_s"]
    od = ob["degrees"]
    contained = "no: " + r["no_contained_plan"][0].split(" (")[0].removeprefix(
        "no contained plan: ") if r["no_contained_plan"] else "yes"
    return (f"| {r['scenario']} | {r['model']} | {r['listing']} | tp{d['tp']} pp{d['pp']} "
            f"dp{d['dp']} ep{d['ep']} | {r['step_time_s']:.2f} | {lo['step_time_s']:.2f} "
            f"({lo['speedup']:.2f}x) | tp{od['tp']} pp{od['pp']} dp{od['dp']} ep{od['ep']}: "
            f"{ob['step_time_s']:.2f} ({ob['step_time_s'] / r['step_time_s']:.2f}x) | {ib:.2f} "
            f"({r['step_time_s'] / ib:.2f}) | {off} / {listed_off} / {ob_off} | {contained} |")


def _mapping_line(big: dict) -> str:
    head = (f"mapping, {big['nodes']} nodes in {big['classes']} NIC classes, {big['stages']} "
            f"stages, {'contained' if big['contain'] else 'mixed stages allowed'}: "
            f"{big['seconds']:.2f} s, ")
    if "infeasible" in big:
        return head + "infeasible (proved)"
    return head + (f"optimal {big['optimal']}, gap {big['gap']:.2%}, stages spanning networks "
                   f"{big['mixed_stages']}")


def main() -> int:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, kinds in SCENARIOS.items():
            for model, extra in MODELS.items():
                ib = solve(all_ib(len(kinds)), model, extra, tmp, f"ib{len(results)}")
                for order in ("interleaved", "grouped"):
                    tag = f"{len(results)}"
                    r = solve(scenario(kinds, order), model, extra, tmp, tag)
                    r.update({"scenario": name, "model": model, "listing": order,
                              "all_ib_step_time_s": ib.get("step_time_s"),
                              "all_ib_degrees": ib.get("degrees")})
                    if "error" not in r and "error" not in ib:
                        r["oblivious"] = oblivious(Path(ib["plan"]), Path(r["plan"]))
                        r["speedup_vs_oblivious"] = (r["oblivious"]["step_time_s"]
                                                     / r["step_time_s"])
                        r["vs_all_ib"] = r["step_time_s"] / ib["step_time_s"]
                    r.pop("plan", None)
                    results.append(r)
                    print(f"{name} {model} {order}: {r.get('step_time_s')}", file=sys.stderr)
        solves = big_solve(tmp)
    bigs = [big_mapping(16, False), big_mapping(16, True), big_mapping(128, True)]
    doc = {"cases": results, "mapping_1024_nodes": bigs, "solve_1024_nodes": solves}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print("| scenario | model | listing | degrees | NIC-aware s/step | same degrees, listing "
          "order s/step (x) | NIC-oblivious planner: all-IB plan in listing order s/step (x) "
          "| all-IB s/step (aware / all-IB) | groups off one network: aware / listing / "
          "oblivious | contained |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(_row(r))
    print()
    for big in bigs:
        print(_mapping_line(big) + "  ")
    for r in solves:
        if "error" in r:
            print(f"planner solve, 1024 nodes in 3 NIC classes, {r['case']}: error {r['error']}  ")
            continue
        d = r["degrees"]
        print(f"planner solve, 1024 nodes in 3 NIC classes (Llama-3.1-70B, batch 4096), "
              f"{r['case']}: {r['seconds']:.2f} s, tp{d['tp']} pp{d['pp']} dp{d['dp']}, "
              f"{r['step_time_s']:.2f} s/step, groups off one network "
              f"{r['off_network_groups']}  ")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
