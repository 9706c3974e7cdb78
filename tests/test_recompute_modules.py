"""Selective recompute by Megatron-Core submodule (``TrainingConfig.recompute_modules``):
what each drops from the activations, what re-running it costs, and how the option flows
through the CLI, plan options, the Megatron emitter and the calibration rows."""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cost_models.compute import (backward_gpu_s, gemm_time_s, layer_forward_time, layer_work,
                                 mla_up_gemms)
from cost_models.parallel import ConfigError, Degrees
from cost_models.profile import Profile
from cost_models.training.config import RECOMPUTE_MODULES, TrainingConfig, Workload
from cost_models.training.context import make_context
from cost_models.training.memory import ActivationShape, layer_activation_bytes
from cost_models.training.stage import selective_recompute_s, selective_recompute_work
from cost_models.training.step import estimate
from planner.cli.app import app
from planner.inputs.models import load_model
from topologies.standard import homogeneous_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import published_runs  # noqa: E402

DSV3 = load_model("deepseek-v3")
TOKENS = 4096


def _shape(modules: tuple[str, ...] = (), tp: int = 1) -> ActivationShape:
    return ActivationShape(tokens=TOKENS, seq_len=TOKENS, tp=tp, etp=1,
                           sequence_parallel=tp > 1, unfused_attention=False, dropout=False,
                           moe_imbalance=1.0, recompute_modules=frozenset(modules))


def _acts(model, layer: int, modules: tuple[str, ...], tp: int = 1) -> float:
    return layer_activation_bytes(model, layer, _shape(modules, tp), "selective")


def test_mla_up_proj_drops_the_up_projected_heads():
    """``mla_up_proj`` keeps the compressed latents and drops Q, K and V as the up-projections
    write them: 2 bytes x a x (2 qk_head_dim + v_head_dim) per token (DeepSeek-V3: 128 heads,
    192 and 128 wide), 65,536 elements; every other tensor stays."""
    ml, a = DSV3.mla, DSV3.num_heads
    assert (2 * ml.qk_head_dim + ml.v_head_dim) * a == 128 * (2 * 192 + 128)
    moe_layer = DSV3.num_layers - 1
    drop = _acts(DSV3, moe_layer, ("layernorm",)) - _acts(DSV3, moe_layer,
                                                          ("layernorm", "mla_up_proj"))
    assert drop == pytest.approx(TOKENS * 2 * 65536, rel=1e-12)


def test_each_module_drops_only_its_own_tensors():
    """Per token on a MoE layer with a shared expert (DeepSeek-V3, tp 1): ``layernorm`` the
    two norm outputs (2 x 2h), ``moe_act`` the routed experts' activation outputs (2 x top_k
    x f_e), ``shared_experts`` the shared expert's activation input and output (4 f_s + 2
    f_s), and ``moe`` all three FFN parts (not the norms). On a dense layer ``mlp`` drops its
    activation input and output (4f + 2f)."""
    h, moe = DSV3.hidden_size, DSV3.moe
    layer = DSV3.num_layers - 1
    base = _acts(DSV3, layer, ("core_attn",))  # the log-sum-exp only: taken out of each pair

    def drop(*mods: str) -> float:
        return (base - _acts(DSV3, layer, ("core_attn",) + mods)) / TOKENS

    assert drop("layernorm") == pytest.approx(2 * 2 * h)
    assert drop("moe_act") == pytest.approx(2 * moe.top_k * moe.expert_ffn_hidden)
    assert drop("shared_experts") == pytest.approx(6 * moe.shared_width)
    routed = moe.top_k * (2 * h + 4 * moe.expert_ffn_hidden) + 4 * moe.num_experts
    assert drop("moe") == pytest.approx(drop("moe_act") + drop("shared_experts") + routed)
    assert drop("moe", "moe_act", "shared_experts") == pytest.approx(drop("moe"))
    dense = 0  # DeepSeek-V3's first layers are dense
    assert not DSV3.is_moe_layer(dense)
    f = DSV3.ffn_hidden_size
    only_lse = _acts(DSV3, dense, ("core_attn",))
    assert (only_lse - _acts(DSV3, dense, ("core_attn", "mlp"))) / TOKENS == pytest.approx(6 * f)
    assert _acts(DSV3, dense, ("core_attn", "moe_act", "moe")) == only_lse


def test_default_selective_set_follows_the_attention_kernel():
    """No module named: the attention core with unfused attention (Korthikanti et al.), else
    the norms and the routed experts' activation functions; none unless selective. The
    memory model takes the same default when handed no module."""
    cfg = TrainingConfig(recompute="selective")
    assert cfg.selective_modules() == {"layernorm", "moe_act"}
    assert replace(cfg, attention="unfused").selective_modules() == {"core_attn"}
    assert replace(cfg, recompute_modules=("mlp",)).selective_modules() == {"mlp"}
    assert TrainingConfig(recompute="full").selective_modules() == frozenset()
    layer = DSV3.num_layers - 1
    assert _acts(DSV3, layer, ()) == _acts(DSV3, layer, ("layernorm", "moe_act"))


@pytest.mark.parametrize("bad", [dict(recompute="none", recompute_modules=("mlp",)),
                                 dict(recompute="selective", recompute_modules=("attn",)),
                                 dict(recompute="selective", recompute_modules=("mlp", "mlp"))])
def test_config_refuses_modules_it_cannot_price(bad):
    with pytest.raises(ConfigError) as err:
        TrainingConfig(**bad)
    assert err.value.quantity == "recompute_modules"


def test_options_round_trip_and_default_stays_out():
    """Plans keep the modules as a list; a plan without them reads and hashes as before."""
    cfg = TrainingConfig(recompute="selective", recompute_modules=("mla_up_proj", "mlp"))
    data = cfg.options_dict()
    assert data["recompute_modules"] == ["mla_up_proj", "mlp"]
    assert TrainingConfig.from_dict({"degrees": {}, **data}) == cfg
    assert "recompute_modules" not in TrainingConfig(recompute="selective").options_dict()


def _ctx(model, cfg: TrainingConfig, gpus: int = 8):
    cluster = homogeneous_cluster("H100-SXM5-80GB", gpus // 8)
    return make_context(model, cluster, Workload(TOKENS, 64), cfg, Profile(), ())


def _forward(ctx, layer: int):
    return layer_forward_time(layer_work(ctx.model, layer, ctx.shard), ctx.rates, ctx.prof)


def test_mla_up_proj_recompute_costs_its_gemms():
    """Re-running MLA's up-projections costs at least their GEMMs' FLOPs at the peak rate,
    2 x tokens x (q_lora x a x qk + kv_lora x a x (nope + v)) per layer, and is priced as
    those two GEMMs plus RoPE and four launches."""
    cfg = TrainingConfig(degrees=Degrees(dp=8, ep=8), recompute="selective",
                         recompute_modules=("mla_up_proj",))
    ctx = _ctx(DSV3, cfg)
    ml, a = DSV3.mla, DSV3.num_heads
    flops = 2 * TOKENS * (ml.q_lora_rank * a * ml.qk_head_dim
                          + ml.kv_lora_rank * a * (ml.qk_nope_head_dim + ml.v_head_dim))
    up = mla_up_gemms(DSV3, ctx.shard)
    assert sum(g.flops for g in up) == pytest.approx(flops)
    layer = DSV3.num_layers - 1
    s = selective_recompute_s(ctx, layer, _forward(ctx, layer), 0.0)
    gemms = sum(gemm_time_s(g, ctx.rates, ctx.prof) for g in up)
    assert s > gemms >= flops / ctx.rates.peak_flops
    assert s < gemms + 4 * ctx.prof.kernel_overhead_s + 1e-3


def test_more_modules_cost_more_time_and_less_memory():
    """Adding a submodule to the set never lowers the recompute time nor raises the
    activation bytes (an estimate of DeepSeek-V3 on 64 H100, every stage)."""
    model, cluster = DSV3, homogeneous_cluster("H100-SXM5-80GB", 32)
    w = Workload(TOKENS, 512)
    base = TrainingConfig(degrees=Degrees(pp=8, dp=32, ep=32), recompute="selective")
    chain = [("layernorm",), ("layernorm", "moe_act"), ("layernorm", "moe_act", "mla_up_proj"),
             ("layernorm", "moe_act", "mla_up_proj", "mlp"),
             ("layernorm", "moe_act", "mla_up_proj", "mlp", "moe")]
    ests = [estimate(model, cluster, w, replace(base, recompute_modules=m), Profile())
            for m in chain]
    for a, b in zip(ests, ests[1:]):
        assert b.time.recompute_s >= a.time.recompute_s
        assert b.memory.activations_bytes <= a.memory.activations_bytes
    assert ests[-1].time.recompute_s > 3 * ests[0].time.recompute_s
    assert ests[-1].memory.activations_bytes < 0.5 * ests[0].memory.activations_bytes


def test_moe_recompute_includes_the_token_exchange():
    """Recomputing the whole MoE layer runs its dispatch and combine again: with EP across
    nodes its recompute exceeds that of the same layer's FFN submodules by at least the
    forward exchange."""
    cfg = TrainingConfig(degrees=Degrees(dp=16, ep=16), recompute="selective",
                         recompute_modules=("moe",))
    ctx = _ctx(DSV3, cfg, 16)
    layer = DSV3.num_layers - 1
    t = _forward(ctx, layer)
    parts = selective_recompute_s(
        _ctx(DSV3, replace(cfg, recompute_modules=("moe_act", "shared_experts")), 16),
        layer, t, 0.0)
    assert selective_recompute_s(ctx, layer, t, 0.01) > parts + 0.01


def test_cli_takes_modules_and_reports_them():
    runner = CliRunner()
    args = ["estimate", "--model", "deepseek-v3", "--gpu", "GB200", "--nodes", "64",
            "--gpus-per-node", "4", "--pp", "4", "--ep", "64", "--vpp", "4",
            "--precision", "fp8", "--recompute", "selective"]
    named = runner.invoke(app, args + ["--recompute-modules", "mla_up_proj", "--format",
                                       "json"])
    default = runner.invoke(app, args + ["--format", "json"])
    assert named.exit_code == 0 and default.exit_code == 0
    a, b = json.loads(named.output), json.loads(default.output)
    assert a["config"]["recompute_modules"] == ["mla_up_proj"]
    assert "recompute_modules" not in b["config"]
    assert a["memory"]["activations_bytes"] < 0.7 * b["memory"]["activations_bytes"]
    table = runner.invoke(app, args + ["--recompute-modules", "mla_up_proj,layernorm"])
    assert "recompute modules mla_up_proj, layernorm" in table.output
    bad = runner.invoke(app, args[:-1] + ["none", "--recompute-modules", "mla_up_proj"])
    assert bad.exit_code == 2
    assert "--recompute-modules" in bad.output and "Traceback" not in bad.output


def test_calibration_rows_take_their_releases_modules():
    """A Megatron-Bridge DeepSeek-V3 row whose release config recomputes ``mla_up_proj`` runs
    with exactly that module, and one that recomputes nothing runs with none."""
    rows = {r["id"]: r for r in published_runs.load_all_rows()}
    rid = "mbridge-26.02-deepseekv3-gb200-256-mxfp8-tp1pp4cp1vp4ep64mbs1gbs4096"
    (cfg,) = published_runs.candidate_configs(rows[rid], 256)
    assert cfg.recompute == "selective" and cfg.recompute_modules == ("mla_up_proj",)
    assert published_runs._recompute_modules(rows[rid], "none") == ()


def test_a_launch_bound_backward_pays_the_rerun_launches():
    """The re-run's kernels are issued by the CPU too: with a backward the GPU finishes before
    the CPU has launched it, the recompute costs its launches at the host rate, and with the
    CPU far ahead it costs its GPU work."""
    cfg = TrainingConfig(degrees=Degrees(dp=8, ep=8), recompute="selective",
                         recompute_modules=("layernorm", "moe_act", "mla_up_proj"))
    layer = DSV3.num_layers - 1
    for host_launch_s in (0.0, 2e-3):
        ctx = make_context(DSV3, homogeneous_cluster("H100-SXM5-80GB", 1), Workload(TOKENS, 64),
                           cfg, Profile(host_launch_s=host_launch_s), ())
        t = _forward(ctx, layer)
        gpu, kernels = selective_recompute_work(ctx, layer, t, 0.0)
        s = selective_recompute_s(ctx, layer, t, 0.0)
        if host_launch_s == 0:
            assert s == pytest.approx(gpu)
        else:
            assert t.host_bwd_s > backward_gpu_s(t)  # launch bound
            assert s == pytest.approx(kernels * host_launch_s)
            assert kernels == 2 + 1 + 2 + 2  # norms, activation, two up-projections, RoPE
