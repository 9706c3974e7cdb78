"""DeepSeek Sparse Attention (DSA): import of DeepSeek-V3.2 and GLM-5 configs, their parameter
counts, KV bytes, and the serving cost terms (top-k main attention, FP8 lightning indexer).

Hand numbers come from the configs (fixtures/hf_configs, origin in ORIGINS.md) and the weight
shapes of ``DeepseekV32Indexer`` (transformers ``modular_deepseek_v32.py``).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cost_models.model_spec import count_params
from cost_models.serving.config import PoolLayout, ServingWorkload
from cost_models.serving.latency import LayerKind, decode_step, prefill_step
from cost_models.serving.memory import kv_bytes_per_request, kv_bytes_per_token
from planner.cli.app import app
from planner.errors import SpecError
from planner.inputs.hf_import import load_hf_config, model_from_hf_config
from planner.plan.document import model_from_plain, model_to_plain
from planner.serving.estimate import Calibration, PoolSpec, costing
from topologies.catalog import get_gpu
from topologies.standard import homogeneous_cluster

HF = Path(__file__).parent / "fixtures" / "hf_configs"
H200 = "H200-SXM-141GB"
INDEX_KEY_BYTES = 128 + 4  # 128 FP8 values + one fp32 scale per 128 (vLLM indexer k_cache)


def _load(name: str):
    return load_hf_config(HF / f"{name}.json")


def _data(name: str) -> dict:
    return json.loads((HF / f"{name}.json").read_text())


def _costing(model, layout: PoolLayout):
    g = get_gpu(H200)
    wl = ServingWorkload(precision="fp8", kv_dtype="fp8")
    return costing(model, PoolSpec("decode", g.name, layout), wl,
                   homogeneous_cluster(g.name, 1), Calibration.defaults((g.name,)), g)


# --- import and parameter counts ------------------------------------------------------------

def test_configs_import_with_their_indexer_layout():
    v32, glm5, glm52 = _load("deepseek-v3.2"), _load("glm-5"), _load("glm-5.2")
    sizes = {m.name: (m.sparse_attn.index_topk, m.sparse_attn.index_n_heads,
                      m.sparse_attn.index_head_dim, m.num_indexer_layers)
             for m in (v32, glm5)}
    assert list(sizes.values()) == [(2048, 64, 128, 61), (2048, 32, 128, 78)]
    assert (v32.num_dense_layers, v32.num_moe_layers, v32.mtp_layers) == (3, 58, 1)
    assert (glm5.mla.qk_nope_head_dim, glm5.mla.v_head_dim) == (192, 256)
    assert glm5.num_moe_layers == glm52.num_moe_layers == 75
    # GLM-5.2: layers 0-2 and every 4th from 6 run an indexer, the rest reuse its top-k
    full = [i for i in range(78) if glm52.has_indexer(i)]
    assert full == [0, 1, 2, *range(6, 78, 4)] and glm52.num_indexer_layers == 21
    assert all(glm52.sparse_topk(i) == 2048 for i in range(78))
    # the same flags follow from index_topk_freq / index_skip_topk_offset alone
    derived = {k: v for k, v in _data("glm-5.2").items() if k != "indexer_types"}
    assert model_from_hf_config(derived, "glm-5.2.json") == glm52


def test_indexer_parameters_follow_the_modeling_file():
    """V3.2 minus V3 (the same config without the index keys) is one indexer per layer:
    wq_b 1536 x 64*128, wk 7168 x 128, k_norm weight and bias 2 x 128, weights_proj 7168 x 64;
    the MTP layer carries one too."""
    data = _data("deepseek-v3.2")
    v3 = {k: v for k, v in data.items() if not k.startswith("index_")} | {
        "model_type": "deepseek_v3"}
    with_dsa = count_params(model_from_hf_config(data, "v32.json"))
    without = count_params(model_from_hf_config(v3, "v3.json"))
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert indexer == 13_959_424
    assert with_dsa.attention - without.attention == 61 * indexer
    assert with_dsa.mtp - without.mtp == indexer
    assert with_dsa.total - without.total == 61 * indexer
    # GLM-5.2's 57 shared layers carry no indexer (GLM-5 otherwise has its shapes)
    glm_indexer = 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32
    assert (count_params(_load("glm-5")).total - count_params(_load("glm-5.2")).total
            == 57 * glm_indexer)


@pytest.mark.parametrize("name, published, rel, source", [
    ("deepseek-v3.2", 671e9, 0.01, "DeepSeek-V3 report (arXiv:2412.19437) 671B; the V3.2-Exp "
     "report: DSA is the only architectural change from V3.1-Terminus (V3 shapes)"),
    ("glm-5", 744e9, 0.01, "GLM-5 technical report (arXiv:2602.15763), architecture table: "
     "744B total"),
])
def test_totals_match_published(name, published, rel, source):
    got = count_params(_load(name)).total
    assert got == pytest.approx(published, rel=rel), f"{name}: {got:,} ({source})"


def test_v32_checkpoint_size_matches_the_hub():
    """HF Hub deepseek-ai/DeepSeek-V3.2 'Model size' 685B (safetensors): the main model, the MTP
    layer, and the MTP layer's own copies of the embedding and the head (685.36B here)."""
    m = _load("deepseek-v3.2")
    c = count_params(m)
    checkpoint = c.total + c.mtp + 2 * m.vocab_size * m.hidden_size
    assert checkpoint == pytest.approx(685e9, rel=0.001)


def test_plan_roundtrip_keeps_sparse_fields_and_old_models_clean():
    for name in ("deepseek-v3.2", "glm-5.2"):
        model = _load(name)
        assert model_from_plain(json.loads(json.dumps(model_to_plain(model)))) == model
    assert not {"sparse_attn", "indexer_layers"} & set(model_to_plain(_load("deepseek-v3")))


@pytest.mark.parametrize("change, key", [
    ({"indexer_types": ["full"] * 5}, "indexer_types"),
    ({"indexer_types": ["shared"] + ["full"] * 77}, "indexer_types"),
    ({"index_topk": 0}, "index_topk"),
    ({"q_lora_rank": None}, "q_lora_rank"),
])
def test_bad_dsa_configs_name_the_key(change, key):
    with pytest.raises(SpecError) as info:
        model_from_hf_config(_data("glm-5") | change, "g.json")
    assert str(info.value).startswith(f"g.json: {key}:")


# --- memory ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, layers, indexer_layers", [
    ("deepseek-v3.2", 61, 61), ("glm-5", 78, 78), ("glm-5.2", 78, 21)])
def test_kv_bytes_per_token_add_the_indexer_keys(name, layers, indexer_layers):
    """MLA latent + rope key (512 + 64 values, at the KV dtype) on every layer, plus 132 bytes
    of FP8 indexer key and scale on every layer with an indexer, whatever the KV dtype."""
    m = _load(name)
    assert m.mla.kv_lora_rank + m.mla.qk_rope_head_dim == 576
    for dtype, size in (("bf16", 2), ("fp8", 1)):
        hand = layers * 576 * size + indexer_layers * INDEX_KEY_BYTES
        assert kv_bytes_per_token(m, dtype) == hand
    # V3.2 fp8: 61 x 576 + 61 x 132 = 43,188 B; neither part is split over TP
    per_gpu = kv_bytes_per_request(m, PoolLayout(tp=8, ep=8), "fp8", 10_000) / 10_000
    assert per_gpu == pytest.approx(kv_bytes_per_token(m, "fp8"), rel=1e-12)


# --- decode ---------------------------------------------------------------------------------

BATCH = 32


def _decode(model, context: float):
    return decode_step(_costing(model, PoolLayout(tp=8, ep=8)), BATCH, context)


def _kv_read_s(model, nbytes: float) -> float:
    c = _costing(model, PoolLayout(tp=8, ep=8))
    return nbytes / (c.hw.hbm_bytes_per_s * c.sprof.kv_read_efficiency)


@pytest.mark.parametrize("context", [512, 2048])
def test_decode_below_topk_is_v3_plus_the_indexer(context):
    """Up to index_topk keys V3.2 attends to what V3 does; the difference is the indexer: its
    key reads (61 layers x 132 B a token) and its replicated projections."""
    v3, v32 = _load("deepseek-v3"), _load("deepseek-v3.2")
    a, b = _decode(v3, context), _decode(v32, context)
    assert (b.moe_s, b.comm_s, b.overhead_s) == (a.moe_s, a.comm_s, a.overhead_s)
    index_reads = _kv_read_s(v32, 61 * BATCH * context * INDEX_KEY_BYTES)
    assert b.attention_s - a.attention_s == pytest.approx(index_reads, rel=1e-9)
    assert 0 < b.gemm_s - a.gemm_s < 0.6 * a.gemm_s


def test_decode_past_topk_grows_with_the_indexer_only():
    """Past 2048 keys V3.2's main attention stops growing: at 128k a step reads 2048 latents a
    layer plus every token's indexer key (132 B against the latent's 576 in fp8)."""
    v3, v32 = _load("deepseek-v3"), _load("deepseek-v3.2")
    a = {ctx: _decode(v3, ctx) for ctx in (8192, 32768, 131072)}
    b = {ctx: _decode(v32, ctx) for ctx in (8192, 32768, 131072)}
    hand = _kv_read_s(v32, 61 * BATCH * (2048 * 576 + 131072 * INDEX_KEY_BYTES))
    assert b[131072].attention_s == pytest.approx(hand, rel=1e-9)
    growth_v3 = a[131072].attention_s - a[8192].attention_s
    growth_v32 = b[131072].attention_s - b[8192].attention_s
    assert growth_v32 < 0.25 * growth_v3  # 132 / 576 = 0.23 of V3's per-token growth
    assert b[131072].total_s < 0.5 * a[131072].total_s
    assert b[8192].total_s < a[8192].total_s < b[32768].total_s < a[32768].total_s


def test_shared_indexer_layers_read_no_indexer_keys():
    glm5, glm52 = _load("glm-5"), _load("glm-5.2")
    gap = _decode(glm5, 65536).attention_s - _decode(glm52, 65536).attention_s
    assert gap == pytest.approx(_kv_read_s(glm5, 57 * BATCH * 65536 * INDEX_KEY_BYTES), rel=1e-9)


# --- prefill --------------------------------------------------------------------------------

@pytest.mark.parametrize("new, cached", [(1000, 0), (3000, 0), (1000, 1500), (500, 4000),
                                         (1, 2047), (1, 2048), (4096, 2047)])
def test_sparse_prefill_keys_match_a_brute_force_count(new, cached):
    kind = LayerKind(moe=False, linear=False, window=None, chunk=None, topk=2048, indexer=True,
                     count=1)
    brute = sum(min(p, 2048) for p in range(cached + 1, cached + new + 1)) / new
    assert kind.prefill_keys(new, cached) == pytest.approx(brute, rel=1e-12)


def test_prefill_main_attention_grows_linearly_past_topk():
    """V3.2 prefill attention minus the indexer's causal FP8 scores (61 layers x 64 heads x 128
    per key, replicated over TP) grows by the same amount per 16k tokens past the point where
    the sparse MQA-mode kernel beats the dense MHA one (~12k tokens); V3's attention grows
    quadratically."""
    v3, v32 = _load("deepseek-v3"), _load("deepseek-v3.2")
    c3, c32 = _costing(v3, PoolLayout(tp=8, ep=8)), _costing(v32, PoolLayout(tp=8, ep=8))
    rate = c32.hw.peak_flops * c32.prof.attention_efficiency * c32.prof.fp8_speedup
    lengths = (16384, 32768, 49152, 65536)

    def main(n: int) -> float:
        scores = 61 * 2.0 * n * (n + 1) / 2.0 * 64 * 128 / rate
        return prefill_step(c32, (n,)).attention_s - scores

    steps = [main(b) - main(a) for a, b in zip(lengths, lengths[1:])]
    # each new token attends to 2048 latents in MQA mode: 16 heads a GPU x (576 + 512)
    sparse = 61 * 2.0 * 16384 * 2048 * 16 * (576 + 512) / (rate / c32.prof.fp8_speedup)
    assert steps == pytest.approx([sparse] * 3, rel=1e-9)
    dense = [prefill_step(c3, (n,)).attention_s for n in lengths]
    assert dense[3] - dense[2] > 2 * (dense[1] - dense[0])
    # below top-k the main attention is V3's (dense MHA mode): only the indexer is added
    short = 2048
    extra = 61 * 2.0 * short * (short + 1) / 2.0 * 64 * 128 / rate
    assert prefill_step(c32, (short,)).attention_s == pytest.approx(
        prefill_step(c3, (short,)).attention_s + extra, rel=1e-9)


def test_long_prompt_prefill_is_cheaper_with_dsa_on_attention_data_parallel():
    """With attention DP (one GPU a prompt) the indexer's 64 FP8 heads are small next to 128
    MLA heads: a 128k prompt's attention costs V3.2 under half of V3's."""
    v3, v32 = _load("deepseek-v3"), _load("deepseek-v3.2")
    lay = PoolLayout(tp=1, dp=8, ep=8)
    a = prefill_step(_costing(v3, lay), (131072,)).attention_s
    b = prefill_step(_costing(v32, lay), (131072,)).attention_s
    assert b < 0.5 * a


# --- the CLI --------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture", ["deepseek-v3.2", "glm-5"])
def test_serve_plans_dsa_models(fixture):
    result = CliRunner().invoke(app, ["serve", "--model", str(HF / f"{fixture}.json"), "--gpu",
                                      "H200", "--precision", "fp8", "--format", "json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    plans = json.loads(result.output)["plans"]
    assert plans and plans[0]["meets_slo"] and plans[0]["output_tokens_per_s_per_gpu"] > 0
