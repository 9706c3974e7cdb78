"""Attention/FFN disaggregated decode: the unit's cost terms and the exact search
(planner/serving/afd.py) against brute force on small clusters."""
import dataclasses
import itertools
import math

import pytest

from cost_models.model_spec import MoESpec
from cost_models.serving.afd import AfdLayout, destinations_per_token
from cost_models.serving.config import ServingWorkload
from planner.inputs.clusters import load_cluster
from planner.inputs.models import load_model
from planner.serving import afd
from planner.serving.estimate import Calibration
from planner.serving.sites import sites
from topologies.standard import homogeneous_cluster

MIXTRAL = load_model("mixtral-8x7b")


def _cal(cluster):
    return Calibration.defaults(tuple(dict.fromkeys(g.gpu.name for g in cluster.node_groups)))


def _small(gpu="H100", per_node=2, nodes=3):
    """Pools take whole nodes: three nodes of two GPUs give the attention pool one or two
    nodes and the FFN pool the others."""
    return homogeneous_cluster(gpu, nodes, gpus_per_node=per_node)


def _enumerated_destinations(moe: MoESpec, slices: int) -> float:
    """Every top-k expert set a token may choose, equally likely (uniform routing within a
    uniform choice of its routing groups), and the slices it touches, counted one by one."""
    e, k, big_g, t = moe.num_experts, moe.top_k, moe.router_groups, moe.router_group_topk
    per_group, sizes = e // big_g, []
    for groups in itertools.combinations(range(big_g), t):
        pool = [x for g in groups for x in range(g * per_group, (g + 1) * per_group)]
        sizes += [len({x * slices // e for x in chosen})
                  for chosen in itertools.combinations(pool, k)]
    return sum(sizes) / len(sizes)


@pytest.mark.parametrize("experts, top_k, groups, group_topk, slices", [
    (8, 2, 1, 1, 2), (8, 3, 1, 1, 4), (12, 2, 1, 1, 6), (8, 2, 4, 2, 4), (16, 4, 4, 2, 4),
    (16, 4, 4, 2, 8), (12, 3, 6, 2, 4)])
def test_destinations_per_token_equals_enumeration(experts, top_k, groups, group_topk, slices):
    """A token's destination GPUs (or nodes), routing groups or not, equal the count over every
    expert set it may choose (not the with-replacement G (1 - (1 - 1/G)^k) used before)."""
    moe = MoESpec(num_experts=experts, top_k=top_k, expert_ffn_hidden=64,
                  router_groups=groups, router_group_topk=group_topk)
    assert destinations_per_token(moe, slices) == pytest.approx(
        _enumerated_destinations(moe, slices), rel=1e-9)


def test_destinations_per_token_bounds():
    moe = MoESpec(num_experts=8, top_k=2, expert_ffn_hidden=64)
    assert destinations_per_token(moe, 1) == pytest.approx(1.0)
    # more GPUs than experts: one replica of each of the token's experts, k distinct GPUs
    assert destinations_per_token(moe, 8) == pytest.approx(2.0)
    assert destinations_per_token(moe, 32) == pytest.approx(2.0)
    # DeepSeek-V3's node-limited routing: 8 experts of 256 within 4 of 8 groups, so a token
    # reaches at most 4 of 8 group-aligned nodes (about 5.3 without the limit)
    dsv3 = MoESpec(num_experts=256, top_k=8, expert_ffn_hidden=2048, router_groups=8,
                   router_group_topk=4)
    free = dataclasses.replace(dsv3, router_groups=1, router_group_topk=1)
    assert destinations_per_token(dsv3, 8) <= 4.0 < destinations_per_token(free, 8)


@pytest.mark.parametrize("tpot_ms, isl", [(None, 512), (20.0, 512), (25.0, 4096), (None, 16384)])
def test_search_equals_brute_force(tpot_ms, isl):
    """Every layout and every batch up to the cap tried one by one gives the search's best
    (the TPOT target binds at 20 and 25 ms, KV memory at 16k context)."""
    cluster = _small()
    cal = _cal(cluster)
    wl = ServingWorkload(isl=isl, osl=128, tpot_ms=tpot_ms)
    cap = 48
    got = afd.search(MIXTRAL, wl, cluster, cal, top_k=1, max_batch=cap)
    ref = afd.brute_force(MIXTRAL, wl, cluster, cal, max_batch=cap)
    assert ref is not None and got.best
    assert got.best[0].layout == ref.layout
    assert got.best[0].output_tokens_per_s_per_gpu == pytest.approx(
        ref.output_tokens_per_s_per_gpu)
    if tpot_ms is not None:
        assert got.best[0].tpot_s * 1e3 <= tpot_ms


def _two_type_cluster(nodes: int = 1):
    """``nodes`` nodes of 2 H20 and as many of 2 L40S under one leaf switch."""
    import pathlib
    import tempfile

    import yaml
    spec = {"name": "tiny-mixed", "node_groups": [
        {"name": "a", "count": nodes, "gpu": "H20", "gpus_per_node": 2, "fabric": "nvswitch",
         "nics": [{"count": 2, "gbps": 400, "transport": "ib"}]},
        {"name": "b", "count": nodes, "gpu": "L40S", "gpus_per_node": 2, "fabric": "pcie",
         "nics": [{"count": 2, "gbps": 200, "transport": "roce"}]}],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 2 * nodes}]}}
    path = pathlib.Path(tempfile.mkdtemp()) / "c.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_cluster(str(path))


def test_search_equals_brute_force_on_two_gpu_types():
    """Attention and FFN pools may take different GPU types; the search tries every pairing."""
    cluster = _two_type_cluster()
    cal = _cal(cluster)
    wl = ServingWorkload(isl=1024, osl=128, tpot_ms=60.0, precision="fp8")
    got = afd.search(MIXTRAL, wl, cluster, cal, top_k=1, max_batch=32)
    ref = afd.brute_force(MIXTRAL, wl, cluster, cal, max_batch=32)
    assert ref is not None and got.best
    assert got.best[0].layout == ref.layout
    assert (got.best[0].attention_gpu, got.best[0].ffn_gpu) == (ref.attention_gpu, ref.ffn_gpu)


def test_priced_search_equals_priced_brute_force():
    """With prices per GPU type the search ranks (and prunes) by the rate per unit of cost:
    on two nodes of each type the best unit is all H20 unpriced or with cheap H20s, all L40S
    with cheap L40Ss; the search finds each brute force's."""
    cluster = _two_type_cluster(nodes=2)
    cal = _cal(cluster)
    wl = ServingWorkload(isl=1024, osl=128, tpot_ms=60.0, precision="fp8")
    found = set()
    for price in (None, {"H20-96GB": 1.0, "L40S": 0.05}, {"H20-96GB": 0.05, "L40S": 1.0}):
        got = afd.search(MIXTRAL, wl, cluster, cal, top_k=1, max_batch=64, price=price)
        ref = afd.brute_force(MIXTRAL, wl, cluster, cal, max_batch=64, price=price)
        assert ref is not None and got.best
        assert (got.best[0].layout, got.best[0].attention_gpu, got.best[0].ffn_gpu) == (
            ref.layout, ref.attention_gpu, ref.ffn_gpu)
        found.add((ref.attention_gpu, ref.ffn_gpu))
    assert found == {("H20-96GB", "H20-96GB"), ("L40S", "L40S")}  # the prices decide


def test_throughput_never_falls_with_batch():
    """The property the search's bisection rests on, checked across degrees and m."""
    cluster = _small(per_node=8)
    cal = _cal(cluster)
    wl = ServingWorkload(isl=2048, osl=256)
    site = sites(cluster)[0]
    for tp, ranks, n_e, m in ((1, 4, 4, 1), (2, 2, 4, 3), (1, 6, 2, 4), (4, 1, 4, 8)):
        prev = 0.0
        for b in range(m, 257, m):
            e = afd.evaluate(MIXTRAL, wl, cluster, cal, site, site, AfdLayout(tp, ranks, n_e, m, b))
            assert e.output_tokens_per_s >= prev * (1 - 1e-12)
            prev = e.output_tokens_per_s


def test_micro_batches_hide_transfers():
    """With one micro-batch each stage idles while the others run (the ring binds); with three,
    compute-bound stages overlap and throughput at the same batch rises until the slowest stage
    binds. Beyond that, more micro-batches only re-read weights (each micro-batch reads the
    attention and expert weights again), so throughput falls: m has an interior optimum."""
    cluster = homogeneous_cluster("H100", 2, gpus_per_node=8)
    cal = _cal(cluster)
    site = sites(cluster)[0]
    wl = ServingWorkload(isl=256, osl=64)
    est = {m: afd.evaluate(MIXTRAL, wl, cluster, cal, site, site, AfdLayout(1, 8, 8, m, 384))
           for m in (1, 3, 8)}
    assert est[1].bound == "ring" and est[3].bound == "experts"
    assert est[3].output_tokens_per_s > 1.3 * est[1].output_tokens_per_s
    assert est[8].output_tokens_per_s < est[3].output_tokens_per_s


def test_memory_caps_the_batch():
    cluster = _small(per_node=8)
    cal = _cal(cluster)
    site = sites(cluster)[0]
    short = afd.evaluate(MIXTRAL, ServingWorkload(isl=1024, osl=128), cluster, cal, site, site,
                         AfdLayout(2, 2, 4, 2, 2))
    long = afd.evaluate(MIXTRAL, ServingWorkload(isl=32768, osl=128), cluster, cal, site, site,
                        AfdLayout(2, 2, 4, 2, 2))
    assert long.memory.max_batch < short.memory.max_batch / 10
    # the expert GPUs hold the routed experts only: 8 experts over 4 GPUs, two each
    assert short.memory.ffn_weights_bytes == pytest.approx(
        long.memory.ffn_weights_bytes)
    assert short.memory.ffn_fits


def test_dense_model_has_no_afd_plan():
    cluster = _small()
    assert afd.search(load_model("llama-3.1-8b"), ServingWorkload(isl=512, osl=64), cluster,
                      _cal(cluster)).best == ()


def test_search_is_deterministic():
    cluster = _small()
    cal = _cal(cluster)
    wl = ServingWorkload(isl=512, osl=128, tpot_ms=30.0)
    a = afd.search(MIXTRAL, wl, cluster, cal, top_k=3, max_batch=48)
    b = afd.search(MIXTRAL, wl, cluster, cal, top_k=3, max_batch=48)
    assert [dataclasses.astuple(e.layout) for e in a.best] == [
        dataclasses.astuple(e.layout) for e in b.best]


# --- planner serve with AFD -------------------------------------------------------------
import json  # noqa: E402

from typer.testing import CliRunner  # noqa: E402

from planner.cli.app import app  # noqa: E402

runner = CliRunner()
QWEN = ["serve", "--model", "qwen3-30b-a3b", "--gpu", "H100", "--nodes", "4", "--isl", "2048",
        "--osl", "512", "--tpot-ms", "40"]


def test_serve_compares_afd_and_says_why_it_loses():
    """A MoE model: the best colocated, prefill/decode and AFD plans side by side; here AFD's
    decode side delivers less per GPU than the disaggregated decode pool, and the verdict names
    the term (few tokens per expert leave the FFN GPUs idle)."""
    out = runner.invoke(app, QWEN + ["--format", "json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    best = d["best_afd"]
    assert [p["role"] for p in best["pools"]] == ["prefill", "attention", "ffn"]
    assert best["micro_batches"] >= 1 and best["meets_slo"]
    assert best["tpot_s"] * 1e3 <= 40.0
    assert d["afd_verdict"].startswith("afd does not pay")
    assert "expert GPUs busy" in d["afd_verdict"]
    sens = d["afd_sensitivity"]
    assert [r["micro_batches"] for r in sens["micro_batches"]] == list(range(1, 9))
    # the plan's own micro-batch count is the best row of the table at its degrees
    rows = [r for r in sens["micro_batches"] if r["output_tokens_per_s_per_gpu"] is not None]
    top = max(rows, key=lambda r: r["output_tokens_per_s_per_gpu"])
    assert top["micro_batches"] == best["micro_batches"]
    table = runner.invoke(app, QWEN, env={"COLUMNS": "80"}).output
    assert "vs AFD" in table and "AFD: afd does not pay" in table.replace("\n", " ")


def test_afd_plan_written_validated_and_simulated(tmp_path):
    """--mode afd --out: the plan holds the three pools on whole nodes; the simulator agrees
    with the closed form on TPOT and throughput (same step times, steady decode batch)."""
    path = tmp_path / "afd.json"
    out = runner.invoke(app, QWEN + ["--mode", "afd", "--out", str(path), "--format", "json"],
                        catch_exceptions=False)
    assert out.exit_code == 0, out.output
    plan = json.loads(path.read_text())
    assert plan["serving"]["mode"] == "afd" and plan["serving"]["micro_batches"] >= 1
    assert {p["role"] for p in plan["pools"]} == {"prefill", "attention", "ffn"}
    sim = runner.invoke(app, ["serve", "simulate", str(path), "--requests", "300",
                              "--format", "json"], catch_exceptions=False)
    assert sim.exit_code == 0, sim.output
    rel = json.loads(sim.output)["relative_difference"]
    assert abs(rel["tpot_s"]) < 0.05
    assert abs(rel["output_tokens_per_s_per_gpu"]) < 0.05


def test_afd_mode_refuses_dense_models():
    out = runner.invoke(app, ["serve", "--model", "llama-3.1-8b", "--mode", "afd"])
    assert out.exit_code == 2
    assert "--mode" in out.output and "dense" in out.output
    assert "Traceback" not in out.output


def test_hierarchical_dispatch_sends_a_token_once_per_node():
    """Across nodes a token crosses the network once per destination node (DeepEP's normal
    kernels), so with eight expert GPUs per node an attention GPU sends at most as much as
    when every expert GPU sat on its own node, and with one GPU per node the two agree."""
    from cost_models.serving.afd import PoolLink, transfer_s
    model = load_model("deepseek-v3")
    lay = AfdLayout(1, 16, 16, 3, 96)
    flat = transfer_s(model, lay, 32.0, PoolLink(50e9, 5e-6, 1), 1.0)
    hier = transfer_s(model, lay, 32.0, PoolLink(50e9, 5e-6, 8, 450e9), 1.0)
    assert hier < flat
    # two FFN nodes of 4 routing groups (32 experts) each; a token's 8 experts lie in 4 of
    # the 8 groups: node A is missed when none of its groups is picked, or when n are and
    # all 8 experts fall in the other node's 4 - n picked groups
    miss = sum(math.comb(4, n) * math.comb(4, 4 - n) / math.comb(8, 4)
               * math.comb(32 * (4 - n), 8) / math.comb(128, 8) for n in range(5))
    to_nodes = 2 * (1 - miss)
    egress = 32.0 * to_nodes * model.hidden_size / 50e9
    ingress = 32.0 * 16 * to_nodes / 2 * model.hidden_size / 8 / 50e9
    assert hier == pytest.approx(5e-6 + max(egress, ingress))
    same = transfer_s(model, lay, 32.0, PoolLink(50e9, 5e-6, 1, 450e9), 1.0)
    assert same == pytest.approx(flat)


def test_vllm_engine_rule_holds_in_the_search():
    """--engine vllm: every AFD unit the search returns has attention GPUs >= FFN GPUs in an
    exact multiple (afd-plugin's P2pNcclAFDConnector); the unconstrained search finds a
    better-or-equal unit, never a worse one."""
    cluster = homogeneous_cluster("H100", 4, gpus_per_node=2)
    cal = _cal(cluster)
    wl = ServingWorkload(isl=512, osl=128, tpot_ms=40.0)
    ruled = afd.search(MIXTRAL, wl, cluster, cal, top_k=5, max_batch=48, engine="vllm")
    free = afd.search(MIXTRAL, wl, cluster, cal, top_k=5, max_batch=48)
    assert ruled.best
    for e in ruled.best:
        lay = e.layout
        assert lay.attention_gpus >= lay.ffn_gpus and lay.attention_gpus % lay.ffn_gpus == 0
    assert free.best[0].output_tokens_per_s_per_gpu >= ruled.best[0].output_tokens_per_s_per_gpu
    ref = afd.brute_force(MIXTRAL, wl, cluster, cal, max_batch=48, engine="vllm")
    assert ruled.best[0].layout == ref.layout


def test_emit_vllm_afd_settings_and_refusals(tmp_path):
    """An AFD plan for vLLM: the afd-plugin object per unit and role and the role table; a unit
    the plugin's connector cannot run, and SGLang, are refused in one line, writing nothing."""
    from planner.emit import emit
    from planner.plan.file import load_plan
    path = tmp_path / "afd.json"
    out = runner.invoke(app, QWEN + ["--mode", "afd", "--engine", "vllm", "--out", str(path),
                                     "--format", "json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    files = emit("vllm", load_plan(path))
    cfg = json.loads(files["afd_unit0_attention.json"])["afd"]
    assert cfg["role"] == "attention" and cfg["connector"] == "P2pNcclAFDConnector"
    assert cfg["num_attention_ranks"] % cfg["num_ffn_ranks"] == 0
    assert json.loads(files["afd_unit0_ffn.json"])["afd"]["role"] == "ffn"
    rows = files["afd_roles.csv"].splitlines()
    plan = json.loads(path.read_text())
    gpus = sum(p["gpus_per_instance"] * p["workers"] for p in plan["serving"]["pools"]
               if p["role"] in ("attention", "ffn"))
    assert sum(len(r.split(",")[4].split()) for r in rows[1:]) == gpus  # every GPU listed
    sg = runner.invoke(app, ["emit", "sglang", str(path), "--out-dir", str(tmp_path / "sg")])
    assert sg.exit_code == 2 and "Ascend" in sg.output and not (tmp_path / "sg").exists()
    # a unit of fewer attention than FFN GPUs: the connector's rule
    from dataclasses import replace as dc_replace

    from planner.emit.afd_vllm import units
    doc = json.loads(path.read_text())["serving"]
    att = next(p for p in doc["pools"] if p["role"] == "attention")
    ffn = next(p for p in doc["pools"] if p["role"] == "ffn")
    att["workers"], att["tp"], ffn["ep"] = ffn["workers"], 1, 8
    with pytest.raises(ValueError, match="exact multiple"):
        units(dc_replace(load_plan(path), serving=doc))


def _site_rates(model, wl, cluster, cal, engine="sglang"):
    """Each site's prefill and decode layouts with their rates, as the plan search has them."""
    from planner.serving import search as srch
    places = sites(cluster)
    tpot = wl.tpot_ms / 1e3 if wl.tpot_ms else float("inf")
    rates = {}
    for site in places:
        parts = [p for lay in srch.layouts(model, site.gpus_per_node, site.gpus, engine)
                 if (p := srch.layout_parts(model, lay, wl, cluster, cal, site.gpu,
                                            site.first_rank)) is not None]
        rates[site] = srch._pool_rates(model, wl, cluster, cal, site, parts, tpot, [])
    return places, rates


def _every(entries, key, rate):
    return list(entries)


@pytest.mark.parametrize("case", ["mixtral-3x2", "deepseek-v3-4x8"])
def test_plan_search_pairs_lose_no_better_plan(case):
    """The AFD and disaggregated plan searches pair one layout per size (the fastest): the
    best plan equals pairing every AFD unit and every pool layout with every count split.
    DeepSeek-V3 on 4 nodes is the case where pairing only the four units with the best decode
    rate per GPU lost half the throughput: its best plan's unit (8 attention + 8 FFN GPUs,
    leaving two nodes to prefill) is not among them."""
    from planner.serving import search as srch
    if case == "mixtral-3x2":
        model, cluster = MIXTRAL, _small()
        wl = ServingWorkload(isl=512, osl=128, tpot_ms=40.0)
    else:
        model, cluster = load_model("deepseek-v3"), homogeneous_cluster("H200", 4,
                                                                         gpus_per_node=8)
        wl = ServingWorkload(isl=4096, osl=1024, tpot_ms=100.0, precision="fp8",
                             kv_dtype="fp8")
    cal = _cal(cluster)
    places, rates = _site_rates(model, wl, cluster, cal)
    price = {p: 1.0 for p in places}
    kept = srch.afd_candidates(model, wl, cluster, cal, rates, places, price, "sglang")[0]
    every = srch.afd_candidates(model, wl, cluster, cal, rates, places, price, "sglang",
                                keep=_every)[0]
    assert kept and len(kept) < len(every)
    assert max(v for v, _, _ in kept) == pytest.approx(max(v for v, _, _ in every), rel=1e-12)
    for site in places:
        pre, dec = rates[site]
        same_tp = srch.same_tp_required(model, "sglang")
        got = srch._disagg_pairs(site, pre, site, dec, wl, same_tp)
        ref = srch._disagg_pairs(site, pre, site, dec, wl, same_tp, keep=_every)
        assert max(v for v, _, _ in got) == pytest.approx(max(v for v, _, _ in ref), rel=1e-12)
    if case == "deepseek-v3-4x8":
        best = max(every, key=lambda x: x[0])[1]
        units = afd.search(model, wl, cluster, cal, top_k=4,
                           within=(replace_gpus(places[0], places[0].gpus - 8),)).best
        top4 = {(u.layout.attention_gpus, u.layout.ffn_gpus) for u in units}
        unit = afd.afd_layout_of(best)
        assert (unit.attention_gpus, unit.ffn_gpus) not in top4


def replace_gpus(site, gpus):
    return dataclasses.replace(site, gpus=gpus)
