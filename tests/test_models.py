"""Model import and presets: HF config.json import, the model YAML schema, the preset registry.

Parameter counts are pinned to published totals (source beside each number) with a stated
tolerance: 1% for totals, 3% for active parameters.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cost_models.model_spec import active_params, count_params
from planner.errors import SpecError
from planner.inputs.hf_import import load_hf_config, model_from_hf_config
from planner.inputs.model_file import model_from_yaml_dict
from planner.inputs.models import load_model, model_presets

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
TOTAL_TOL, ACTIVE_TOL = 0.01, 0.03

# preset -> (published total, published active or None, source). "Active" as the source counts
# it: every source below counts embedding and unembedding as active, except the gpt-oss model
# card, whose active figure leaves out the embedding table (a lookup) but keeps the unembedding.
PUBLISHED = {
    "llama-3.1-8b": (8.03e9, None, "HF Hub meta-llama/Llama-3.1-8B, safetensors 'Model size'"),
    "llama-3.1-70b": (70.6e9, None, "HF Hub meta-llama/Llama-3.1-70B, 'Model size'"),
    "llama-3.1-405b": (405.9e9, None, "HF Hub meta-llama/Llama-3.1-405B, 'Model size' "
                       "(the card's table says 405B)"),
    "gpt3-175b": (175.0e9, None, "Brown et al. 2020, arXiv:2005.14165, Table 2.1"),
    "opt-13b": (12.85e9, None, "HF Hub facebook/opt-13b, 'Model size' 12.9B (OPT paper, "
                "arXiv:2205.01068, Table 1, names it 13B)"),
    "opt-66b": (65.7e9, None, "HF Hub facebook/opt-66b, 'Model size' 65.7B (OPT paper Table 1: "
                "66B)"),
    "mixtral-8x7b": (46.7e9, 12.9e9, "Mistral AI, 'Mixtral of experts' blog, Dec 2023"),
    "mixtral-8x22b": (141e9, 39e9, "Mistral AI, 'Cheaper, Better, Faster, Stronger', Apr 2024"),
    "qwen3-30b-a3b": (30.5e9, 3.3e9, "HF model card Qwen/Qwen3-30B-A3B"),
    "qwen3-235b-a22b": (235e9, 22e9, "HF model card Qwen/Qwen3-235B-A22B"),
    "deepseek-v3": (671e9, 37e9, "DeepSeek-V3 Technical Report, arXiv:2412.19437, abstract "
                    "(HF card: 685B = 671B main model + 14B MTP module)"),
    "gpt-oss-120b": (116.83e9, 5.13e9, "gpt-oss-120b & gpt-oss-20b Model Card, "
                     "arXiv:2508.10925, Table 1"),
    "gpt-oss-20b": (20.91e9, 3.61e9, "gpt-oss Model Card, arXiv:2508.10925, Table 1"),
}
ACTIVE_WITHOUT_EMBEDDING = {"gpt-oss-120b", "gpt-oss-20b"}
# Presets that are byte-for-byte copies of a fixture below, whose totals PUBLISHED_HF checks
# (at the tolerance its one-significant-digit source allows).
PRESET_FIXTURES = {"kimi-k2": "kimi-k2-instruct"}


def _tiny(model_type: str, **extra: object) -> dict:
    """A made-up small Llama-style config."""
    return dict(model_type=model_type, num_hidden_layers=2, hidden_size=64,
                num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                vocab_size=100, tie_word_embeddings=False) | extra


def _raises(fn, *args) -> str:
    with pytest.raises(SpecError) as info:
        fn(*args)
    assert "\n" not in str(info.value)
    return str(info.value)


# --- every file imports; totals and active counts ---------------------------------------------

@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_every_fixture_imports(path: Path) -> None:
    model = load_hf_config(path)
    assert model.num_layers >= 1 and count_params(model).total > 0
    assert model.source == str(path)


def test_presets_all_listed_with_descriptions() -> None:
    presets = model_presets()
    assert set(presets) == set(PUBLISHED) | set(PRESET_FIXTURES)
    assert all(desc and "\n" not in desc for desc in presets.values())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_params_match_published(name: str) -> None:
    total, _, source = PUBLISHED[name]
    got = count_params(load_model(name)).total
    assert got == pytest.approx(total, rel=TOTAL_TOL), f"{name}: {got:,} vs {total:,.0f} ({source})"


@pytest.mark.parametrize("name", sorted(n for n, row in PUBLISHED.items() if row[1]))
def test_active_params_match_published(name: str) -> None:
    _, active, source = PUBLISHED[name]
    model = load_model(name)
    got = active_params(model)
    if name in ACTIVE_WITHOUT_EMBEDDING:
        got -= count_params(model).embedding
    message = f"{name}: {got:,} vs {active:,.0f} ({source})"
    assert got == pytest.approx(active, rel=ACTIVE_TOL), message


def test_deepseek_structure() -> None:
    """DeepSeek-V3: 3 dense then 58 MoE layers, MLA, 1 MTP module counted apart."""
    model = load_model("deepseek-v3")
    assert (model.num_dense_layers, model.num_moe_layers, model.mtp_layers) == (3, 58, 1)
    assert model.mla.q_lora_rank == 1536 and model.moe.num_shared_experts == 1
    assert (model.moe.router_groups, model.moe.router_group_topk) == (8, 4)  # n_group, topk_group
    assert count_params(model).mtp > 0
    r1 = load_hf_config(FIXTURES / "deepseek-r1.json")
    assert count_params(r1).total == count_params(model).total


def test_gpt_oss_sliding_layers_and_biases() -> None:
    model = load_model("gpt-oss-20b")
    assert model.window(0) == 128 and model.window(1) is None
    assert model.qkv_bias and model.attn_out_bias
    assert model.moe.expert_bias and model.moe.router_bias and model.moe.top_k == 4
    assert model.glu_clamp == 7.0  # HF swiglu_limit
    assert load_model("qwen3-30b-a3b").glu_clamp is None


def test_yarn_attention_factor_follows_transformers() -> None:
    """YaRN's attention factor (what scales RoPE's cos and sin): 0.1 ln(factor) + 1 for
    GPT-OSS (factor 32, no mscale keys); the ratio of the two mscales for DeepSeek-V3 (1/1:
    1); ``attention_factor`` itself when given; 1 for any other rope type."""
    import math
    assert load_model("gpt-oss-120b").rope_attention_factor == pytest.approx(
        0.1 * math.log(32) + 1)
    assert load_model("deepseek-v3").rope_attention_factor == 1.0
    assert load_model("llama-3.1-405b").rope_attention_factor == 1.0  # rope_type llama3
    data = json.loads((FIXTURES / "gpt-oss-20b.json").read_text())
    yarn = data["rope_scaling"]

    def factor(**rope) -> float:
        return model_from_hf_config({**data, "rope_scaling": {**yarn, **rope}},
                                    "m.json").rope_attention_factor
    assert factor(attention_factor=1.25) == 1.25
    assert factor(mscale=0.707, mscale_all_dim=0.707) == pytest.approx(1.0)
    assert factor(mscale=1.0, mscale_all_dim=0) == pytest.approx(0.1 * math.log(32) + 1)
    assert factor(factor=1.0) == 1.0  # no extension
    assert factor(rope_type="linear") == 1.0
    with pytest.raises(SpecError, match=r"rope_scaling\.factor"):
        factor(factor="32")


def test_plans_keep_the_yarn_factor_and_omit_the_default() -> None:
    """A plan file carries GPT-OSS's factor through JSON; models without YaRN write no key,
    so their plans keep their bytes."""
    from planner.plan.document import model_from_plain, model_to_plain
    oss = load_model("gpt-oss-120b")
    assert model_from_plain(json.loads(json.dumps(model_to_plain(oss)))) == oss
    assert "rope_attention_factor" not in model_to_plain(load_model("deepseek-v3"))


def test_gpt_oss_swiglu_limit_must_be_a_positive_number() -> None:
    data = json.loads((FIXTURES / "gpt-oss-20b.json").read_text())
    for bad in ("7", 0, -1.0, True):
        with pytest.raises(SpecError, match="swiglu_limit"):
            model_from_hf_config({**data, "swiglu_limit": bad}, "gpt-oss.json")


def test_preset_lookup_is_case_insensitive() -> None:
    assert load_model("Llama-3.1-70B") == load_model("llama-3.1-70b")
    assert load_model("GPT3-175B").name == "gpt3-175b"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_yaml_schema_mirrors_model_spec(name: str) -> None:
    """Every preset, written back in our schema, loads to the same ModelSpec."""
    model = load_model(name)
    data = {k: v for k, v in dataclasses.asdict(model).items() if k != "source"}
    assert model_from_yaml_dict(data, "roundtrip.yaml") == model


# --- small hand-written configs ---------------------------------------------------------------

def test_gpt2_124m() -> None:
    """124,439,808 = sum of GPT2LMHeadModel('gpt2') parameter numel (tied embeddings)."""
    config = dict(model_type="gpt2", n_embd=768, n_layer=12, n_head=12, n_inner=None,
                  n_positions=1024, vocab_size=50257, activation_function="gelu_new")
    model = model_from_hf_config(config, "gpt2.json")
    assert model.tied_embeddings and model.position_embeddings == 1024 and not model.glu
    assert count_params(model).total == 124_439_808


def test_pythia_160m() -> None:
    """162,322,944: EleutherAI/pythia README, 'Total Params' of pythia-160m (untied)."""
    config = dict(model_type="gpt_neox", hidden_size=768, num_hidden_layers=12,
                  num_attention_heads=12, intermediate_size=3072, vocab_size=50304,
                  hidden_act="gelu", rotary_pct=0.25, use_parallel_residual=True,
                  tie_word_embeddings=False, max_position_embeddings=2048)
    assert count_params(model_from_hf_config(config, "pythia-160m.json")).total == 162_322_944


def test_qwen2_counts_qkv_bias() -> None:
    qwen2 = model_from_hf_config(_tiny("qwen2"), "qwen2.json")
    llama = model_from_hf_config(_tiny("llama"), "llama.json")
    assert qwen2.qkv_bias and not qwen2.attn_out_bias
    bias = 2 * (4 * 16 + 2 * 2 * 16)  # layers * (q bias + k and v bias)
    assert count_params(qwen2).total - count_params(llama).total == bias
    # embed + head + 2 layers * (q,o 64x64 + k,v 64x32 + 2 norms + SwiGLU 3x64x128) + final norm
    assert count_params(llama).total == 2 * 6400 + 2 * (2 * 4096 + 2 * 2048 + 128 + 24576) + 64


def test_qwen3_and_mistral_import() -> None:
    qwen3 = model_from_hf_config(_tiny("qwen3", head_dim=32), "qwen3.json")
    assert qwen3.head_dim == 32 and not qwen3.qkv_bias
    mistral = model_from_hf_config(_tiny("mistral", sliding_window=4096), "mistral.json")
    assert mistral.head_dim == 16 and mistral.window(1) == 4096


def test_qwen_moe_layer_selection() -> None:
    config = _tiny("qwen2_moe", num_hidden_layers=4, num_experts=8, num_experts_per_tok=2,
                   moe_intermediate_size=32, shared_expert_intermediate_size=64,
                   decoder_sparse_step=1, mlp_only_layers=[0])
    model = model_from_hf_config(config, "qwen2-moe.json")
    assert model.moe_layers == (False, True, True, True)
    assert model.moe.num_shared_experts == 1 and model.moe.shared_ffn_hidden == 64


# --- errors: one line, naming file and field --------------------------------------------------

def test_unsupported_model_type() -> None:
    message = _raises(model_from_hf_config, _tiny("bert"), "bert.json")
    assert "bert.json" in message and "model_type" in message and "'bert'" in message


def test_missing_key() -> None:
    config = _tiny("llama")
    del config["hidden_size"]
    message = _raises(model_from_hf_config, config, "cfg.json")
    assert message.startswith("cfg.json: hidden_size:")


def test_negative_hidden_size() -> None:
    message = _raises(model_from_hf_config, _tiny("llama") | {"hidden_size": -64}, "cfg.json")
    assert "cfg.json: hidden_size" in message and "-64" in message


def test_heads_not_multiple_of_kv_heads() -> None:
    message = _raises(model_from_hf_config, _tiny("llama") | {"num_key_value_heads": 3}, "c.json")
    assert "c.json: num_key_value_heads" in message


def test_invalid_json_names_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",}')
    message = _raises(load_hf_config, path)
    assert str(path) in message and "line 1" in message


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_text("num_layers: 2\nhidden_size: [64\nnum_heads: 4\n")
    message = _raises(load_model, str(path))
    assert str(path) in message and "line " in message


def test_extra_yaml_field(tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_text("num_layers: 2\nhidden_size: 64\nnum_heads: 4\nffn_hidden_size: 128\n"
                    "vocab_size: 100\nnum_experts: 8\n")
    message = _raises(load_model, str(path))
    assert message.startswith(f"{path}: num_experts:") and "a known field" in message


def test_nested_yaml_field_path() -> None:
    data = dict(num_layers=2, hidden_size=64, num_heads=4, ffn_hidden_size=128, vocab_size=100,
                moe=dict(num_experts=4, top_k=8, expert_ffn_hidden=32))
    assert _raises(model_from_yaml_dict, data, "m.yaml").startswith("m.yaml: moe.top_k:")
    data["moe"] = dict(num_experts=4, top_k=0, expert_ffn_hidden=32)
    assert "greater than or equal to 1" in _raises(model_from_yaml_dict, data, "m.yaml")


@pytest.mark.parametrize("change,key,says", [
    ({"n_group": 7}, "n_group", "a divisor of the 256"),
    ({"topk_group": 9}, "topk_group", "1 to 8 groups"),
    # 40 experts need 2 of 8 groups of 32: the message gives the range that holds them
    ({"topk_group": 1, "num_experts_per_tok": 40}, "topk_group", "2 to 8 groups"),
    # groups without the limit: not silently "1 group", the tightest limit there is
    ({"topk_group": None}, "topk_group", "key is missing"),
    # a top-k beyond the experts is named as such, not blamed on topk_group
    ({"num_experts_per_tok": 300}, "num_experts_per_tok", "at most the 256 experts")])
def test_router_groups_that_cannot_hold_the_experts(change: dict, key: str, says: str) -> None:
    """DeepSeek-V3's n_group / topk_group: a group count that does not divide the experts, or
    picked groups too few or too many for the top-k, are named, not a traceback."""
    config = json.loads((FIXTURES / "deepseek-v3.json").read_text()) | change
    message = _raises(model_from_hf_config, config, "cfg.json")
    assert f": {key}:" in message and says in message


def test_yaml_router_groups_checked() -> None:
    data = dict(dataclasses.asdict(load_model("deepseek-v3")))
    data.pop("source", None)
    data["moe"] = data["moe"] | {"router_group_topk": 9}
    assert "router_group_topk" in _raises(model_from_yaml_dict, data, "m.yaml")
    data["moe"].pop("router_group_topk")  # router_groups 8 alone
    message = _raises(model_from_yaml_dict, data, "m.yaml")
    assert "moe.router_group_topk:" in message and "required with router_groups > 1" in message
    data["moe"] = data["moe"] | {"router_groups": 1}  # no groups: no limit, no count needed
    assert model_from_yaml_dict(data, "m.yaml").moe.router_group_topk == 1


def test_yaml_cross_field_error() -> None:
    data = dict(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=3, ffn_hidden_size=128,
                vocab_size=100)
    assert _raises(model_from_yaml_dict, data, "m.yaml").startswith("m.yaml: num_kv_heads:")


def test_hf_json_detected_by_model_type(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_tiny("llama")))
    assert load_model(str(path)).num_layers == 2


def test_unknown_preset_suggests_close_match() -> None:
    message = _raises(load_model, "lama-3.1-70b")
    assert message.startswith("--model:") and "llama-3.1-70b" in message


def test_missing_file_named(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    assert str(path) in _raises(load_model, str(path))


# --- gated, linear and chunked attention: Kimi-K2, MiniMax-M2, Qwen3.5, Llama-4, GLM-4.5 ------

# fixture -> (published total, published active or None, total tolerance, source). Active counts
# embedding and unembedding, as the Qwen3 and Llama rows above. Multimodal checkpoints publish
# totals with their vision encoder, which the ModelSpec (language model only) leaves out.
PUBLISHED_HF = {
    "kimi-k2-instruct": (1e12, 32e9, 0.05, "HF model card moonshotai/Kimi-K2-Instruct: '1T' "
                         "total (one significant digit: tolerance is half of it, 5%), 32B "
                         "activated"),
    "minimax-m2.5": (230e9, None, TOTAL_TOL, "HF model card MiniMaxAI/MiniMax-M2: 230B total "
                     "(M2.5 has the same config shape); its '10B active' does not say what it "
                     "counts, so it is not pinned"),
    "qwen3.5-397b-a17b": (397e9, 17e9, TOTAL_TOL, "HF model card Qwen/Qwen3.5-397B-A17B "
                          "(total includes the ~0.4B vision encoder)"),
    "qwen3.5-35b-a3b": (35e9, None, TOTAL_TOL, "HF model card Qwen/Qwen3.5-35B-A3B (total "
                        "includes the vision encoder; '3B' active is one significant digit)"),
    "llama-4-scout-17b-16e": (109e9, 17e9, 0.015, "Meta Llama 4 model card: Scout 17B active, "
                              "109B total including the vision encoder, which the vendored "
                              "config omits (language model alone: 1.1% below)"),
    "llama-4-maverick-17b-128e": (400e9, 17e9, TOTAL_TOL, "Meta Llama 4 model card: Maverick "
                                  "17B active, 400B total"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_HF))
def test_new_architectures_match_published(name: str) -> None:
    total, active, tol, source = PUBLISHED_HF[name]
    model = load_hf_config(FIXTURES / f"{name}.json")
    got = count_params(model).total
    assert got == pytest.approx(total, rel=tol), f"{name}: {got:,} vs {total:,.0f} ({source})"
    if active:
        got = active_params(model)
        message = f"{name} active: {got:,} vs {active:,.0f} ({source})"
        assert got == pytest.approx(active, rel=ACTIVE_TOL), message


@pytest.mark.parametrize("name", sorted(PRESET_FIXTURES))
def test_preset_is_the_fixture(name: str) -> None:
    """The preset file is the vendored config byte for byte, so it imports to the same model."""
    fixture = FIXTURES / f"{PRESET_FIXTURES[name]}.json"
    preset_file = Path(__file__).parents[1] / "planner" / "data" / "models" / f"{name}.json"
    assert preset_file.read_bytes() == fixture.read_bytes()
    assert count_params(load_model(name)) == count_params(load_hf_config(fixture))


def test_kimi_k2_is_deepseek_v3_shaped() -> None:
    """modeling_deepseek_v3.py: MLA, 1 dense layer then 60 MoE layers of 384 experts + 1 shared."""
    model = load_hf_config(FIXTURES / "kimi-k2-instruct.json")
    assert (model.num_dense_layers, model.num_moe_layers, model.mtp_layers) == (1, 60, 0)
    assert model.mla.kv_lora_rank == 512 and model.num_heads == 64
    assert model.moe.num_experts == 384 and model.moe.num_shared_experts == 1


def test_minimax_m2_layers() -> None:
    model = load_hf_config(FIXTURES / "minimax-m2.5.json")
    assert model.num_moe_layers == 62 and model.moe.num_shared_experts == 0
    assert model.moe.router_bias and (model.num_heads, model.num_kv_heads) == (48, 8)
    data = json.loads((FIXTURES / "minimax-m2.5.json").read_text())
    lightning = data | {"attn_type_list": [0] + [1] * 61}
    assert _raises(model_from_hf_config, lightning, "m.json").startswith("m.json: attn_type_list:")


def test_qwen3_5_hybrid_layers_and_state() -> None:
    """modular_qwen3_5.py: 45 Gated DeltaNet + 15 gated full-attention layers; each linear
    layer keeps 64 heads x 128 x 128 recurrent state plus a 3-step conv state of 12,288 channels
    (2 x 16 x 128 keys + 64 x 128 values)."""
    model = load_hf_config(FIXTURES / "qwen3.5-397b-a17b.json")
    assert (model.num_linear_layers, model.num_kv_layers) == (45, 15)
    assert model.is_linear_layer(0) and not model.is_linear_layer(3) and model.attn_gate
    la = model.linear_attn
    assert la.recurrent_state_elems == 64 * 128 * 128 and la.conv_state_elems == 12_288 * 3
    assert model.linear_state_elems == 1_048_576 + 36_864
    assert model.moe.num_shared_experts == 1 and model.num_moe_layers == 60


def test_gated_deltanet_params_follow_modeling_file() -> None:
    """One Qwen3-Next linear layer of a small config, weight by weight (modeling_qwen3_next.py)."""
    config = _tiny("qwen3_next", num_hidden_layers=4, head_dim=16, num_experts=4,
                   num_experts_per_tok=2, moe_intermediate_size=32,
                   shared_expert_intermediate_size=32, linear_num_key_heads=2,
                   linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                   linear_conv_kernel_dim=4, full_attention_interval=4)
    model = model_from_hf_config(config, "next.json")
    assert model.linear_layers == (True, True, True, False)
    key_dim, value_dim, h = 2 * 8, 4 * 8, 64
    linear = (h * (2 * key_dim + 2 * value_dim)  # in_proj_qkvz
              + h * 2 * 4  # in_proj_ba
              + (2 * key_dim + value_dim) * 4  # conv1d, depthwise, no bias
              + 4 + 4 + 8  # A_log, dt_bias, gated norm
              + value_dim * h  # out_proj
              + 2 * h)  # input and post-attention layer norms
    full = h * 4 * 16 * 2 + 2 * h * 2 * 16 + 4 * 16 * h + 2 * h  # q_proj carries the gate
    assert count_params(model).attention == 3 * linear + full
    ungated = model_from_hf_config(config | {"attn_output_gate": False}, "next.json")
    assert count_params(model).attention - count_params(ungated).attention == h * 4 * 16


def test_llama4_interleaved_moe_and_chunked_attention() -> None:
    """Maverick: MoE on odd layers (step 2), dense layers 16384 wide; chunked attention on 3
    of every 4 layers, the 4th (NoPE) full."""
    model = load_hf_config(FIXTURES / "llama-4-maverick-17b-128e.json")
    assert model.moe_layers[:4] == (False, True, False, True) and model.num_moe_layers == 24
    assert model.ffn_hidden_size == 16384 and model.moe.shared_ffn_hidden == 8192
    assert [model.chunk(i) for i in range(4)] == [8192, 8192, 8192, None]
    assert model.window(0) is None and model.num_kv_layers == 48
    scout = load_hf_config(FIXTURES / "llama-4-scout-17b-16e.json")
    assert scout.num_moe_layers == 48 and scout.moe.top_k == 1


def test_glm4_moe_import() -> None:
    """modeling_glm4_moe.py on a small config: q/k/v bias but no o_proj bias, dense below
    first_k_dense_replace, shared expert of moe_intermediate_size, router bias, MTP apart."""
    config = _tiny("glm4_moe", num_hidden_layers=3, head_dim=16, attention_bias=True,
                   n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                   moe_intermediate_size=32, first_k_dense_replace=1, num_nextn_predict_layers=1)
    model = model_from_hf_config(config, "glm.json")
    assert model.moe_layers == (False, True, True) and model.mtp_layers == 1
    assert model.qkv_bias and not model.attn_out_bias and model.moe.router_bias
    assert model.moe.num_shared_experts == 1 and model.moe.shared_ffn_hidden == 32


def test_nested_text_config_errors_name_the_key() -> None:
    data = json.loads((FIXTURES / "qwen3.5-35b-a3b.json").read_text())
    bad = data | {"text_config": data["text_config"] | {"linear_num_key_heads": "16"}}
    message = _raises(model_from_hf_config, bad, "q.json")
    assert message.startswith("q.json: text_config.linear_num_key_heads:") and "'16'" in message
    short = data | {"text_config": data["text_config"] | {"layer_types": ["full_attention"]}}
    assert _raises(model_from_hf_config, short, "q.json").startswith("q.json: "
                                                                      "text_config.layer_types:")
    assert "text_config" in _raises(model_from_hf_config, {"model_type": "llama4"}, "l.json")


def test_malformed_fixture_file_names_file_and_key(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "llama-4-scout-17b-16e.json").read_text())
    data["text_config"]["attention_chunk_size"] = -8192
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    message = _raises(load_hf_config, path)
    assert message.startswith(f"{path}: text_config.attention_chunk_size:") and "-8192" in message


def test_plain_roundtrip_keeps_old_plans_byte_identical() -> None:
    """New attention fields are written only when set: old models serialise as before, and
    plans without them still load."""
    from planner.plan.document import model_from_plain, model_to_plain

    old = load_model("deepseek-v3")
    plain = model_to_plain(old)
    assert not {"attn_gate", "linear_attn", "linear_layers", "attention_chunk",
                "chunk_layers"} & set(plain)
    assert model_from_plain(plain) == old
    for name in ("qwen3.5-397b-a17b", "llama-4-scout-17b-16e"):
        model = load_hf_config(FIXTURES / f"{name}.json")
        back = model_from_plain(json.loads(json.dumps(model_to_plain(model))))
        assert back == model


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_yaml_schema_holds_every_imported_architecture(path: Path) -> None:
    """An imported HF model (linear, chunked, gated attention included), written in our schema,
    loads back to the same ModelSpec."""
    model = load_hf_config(path)
    data = {k: v for k, v in dataclasses.asdict(model).items() if k != "source"}
    assert model_from_yaml_dict(data, "roundtrip.yaml") == model


@pytest.mark.parametrize("field, value, says", [
    ("num_layers", "4", "a number, not a string"), ("glu", 0, "true or false, not 0"),
    ("glu", "false", "true or false, not a string"), ("num_heads", True, "a number, not true")])
def test_model_file_numbers_and_flags_only_as_written(field, value, says) -> None:
    """A model file's "4" is not 4 and 0 is not false (pydantic's lax mode took both; the HF
    import already refused them)."""
    data = dict(num_layers=2, hidden_size=64, num_heads=4, ffn_hidden_size=128, vocab_size=100)
    message = _raises(model_from_yaml_dict, data | {field: value}, "m.yaml")
    assert message.startswith(f"m.yaml: {field}:") and says in message


def test_an_hf_checkpoint_folder_names_the_model_and_is_what_engines_load(tmp_path,
                                                                         monkeypatch) -> None:
    """A checkpoint folder's ``config.json`` (no ``_name_or_path``) is named after the folder,
    the folder itself is accepted as ``--model``, and a serving plan's engines load that folder;
    a preset's engines load its Hugging Face id; a model in our schema gets a note (and emit a
    warning) that the engines would load a bare name."""
    from planner.inputs.models import engine_model_path

    folder = tmp_path / "Llama-Custom-8B"
    folder.mkdir()
    data = json.loads((FIXTURES / "llama-3.1-8b.json").read_text())
    data.pop("_name_or_path", None)
    (folder / "config.json").write_text(json.dumps(data))
    by_file, by_folder = load_model(str(folder / "config.json")), load_model(str(folder))
    assert by_file.name == by_folder.name == "Llama-Custom-8B"
    assert engine_model_path(str(folder / "config.json"), by_file) == (str(folder), True)
    assert engine_model_path(str(folder), by_folder) == (str(folder), True)
    monkeypatch.chdir(folder)  # a bare config.json is named after the folder it sits in
    assert load_model("config.json").name == "Llama-Custom-8B"
    assert engine_model_path("config.json", by_file) == (str(folder.resolve()), True)
    monkeypatch.chdir(tmp_path)
    assert engine_model_path("Llama-Custom-8B", by_folder) == (str(folder.resolve()), True)
    preset = load_model("llama-3.1-8b")
    assert engine_model_path("Llama-3.1-8B", preset) == ("meta-llama/Meta-Llama-3.1-8B", True)
    assert engine_model_path("gpt3-175b", load_model("gpt3-175b")) == ("gpt3-175b", False)


def test_serve_and_emit_say_when_the_engines_would_load_a_bare_model_name(tmp_path) -> None:
    from typer.testing import CliRunner

    from planner.cli.app import app
    runner = CliRunner()
    for model, path, warned in (("gpt3-175b", "gpt3-175b", True),
                                ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", False)):
        out = tmp_path / f"{model}.json"
        result = runner.invoke(app, ["serve", "--model", model, "--gpu", "H100", "--nodes", "2",
                                     "--out", str(out)])
        assert result.exit_code == 0, result.output
        plan = json.loads(out.read_text())
        assert plan["serving"]["model_path"] == path
        emitted = runner.invoke(app, ["emit", "sglang", str(out), "--out-dir",
                                      str(tmp_path / model)])
        assert emitted.exit_code == 0, emitted.output
        assert ("give serve --model-path" in emitted.stderr) is warned
        assert f"--model-path {path}" in (tmp_path / model / "serving_commands.txt").read_text()


def test_an_hf_config_without_model_type_says_so(tmp_path) -> None:
    data = json.loads((FIXTURES / "llama-3.1-8b.json").read_text())
    data.pop("model_type")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    message = _raises(load_model, str(path))
    assert "model_type" in message and "num_layers" in message.split("model_type", 1)[1]
    assert "required field" not in message


def test_rope_base_is_read_from_rope_parameters_too() -> None:
    """Newer configs (transformers' rope_parameters: Qwen3.5, GLM-5) hold rope_theta there."""
    assert load_model(str(FIXTURES / "qwen3.5-35b-a3b.json")).rope_theta == 1e7
    assert load_model(str(FIXTURES / "glm-5.json")).rope_theta == 1e6
    data = json.loads((FIXTURES / "llama-3.1-8b.json").read_text())
    moved = {k: v for k, v in data.items() if k not in ("rope_theta", "rope_scaling")}
    moved["rope_parameters"] = {"rope_theta": 500000.0, **data["rope_scaling"]}
    spec = model_from_hf_config(moved, "moved.json")
    assert (spec.rope_theta, spec.rope_llama3_factor) == (500000.0, 8.0)
