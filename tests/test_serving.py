"""Serving cost model, search and the `planner serve` commands."""
from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from cost_models.serving.config import PoolLayout, ServingWorkload, parse_pool
from cost_models.serving.latency import decode_step
from cost_models.serving.memory import kv_bytes_per_token, weight_bytes_per_gpu
from planner.cli.app import app
from planner.inputs.models import load_model
from planner.serving.estimate import Calibration, Deployment, PoolSpec, costing, estimate
from topologies.catalog import get_gpu
from topologies.standard import homogeneous_cluster

runner = CliRunner()
H100 = "H100-SXM5-80GB"


def _run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_kv_bytes_per_token_match_published_sizes():
    # Llama-3.1-70B: 80 layers x 8 KV heads x 128 x (K,V) x 2 B = 327,680 B (320 KiB) a token;
    # DeepSeek-V3 MLA: 61 layers x (512 latent + 64 rope) x 2 B = 70,272 B (DeepSeek-V2 sec. 2.1.3)
    assert kv_bytes_per_token(load_model("llama-3.1-70b"), "bf16") == 327_680
    assert kv_bytes_per_token(load_model("deepseek-v3"), "bf16") == 70_272
    assert kv_bytes_per_token(load_model("deepseek-v3"), "fp8") == 35_136


def test_weights_shard_over_tp_and_shrink_with_precision():
    m = load_model("llama-3.1-70b")
    full = weight_bytes_per_gpu(m, PoolLayout(tp=1), "bf16")
    assert 139e9 < full < 143e9  # 70.6B parameters at 2 bytes
    assert weight_bytes_per_gpu(m, PoolLayout(tp=8), "bf16") == pytest.approx(full / 8, rel=1e-9)
    assert weight_bytes_per_gpu(m, PoolLayout(tp=1), "fp8") < 0.52 * full


def _costing(model_name: str, layout: PoolLayout, nodes: int = 1):
    m, g = load_model(model_name), get_gpu(H100)
    cal = Calibration.defaults((g.name,))
    return costing(m, PoolSpec("decode", g.name, layout), ServingWorkload(),
                   homogeneous_cluster(g.name, nodes), cal, g)


def test_decode_is_weight_bound_at_small_batch_and_grows_with_batch_and_context():
    c = _costing("llama-3.1-70b", PoolLayout(tp=8))
    t1, t8, t64 = (decode_step(c, b, 1024).total_s for b in (1, 8, 64))
    assert t1 < t8 < t64
    assert t8 < 1.2 * t1  # reading the weights dominates a small batch
    # 17.6 GB of weights per GPU at 3.35 TB/s: at least 5.3 ms a step
    assert decode_step(c, 1, 128).gemm_s > 17.6e9 / 3.35e12
    assert decode_step(c, 32, 8192).total_s > decode_step(c, 32, 1024).total_s


def test_moe_decode_reads_only_touched_experts():
    c = _costing("qwen3-30b-a3b", PoolLayout(tp=1, dp=8, ep=8), nodes=1)
    small, large = decode_step(c, 1, 1024).moe_s, decode_step(c, 256, 1024).moe_s
    # 8 tokens (one per attention rank) choosing 8 of 128 experts touch 1 - (1 - 8/128)^8 = 40%
    # of the experts in expectation; 2048 tokens touch them all
    assert 0.3 * large < small < 0.5 * large


def test_parse_pool_and_errors():
    lay = parse_pool("tp=2, dp=4, ep=8, batch=64, workers=2")
    assert (lay.tp, lay.dp, lay.ep, lay.expert_tp, lay.batch, lay.gpus) == (2, 4, 8, 1, 64, 16)
    for bad in ("tp=two", "xx=1", "tp", "", "tp=1,tp=2", "batch=0"):
        with pytest.raises(ValueError):
            parse_pool(bad)


def test_disaggregation_removes_the_prefill_stall_from_tpot():
    m, g = load_model("llama-3.1-70b"), get_gpu(H100)
    cl, cal = homogeneous_cluster(g.name, 2), Calibration.defaults((g.name,))
    wl = ServingWorkload(isl=4096, osl=512)
    co = estimate(m, Deployment("colocated", (PoolSpec("colocated", g.name,
                                                       PoolLayout(tp=8, batch=64, workers=2)),)),
                  wl, cl, {g.name: g}, cal)
    dis = estimate(m, Deployment("disagg", (
        PoolSpec("prefill", g.name, PoolLayout(tp=8, workers=1)),
        PoolSpec("decode", g.name, PoolLayout(tp=8, batch=64, workers=1)))), wl, cl,
        {g.name: g}, cal)
    assert dis.tpot_s < co.tpot_s
    assert co.tpot_s == pytest.approx(co.pools[0].step.total_s / (1 - co.pools[0].utilisation))
    assert dis.kv_transfer_s > 0


def test_serve_json_is_deterministic_and_meets_targets():
    args = ("serve", "--model", "llama-3.1-8b", "--nodes", "2", "--format", "json")
    first, second = _run(*args), _run(*args)
    assert first.exit_code == 0, first.output
    assert first.output == second.output
    data = json.loads(first.output)
    best = data["plans"][0]
    assert best["meets_slo"] and best["ttft_s"] <= 2.0 and best["tpot_s"] <= 0.05
    assert {"ttft_s", "tpot_s", "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user",
            "request_rate_per_s", "fits", "memory", "pools"} <= set(best)
    assert {p["role"] for p in data["best_disagg"]["pools"]} == {"prefill", "decode"}
    assert data["best_colocated"]["pools"][0]["role"] == "colocated"
    gpus = sum(p["gpus"] for p in best["pools"])
    assert gpus <= 16 and best["gpus"] == gpus


@pytest.mark.parametrize("args,winner", [
    (("--model", "llama-3.1-8b", "--nodes", "2"), "colocated"),
    (("--model", "llama-3.1-70b", "--nodes", "2"), "disagg"),
])
def test_each_mode_wins_somewhere_and_the_report_says_why(args, winner):
    result = _run("serve", *args, "--format", "json")
    data = json.loads(result.output)
    assert data["plans"][0]["mode"] == winner
    assert data["why"].startswith("stay colocated" if winner == "colocated" else "disaggregate")
    table = _run("serve", *args)
    assert "Why:" in table.output and "Pareto" in table.output


def test_serve_estimate_json_keys_and_memory():
    result = _run("serve", "estimate", "--model", "llama-3.1-70b", "--gpu", H100, "--nodes",
                  "2", "--isl", "2048", "--osl", "256", "--prefill", "tp=8,workers=1",
                  "--decode", "tp=8,batch=32,workers=1", "--format", "json")
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["mode"] == "disagg" and d["gpus"] == 16 and d["fits"]
    assert set(d["memory"]) == {"prefill", "decode"}
    assert d["memory"]["decode"]["weights_gb"] == pytest.approx(141.1 / 8, rel=0.02)


def test_serve_writes_a_valid_plan_that_emits(tmp_path):
    out = tmp_path / "plan.json"
    result = _run("serve", "--model", "llama-3.1-70b", "--nodes", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    plan = json.loads(out.read_text())
    assert plan["kind"] == "serving" and plan["serving"]["mode"] == "disagg"
    emitted = _run("emit", "sglang", str(out), "--out-dir", str(tmp_path / "launch"))
    assert emitted.exit_code == 0, emitted.output
    assert "--disaggregation-mode" in (tmp_path / "launch" / "serving_commands.txt").read_text()


@pytest.mark.parametrize("args,needle", [
    (("serve", "--engine", "tgi"), "--engine"),
    (("serve", "estimate", "--colocated", "tp=eight"), "--colocated"),
    (("serve", "estimate", "--colocated", "tp=8,workers=4"), "GPUs"),
    (("serve", "estimate", "--colocated", "tp=3"), "tp"),
    (("serve", "estimate"), "--colocated"),
    (("serve", "--rate", "1", "--concurrency", "2"), "--rate"),
    # not-a-number and infinite values fail every range check as written "x <= 0"
    (("serve", "--rate", "nan"), "--rate: expected a finite number > 0"),
    (("serve", "--rate", "inf", "--objective", "min-gpus"), "--rate: expected a finite"),
    (("serve", "--ttft-ms", "nan"), "--ttft-ms: expected a finite number > 0"),
    (("serve", "estimate", "--colocated", "tp=1", "--rate", "nan"), "--rate"),
    (("serve", "--rate", "-3"), "--rate: expected"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path):
    result = runner.invoke(app, list(args) + ["--out", str(tmp_path / "p.json")]
                           if args[:2] == ("serve", "--ttft-ms") else list(args))
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "p.json").exists()


HF = __import__("pathlib").Path(__file__).parent / "fixtures" / "hf_configs"


def test_linear_attention_layers_hold_state_not_kv():
    from cost_models.serving.memory import kv_bytes_per_request, linear_state_bytes
    from planner.inputs.hf_import import load_hf_config
    m = load_hf_config(HF / "qwen3.5-397b-a17b.json")
    assert 0 < m.num_kv_layers < m.num_layers
    lay = PoolLayout(tp=8, ep=8)
    state = m.num_linear_layers * linear_state_bytes(m, 8)
    short, long = (kv_bytes_per_request(m, lay, "bf16", ctx) for ctx in (1000, 2000))
    per_token = (long - short) / 1000  # KV grows only over the full-attention layers
    heads_per_gpu = max(1, m.num_kv_heads // 8)  # KV heads split over TP 8 (one at least)
    assert per_token == pytest.approx(m.num_kv_layers * 2 * heads_per_gpu * m.head_dim * 2,
                                      rel=1e-9)
    assert short - 1000 * per_token == pytest.approx(state, rel=1e-9)  # fixed per request
    assert kv_bytes_per_token(m, "bf16") == pytest.approx(
        m.num_kv_layers * 2 * m.num_kv_heads * m.head_dim * 2)


def test_chunked_attention_caps_the_kv_of_chunk_layers():
    from cost_models.serving.memory import kv_bytes_per_request
    from planner.inputs.hf_import import load_hf_config
    m = load_hf_config(HF / "llama-4-scout-17b-16e.json")
    lay = PoolLayout(tp=8)
    chunked = sum(1 for i in range(m.num_layers) if m.chunk(i))
    assert 0 < chunked < m.num_layers
    beyond = [kv_bytes_per_request(m, lay, "bf16", ctx) for ctx in (m.attention_chunk,
                                                                    2 * m.attention_chunk)]
    full = kv_bytes_per_request(m, lay, "bf16", 1.0)  # one token in every layer
    growth = (beyond[1] - beyond[0]) / m.attention_chunk
    assert growth == pytest.approx(full * (m.num_layers - chunked) / m.num_layers, rel=1e-9)


@pytest.mark.parametrize("fixture", ["qwen3.5-35b-a3b", "llama-4-scout-17b-16e",
                                     "minimax-m2.5"])
def test_serve_plans_new_architectures(fixture):
    result = _run("serve", "--model", str(HF / f"{fixture}.json"), "--gpu", "H200",
                  "--precision", "fp8", "--format", "json")
    assert result.exit_code == 0, result.output
    best = json.loads(result.output)["plans"][0]
    assert best["meets_slo"] and best["output_tokens_per_s_per_gpu"] > 0


def test_min_gpus_serves_the_rate_with_no_node_to_spare():
    from dataclasses import replace as dc_replace

    from planner.serving.search import search
    m, g = load_model("llama-3.1-8b"), get_gpu(H100)
    cl, cal = homogeneous_cluster(g.name, 8), Calibration.defaults((g.name,))
    gpus_at = {}
    for rate in (10.0, 30.0):
        wl = ServingWorkload(isl=4096, osl=512, ttft_ms=2000, tpot_ms=50, rate_per_s=rate)
        best = search(m, wl, cl, cal, objective="min-gpus").colocated[0]
        assert best.meets_slo and best.estimate.request_rate_per_s == pytest.approx(rate)
        gpus_at[rate] = best.estimate.gpus
        lay = best.deployment.pools[0].layout
        per_node = 8 // lay.gpus_per_instance if lay.gpus_per_instance < 8 else 1
        if lay.workers > per_node:  # one node less of the same layout misses the targets
            fewer = dc_replace(lay, workers=lay.workers - per_node)
            est = estimate(m, Deployment("colocated", (PoolSpec("colocated", g.name, fewer),)),
                           wl, cl, {g.name: g}, cal)
            assert not est.meets(wl) or est.request_rate_per_s < rate * (1 - 1e-9)
    assert gpus_at[10.0] <= gpus_at[30.0] <= 64


def test_min_gpus_needs_a_rate_and_says_when_the_cluster_is_too_small():
    result = _run("serve", "--objective", "min-gpus")
    assert result.exit_code == 2 and "--rate" in result.output
    result = _run("serve", "--model", "llama-3.1-70b", "--nodes", "1", "--objective",
                  "min-gpus", "--rate", "300")
    # a well-formed problem without a solution: exit 3, as solve's (InfeasibleError)
    assert result.exit_code == 3 and "8 GPUs" in result.output and "--rate 300" in result.output
    assert "Traceback" not in result.output


MIXED = __import__("pathlib").Path(__file__).parent.parent / "examples" / "mixed-gpu.yaml"


def test_mixed_gpu_cluster_puts_each_pool_on_one_type(tmp_path):
    out = tmp_path / "mixed.json"
    result = _run("serve", "--model", "qwen3-30b-a3b", "--cluster", str(MIXED), "--mode",
                  "disagg", "--out", str(out), "--format", "json")
    assert result.exit_code == 0, result.output
    plan = json.loads(out.read_text())
    gpu_of_host = {"h100": "H100-SXM5-80GB", "h20": "H20-96GB"}
    for pool in plan["pools"]:  # a pool's nodes are all of the GPU type it names
        assert {gpu_of_host[n["host"].split("-")[0]] for n in pool["nodes"]} == {pool["gpu"]}
    roles = {p["role"]: p["gpu"] for p in plan["serving"]["pools"]}
    # decode reads weights and KV (H20: 4 TB/s for a seventh of H100's FLOPs), prefill computes
    assert roles == {"prefill": "H100-SXM5-80GB", "decode": "H20-96GB"}
    assert set(plan["inputs"]["profiles"]) == set(roles.values())
    sim = _run("serve", "simulate", str(out), "--requests", "500", "--format", "json")
    assert sim.exit_code == 0, sim.output
    assert _run("emit", "sglang", str(out), "--out-dir", str(tmp_path / "l")).exit_code == 0


def test_mixed_gpu_cluster_refuses_min_gpus_and_estimate():
    result = _run("serve", "--cluster", str(MIXED), "--objective", "min-gpus", "--rate", "5")
    assert result.exit_code == 2 and "--objective" in result.output
    result = _run("serve", "estimate", "--cluster", str(MIXED), "--colocated", "tp=8")
    assert result.exit_code == 2 and "one GPU type" in result.output


def test_per_dollar_objective_trades_gpus_for_cheaper_ones(tmp_path):
    priced = tmp_path / "priced.yaml"
    priced.write_text(MIXED.read_text().replace(
        "gpus_per_node: 8, fabric: nvswitch,\n     nics", "gpus_per_node: 8, fabric: nvswitch,"
        " price_per_gpu_hour: PRICE,\n     nics").replace("PRICE", "3.0", 1).replace(
        "PRICE", "0.5", 1))
    got = {}
    for objective in ("goodput", "per-dollar"):
        result = _run("serve", "--model", "llama-3.1-70b", "--cluster", str(priced),
                      "--objective", objective, "--format", "json")
        assert result.exit_code == 0, result.output
        got[objective] = json.loads(result.output)["plans"]
    best = got["per-dollar"][0]
    assert best["output_tokens_per_dollar"] >= max(
        p["output_tokens_per_dollar"] for p in got["per-dollar"] + got["goodput"]) - 1e-6
    assert best["output_tokens_per_s_per_gpu"] <= got["goodput"][0][
        "output_tokens_per_s_per_gpu"] + 1e-6
    assert best["cost_per_hour"] == pytest.approx(sum(
        p["gpus"] * (3.0 if p["gpu"].startswith("H100") else 0.5) for p in best["pools"]))
    # the report shows the figure it ranks by, and "Why" compares it
    text = runner.invoke(app, ["serve", "--model", "llama-3.1-70b", "--cluster", str(priced),
                               "--objective", "per-dollar"], env={"COLUMNS": "80"})
    assert text.exit_code == 0, text.output
    assert "ktok" in text.output and f"{best['output_tokens_per_dollar'] / 1e3:.0f}" in (
        text.output)
    why = json.loads(_run("serve", "--model", "llama-3.1-70b", "--cluster", str(priced),
                          "--objective", "per-dollar", "--format", "json").output)["why"]
    assert "tokens per dollar" in why and "tokens/s/GPU" not in why.split(";")[0]


def test_per_dollar_needs_prices():
    result = _run("serve", "--cluster", str(MIXED), "--objective", "per-dollar")
    assert result.exit_code == 2 and "price_per_gpu_hour" in result.output


def _lengths_csv(path, pairs):
    path.write_text("input_tokens,output_tokens\n" + "".join(f"{a},{b}\n" for a, b in pairs))
    return path


def test_length_distribution_sets_means_and_spread(tmp_path):
    from planner.inputs.request_lengths import load_request_lengths
    pairs = [(512 + 256 * (i % 7), 64 + 96 * (i % 5)) for i in range(700)]
    sample = load_request_lengths(_lengths_csv(tmp_path / "l.csv", pairs))
    (mi, si), (mo, _) = sample.input_mean_scv, sample.output_mean_scv
    assert mi == pytest.approx(sum(a for a, _ in pairs) / 700)
    assert si == pytest.approx(__import__("numpy").var([a for a, _ in pairs]) / mi ** 2)
    out = tmp_path / "plan.json"
    result = _run("serve", "--model", "llama-3.1-8b", "--lengths", str(tmp_path / "l.csv"),
                  "--out", str(out), "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["isl"], data["osl"]) == (round(mi), round(mo))
    plan = json.loads(out.read_text())
    assert plan["inputs"]["workload"]["isl_scv"] == pytest.approx(si)
    assert len(plan["serving"]["workload"]["lengths"]) == 700
    sim = _run("serve", "simulate", str(out), "--requests", "1500", "--format", "json")
    assert sim.exit_code == 0, sim.output


def test_variable_lengths_wait_longer_than_fixed_ones():
    m, g = load_model("llama-3.1-70b"), get_gpu(H100)
    cl, cal = homogeneous_cluster(g.name, 1), Calibration.defaults((g.name,))
    dep = Deployment("colocated", (PoolSpec("colocated", g.name, PoolLayout(tp=8, batch=64)),))
    fixed = ServingWorkload(isl=4096, osl=512, rate_per_s=2.4)
    spread = ServingWorkload(isl=4096, osl=512, rate_per_s=2.4, isl_scv=0.5, osl_scv=0.5)
    a, b = (estimate(m, dep, w, cl, {g.name: g}, cal) for w in (fixed, spread))
    assert math.isfinite(a.ttft_s)  # a stable load: the instance keeps up
    assert b.ttft_s > a.ttft_s and b.tpot_s == pytest.approx(a.tpot_s)


@pytest.mark.parametrize("text,needle", [
    ("a,b\n1,2\n", "header"), ("input_tokens,output_tokens\n5,x\n", "line 2"),
    ("input_tokens,output_tokens\n0,4\n", "input_tokens"), ("", "header row")])
def test_bad_lengths_file_is_one_line(tmp_path, text, needle):
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    result = _run("serve", "--lengths", str(bad))
    assert result.exit_code == 2 and needle in result.output and str(bad) in result.output


def test_serve_report_keeps_its_decision_columns_at_80_columns():
    args = ("serve", "--model", "qwen3-30b-a3b", "--nodes", "2")
    data = json.loads(_run(*args, "--format", "json").output)
    table = runner.invoke(app, list(args), env={"COLUMNS": "80"}).output
    assert max(len(line) for line in table.splitlines()) <= 80
    for plan in data["plans"]:  # every number whole on one line
        assert f"{plan['output_tokens_per_s_per_gpu']:.0f}" in table
        assert f"{plan['tpot_s'] * 1e3:.1f}" in table
        assert f"{plan['ttft_s'] * 1e3:.0f}" in table


def test_an_overloaded_deployment_says_so_in_standard_json():
    result = _run("serve", "estimate", "--model", "llama-3.1-70b", "--colocated",
                  "tp=8,batch=64", "--rate", "50", "--ttft-ms", "2000", "--format", "json")
    assert result.exit_code == 0, result.output
    assert "Infinity" not in result.output and "NaN" not in result.output
    d = json.loads(result.output)
    assert d["overloaded"] and d["ttft_s"] is None and not d["meets_slo"]
    assert d["request_rate_per_s"] < d["offered_rate_per_s"] == 50
    table = _run("serve", "estimate", "--model", "llama-3.1-70b", "--colocated",
                 "tp=8,batch=64", "--rate", "50")
    assert table.exit_code == 0 and "unbounded" in table.output and "overloaded" in table.output


def test_mode_runs_say_what_was_searched_and_why_a_mode_cannot_run():
    """With --mode only that mode is searched: the report says so instead of comparing with
    modes it never searched; a disaggregated mode on one node is refused for its node count,
    not blamed on the model's memory."""
    out = runner.invoke(app, ["serve", "--model", "llama-3.1-70b", "--nodes", "2", "--mode",
                              "colocated", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["why"].startswith("only colocated plans were searched")
    one = runner.invoke(app, ["serve", "--model", "llama-3.1-8b", "--mode", "disagg"])
    assert one.exit_code == 2
    assert "--mode" in one.output and "the cluster has 1" in one.output
    assert "Traceback" not in one.output and "--model" not in one.output


@pytest.mark.parametrize("args, needle", [
    (("--model", "deepseek-v3", "--gpu", "L40S", "--nodes", "1"),
     "deepseek-v3 does not fit on 8 x L40S"),
    (("--model", "llama-3.1-8b", "--tpot-ms", "1"), "no plan meets --ttft-ms 2000 / --tpot-ms 1"),
    (("--model", "llama-3.1-8b", "--ttft-ms", "1", "--tpot-ms", "1"), "TTFT and TPOT bind"),
])
def test_serve_without_a_plan_exits_3_and_names_what_binds(args, needle, tmp_path):
    """Infeasible, not bad input: exit 3 as for ``solve``, one line, nothing written."""
    result = runner.invoke(app, ["serve", *args, "--out", str(tmp_path / "p.json")])
    assert result.exit_code == 3, result.output
    assert needle in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()


def _price_all(model, wl, cluster, cal, engine, ranked, top_k, key=None):
    """Every candidate priced by the full estimate, then ranked: what the search's early stop
    must equal."""
    from dataclasses import replace as dc_replace

    from planner.serving.search import Candidate, _rank_key
    gpus = {g.gpu.name: g.gpu for g in cluster.node_groups}
    out = []
    for _, dep, rate, *_ in ranked:
        dep = dc_replace(dep, engine=engine)
        est = estimate(model, dep, dc_replace(wl, rate_per_s=rate, concurrency=None), cluster,
                       gpus, cal)
        out.append(Candidate(dep, est, est.meets(wl)))
    out.sort(key=key or _rank_key, reverse=True)
    return tuple(out[:top_k])


def _assert_search_equals_pricing_all(monkeypatch, m, w, cl, cal, modes, **options):
    """The search's plans (deployments, in order) equal those of pricing every deployment."""
    import planner.serving.search as search_module
    got = search_module.search(m, w, cl, cal, top_k=2, modes=modes, **options)
    with monkeypatch.context() as patch:
        patch.setattr(search_module, "_finalise_ranked", _price_all)
        ref = search_module.search(m, w, cl, cal, top_k=2, modes=modes, **options)
    for mode in modes:
        mine, theirs = getattr(got, mode), getattr(ref, mode)
        assert [c.deployment for c in mine] == [c.deployment for c in theirs], mode
        assert [c.estimate.output_tokens_per_s_per_gpu for c in mine] == [
            c.estimate.output_tokens_per_s_per_gpu for c in theirs], mode


@pytest.mark.parametrize("model, wl", [
    ("llama-3.1-8b", dict(isl=4096, osl=512, ttft_ms=2000, tpot_ms=50)),
    ("llama-3.1-8b", dict(isl=8192, osl=256, ttft_ms=500, tpot_ms=20)),
    ("llama-3.1-70b", dict(isl=2048, osl=256, ttft_ms=1000, tpot_ms=30)),
    ("qwen3-30b-a3b", dict(isl=4096, osl=1024, ttft_ms=2000, tpot_ms=40))])
def test_search_equals_pricing_every_deployment(model, wl, monkeypatch):
    """The search prices deployments in the order of their closed-form value and stops when
    none left can enter the top k; pricing every one gives the same plans. (It had priced
    the best 4k by the closed form's TPOT check first, which takes the decode step at the
    full batch: a layout at its memory's batch, 6-10% better, was never priced.)"""
    m, g = load_model(model), get_gpu(H100)
    cl, cal = homogeneous_cluster(g.name, 2), Calibration.defaults((g.name,))
    modes = ("colocated", "disagg", "afd") if m.is_moe else ("colocated", "disagg")
    _assert_search_equals_pricing_all(monkeypatch, m, ServingWorkload(**wl), cl, cal, modes)


def test_per_dollar_search_equals_pricing_every_deployment(monkeypatch):
    from topologies.spec import cluster_from_dict
    group = {"count": 2, "gpus_per_node": 8, "fabric": "nvswitch",
             "nics": [{"count": 8, "gbps": 400, "transport": "ib"}]}
    cl = cluster_from_dict({"name": "priced", "node_groups": [
        {**group, "name": "h100", "gpu": "H100", "price_per_gpu_hour": 2.5},
        {**group, "name": "h200", "gpu": "H200", "price_per_gpu_hour": 3.5}],
        "network": {"tiers": [{"name": "leaf", "nodes_per_switch": 4}]}})
    m = load_model("llama-3.1-8b")
    cal = Calibration.defaults(tuple(g.gpu.name for g in cl.node_groups))
    w = ServingWorkload(isl=4096, osl=512, ttft_ms=2000, tpot_ms=40)
    _assert_search_equals_pricing_all(monkeypatch, m, w, cl, cal, ("colocated", "disagg"),
                                      objective="per-dollar")


def test_a_colocated_tpot_target_is_judged_with_every_slot_busy():
    """At a rate that keeps fewer slots busy than the batch, the mean TPOT is lower than with
    every slot busy; the target is judged on the latter (Llama-3.1-8B, 94 slots, TP1: mean
    about 38 ms, every slot busy over 50 ms), and the search does not pick that layout."""
    from planner.serving.search import search
    m, g = load_model("llama-3.1-8b"), get_gpu(H100)
    cl, cal = homogeneous_cluster(g.name, 2), Calibration.defaults((g.name,))
    lay = PoolLayout(tp=1, batch=94, workers=16)
    wl = ServingWorkload(isl=4096, osl=512, ttft_ms=2000, tpot_ms=50, rate_per_s=43.9)
    e = estimate(m, Deployment("colocated", (PoolSpec("colocated", g.name, lay),)), wl, cl,
                 {g.name: g}, cal)
    assert e.tpot_s * 1e3 < 50 < e.tpot_full_s * 1e3 and not e.meets(wl)
    loose = ServingWorkload(isl=4096, osl=512, ttft_ms=2000, tpot_ms=e.tpot_full_s * 1e3 + 1,
                            rate_per_s=43.9)
    assert e.meets(loose)
    best = search(m, ServingWorkload(isl=4096, osl=512, ttft_ms=2000, tpot_ms=50), cl, cal,
                  modes=("colocated",)).colocated[0]
    assert best.estimate.tpot_full_s * 1e3 <= 50 and best.deployment.pools[0].layout != lay


@pytest.mark.parametrize("rate", [10.0, 30.0])
def test_min_gpus_search_equals_pricing_every_deployment(rate, monkeypatch):
    m, g = load_model("llama-3.1-8b"), get_gpu(H100)
    cl, cal = homogeneous_cluster(g.name, 8), Calibration.defaults((g.name,))
    w = ServingWorkload(isl=4096, osl=512, ttft_ms=2000, tpot_ms=50, rate_per_s=rate)
    _assert_search_equals_pricing_all(monkeypatch, m, w, cl, cal, ("colocated", "disagg"),
                                      objective="min-gpus")


def test_a_plan_with_one_output_token_is_written_and_explained(tmp_path):
    """OSL 1: no decode step, TPOT 0 and an infinite rate per user, which the plan holds as
    JSON's Infinity and the validator accepts (review: the new number checks refused it)."""
    out = tmp_path / "p.json"
    result = _run("serve", "--model", "llama-3.1-8b", "--osl", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["prediction"]["output_tokens_per_s_per_user"] == math.inf
    shown = _run("explain", str(out))
    assert shown.exit_code == 0 and "inf tok/s/user" in shown.output
