"""Hugging Face ``config.json`` -> :class:`ModelSpec`.

Owns the mapping from each supported ``model_type``'s config keys to our fields, following the
weight shapes of the matching ``transformers`` modeling file (``modeling_<model_type>.py``).
Families name the same thing differently (experts: ``num_local_experts`` / ``num_experts`` /
``n_routed_experts``; top-k: ``num_experts_per_tok`` / ``experts_per_token``); this module is
the one place that knows. A missing or bad key raises :class:`SpecError` naming file and key.

DeepSeek Sparse Attention (DeepSeek-V3.2 ``deepseek_v32``, GLM-5 ``glm_moe_dsa``) is imported as
MLA plus ``sparse_attn`` (the indexer's sizes and top-k) and ``indexer_layers``.

Multimodal checkpoints (Llama-4, Qwen3.5) nest the language model under ``text_config``; only
that part is imported (the vision tower is not part of the ModelSpec), and errors name the key
as ``text_config.<key>``.

Not represented (a few thousand parameters per model, below 0.001%): the per-head or per-layer
q/k RMSNorm of Qwen3, Qwen3-Next/3.5, GLM-4.5 and MiniMax-M2 (Llama-4's is a parameter-free L2
norm), gpt-oss attention sinks, the Qwen2-MoE / Qwen3-Next shared-expert gate (h x 1). Partial
rotary embeddings (GLM-4.5, MiniMax-M2, Qwen3-Next) and Llama-4's NoPE layers change no shapes
and are not recorded. MiniMax-M2's MTP modules are not counted (their shape is not in the
config).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cost_models.model_spec import (
    ACTIVATIONS, LinearAttnSpec, MLASpec, ModelSpec, MoESpec, SparseAttnSpec, router_groups_error)
from planner.errors import SpecError
from planner.inputs.documents import parse_json
from planner.inputs.limits import (ATTENTION_HEADS, EXPERTS, HIDDEN_SIZE, LAYER_WIDTH,
                                   MODEL_LAYERS, SEQUENCE_TOKENS, VOCABULARY, Limit,
                                   check_file_size)

_MISSING = object()
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token")

# The limit (planner.inputs.limits) on each integer key; any other is a width (LAYER_WIDTH).
# Checked as a key is read, before anything per layer is built from it.
_KEY_LIMITS: dict[str, Limit] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "first_k_dense_replace", "moe_layer_freq",
                     "decoder_sparse_step", "max_window_layers", "num_nextn_predict_layers",
                     "interleave_moe_layer_step", "no_rope_layer_interval",
                     "full_attention_interval", "index_topk_freq", "index_skip_topk_offset"),
                    MODEL_LAYERS),
    **dict.fromkeys(("hidden_size", "n_embd"), HIDDEN_SIZE),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_key_value_heads", "index_n_heads",
                     "linear_num_key_heads", "linear_num_value_heads"), ATTENTION_HEADS),
    **dict.fromkeys(EXPERT_KEYS + TOP_K_KEYS + ("n_shared_experts",), EXPERTS),
    **dict.fromkeys(("sliding_window", "attention_chunk_size", "n_positions", "index_topk"),
                    SEQUENCE_TOKENS),
    "vocab_size": VOCABULARY,
}


@dataclass(frozen=True)
class _Config:
    """A config mapping plus the file it came from; getters raise SpecError on bad values.
    ``prefix`` is where ``data`` sits in the file (``"text_config."`` for a nested config)."""

    data: dict[str, Any]
    source: str
    prefix: str = ""

    def key(self, key: str) -> str:
        """``key`` as the error message names it."""
        return self.prefix + key

    def error(self, key: str, expected: str, got: object = None) -> SpecError:
        return SpecError(self.source, self.key(key), expected, got)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def int(self, key: str, default: Any = _MISSING, minimum: int = 1) -> int:
        """The integer at ``key`` (>= ``minimum``, within its limit: :data:`_KEY_LIMITS`);
        ``default`` when absent or null."""
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                raise self.error(key, f"an integer >= {minimum} (key is missing)")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(key, f"an integer >= {minimum}", value)
        limit = _KEY_LIMITS.get(key, LAYER_WIDTH)
        if limit.exceeded_by(value):
            raise self.error(key, limit.expected(), value)
        return value

    def positive(self, key: str) -> float:
        """The positive number at ``key``."""
        value = self.data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise self.error(key, "a number > 0", value)
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, "true or false", value)
        return value

    def first_int(self, keys: tuple[str, ...]) -> int:
        """The integer under the first of ``keys`` that is present."""
        for key in keys:
            if self.has(key):
                return self.int(key)
        raise self.error(keys[0], f"an integer >= 1 (one of {', '.join(keys)})")

    def activation(self, key: str, default: str) -> str:
        value = self.data.get(key) or default
        if value not in ACTIVATIONS:
            raise self.error(key, f"one of {', '.join(ACTIVATIONS)}", value)
        return value

    def int_list(self, key: str, num_layers: int) -> list[int] | None:
        """A list of layer indices at ``key`` (None when absent)."""
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers
                for i in value):
            raise self.error(key, f"a list of layer indices in 0..{num_layers - 1}", value)
        return value


# --- pieces shared by several families -------------------------------------------------------

def _common(c: _Config, ffn_default: Any = _MISSING) -> dict[str, Any]:
    """Fields named alike by every Llama-descended config."""
    kw = dict(
        name=_model_name(c),
        num_layers=c.int("num_hidden_layers"),
        hidden_size=c.int("hidden_size"),
        ffn_hidden_size=c.int("intermediate_size", default=ffn_default),
        vocab_size=c.int("vocab_size"),
        activation=c.activation("hidden_act", "silu"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        source=c.source,
    )
    factor = _yarn_attention_factor(c)
    return kw | (dict(rope_attention_factor=factor) if factor != 1.0 else {}) | _rope_base(c)


def _rope_base(c: _Config) -> dict[str, float]:
    """``rope_theta`` and Llama 3's ``rope_scaling`` factor, where the config gives them
    (``transformers`` ``_compute_llama3_parameters``), at the top level or in the newer
    ``rope_parameters`` (Qwen3.5, GLM-5); launch files pass them on."""
    out = {}
    params = c.data.get("rope_parameters")
    sub = _Config(params, c.source, c.key("rope_parameters.")) if isinstance(
        params, dict) else None
    if c.has("rope_theta"):
        out["rope_theta"] = c.positive("rope_theta")
    elif sub is not None and sub.has("rope_theta"):
        out["rope_theta"] = sub.positive("rope_theta")
    for key, rope in (("rope_scaling.", c.data.get("rope_scaling")),
                      ("rope_parameters.", params)):
        if isinstance(rope, dict) and (rope.get("rope_type") or rope.get("type")) == "llama3":
            out["rope_llama3_factor"] = _Config(rope, c.source, c.key(key)).positive("factor")
            break
    return out


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's ``0.1 * mscale * ln(scale) + 1`` (1 for no extension)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_attention_factor(c: _Config) -> float:
    """The factor YaRN multiplies RoPE's cos and sin by (``rope_scaling`` of type ``yarn``;
    1 otherwise): ``attention_factor`` when given, else mscale(factor, mscale) /
    mscale(factor, mscale_all_dim) when both are non-zero (DeepSeek-V3: 1), else mscale(factor)
    (GPT-OSS: 1.347) -- ``transformers`` ``_compute_yarn_parameters`` and Megatron-Core
    ``_yarn_get_concentration_factor`` agree."""
    rope = c.data.get("rope_scaling")
    if not isinstance(rope, dict) or (rope.get("rope_type") or rope.get("type")) != "yarn":
        return 1.0
    sub = _Config(rope, c.source, c.key("rope_scaling."))
    if sub.has("attention_factor"):
        return sub.positive("attention_factor")
    scale = sub.positive("factor")
    mscale, all_dim = (sub.positive(k) if sub.data.get(k) else 0.0
                       for k in ("mscale", "mscale_all_dim"))
    if mscale and all_dim:  # as transformers: a zero or missing one means neither
        return _yarn_mscale(scale, mscale) / _yarn_mscale(scale, all_dim)
    return _yarn_mscale(scale)


def _attention(c: _Config, hidden: int, heads_key: str = "num_attention_heads",
               kv_key: str = "num_key_value_heads") -> dict[str, int]:
    """Head counts and head width; ``head_dim`` falls back to hidden / heads."""
    heads = c.int(heads_key)
    kv_heads = c.int(kv_key, default=heads)
    if heads % kv_heads:
        raise c.error(kv_key, f"a divisor of {heads_key}={heads}", kv_heads)
    if not c.has("head_dim") and hidden % heads:
        raise c.error(heads_key, f"a divisor of hidden size {hidden} "
                        "(or give head_dim)", heads)
    head_dim = c.int("head_dim", default=hidden // heads)
    return dict(num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim)


def _llama(c: _Config, ffn_default: Any = _MISSING) -> dict[str, Any]:
    """modeling_llama.py: RMSNorm, SwiGLU; q/k/v/o bias from ``attention_bias``."""
    kw = _common(c, ffn_default)
    attn_bias = c.flag("attention_bias", False)
    kw.update(_attention(c, kw["hidden_size"]), qkv_bias=attn_bias, attn_out_bias=attn_bias,
              mlp_bias=c.flag("mlp_bias", False))
    return kw | _sliding(c, kw["num_layers"])


def _sliding(c: _Config, num_layers: int) -> dict[str, Any]:
    """Sliding-window attention: ``layer_types`` if given, else the family's convention."""
    if isinstance(c.data.get("layer_types"), list):
        types = c.data["layer_types"]
        if len(types) != num_layers:
            raise c.error("layer_types", f"{num_layers} entries", len(types))
        sliding = tuple(t == "sliding_attention" for t in types)
        if not any(sliding):
            return {}
        return dict(sliding_window=c.int("sliding_window"), sliding_layers=sliding)
    qwen = str(c.data.get("model_type")).startswith("qwen")  # Qwen: off unless switched on
    if not c.has("sliding_window") or not c.data.get("use_sliding_window", not qwen):
        return {}
    window = c.int("sliding_window")
    first = c.int("max_window_layers", default=0, minimum=0)  # Qwen: layers >= this slide
    return dict(sliding_window=window,
                sliding_layers=tuple(i >= first for i in range(num_layers)) if first else ())


def _moe(c: _Config, expert_ffn_key: str, **extra: Any) -> MoESpec:
    """Routed experts under any of the three expert-count keys and two top-k keys."""
    experts, top_k = c.first_int(EXPERT_KEYS), c.first_int(TOP_K_KEYS)
    if top_k > experts:
        raise c.error("num_experts_per_tok", f"at most the {experts} experts", top_k)
    return MoESpec(num_experts=experts, top_k=top_k,
                   expert_ffn_hidden=c.int(expert_ffn_key), **extra)


def _qwen_moe_layers(c: _Config, num_layers: int) -> tuple[bool, ...]:
    """modeling_qwen3_moe.py: MoE unless in ``mlp_only_layers``; every ``decoder_sparse_step``."""
    step = c.int("decoder_sparse_step", default=1)
    dense = c.data.get("mlp_only_layers") or []
    if not isinstance(dense, list):
        raise c.error("mlp_only_layers", "a list of layer indices", dense)
    return tuple(i not in dense and (i + 1) % step == 0 for i in range(num_layers))


# --- one builder per model_type ---------------------------------------------------------------

def _mixtral(c: _Config) -> dict[str, Any]:
    """modeling_mixtral.py: every layer MoE; experts as wide as ``intermediate_size``."""
    return _llama(c) | dict(moe=_moe(c, "intermediate_size"))


def _qwen2(c: _Config) -> dict[str, Any]:
    """modeling_qwen2.py: q/k/v carry a bias, o_proj does not."""
    return _llama(c) | dict(qkv_bias=True, attn_out_bias=False)


def _qwen_moe(c: _Config, base: dict[str, Any], shared: bool) -> dict[str, Any]:
    extra = {}
    if shared:  # modeling_qwen2_moe.py: one shared expert of its own width
        extra = dict(num_shared_experts=1,
                     shared_ffn_hidden=c.int("shared_expert_intermediate_size"))
    moe = _moe(c, "moe_intermediate_size", **extra)
    return base | dict(moe=moe, moe_layers=_qwen_moe_layers(c, base["num_layers"]))


def _qwen3_moe(c: _Config) -> dict[str, Any]:
    return _qwen_moe(c, _llama(c), shared=False)


def _qwen2_moe(c: _Config) -> dict[str, Any]:
    return _qwen_moe(c, _qwen2(c), shared=True)


def _mla(c: _Config) -> MLASpec:
    return MLASpec(q_lora_rank=c.int("q_lora_rank", default=None),
                   kv_lora_rank=c.int("kv_lora_rank"), qk_nope_head_dim=c.int("qk_nope_head_dim"),
                   qk_rope_head_dim=c.int("qk_rope_head_dim"), v_head_dim=c.int("v_head_dim"))


def _deepseek_v3(c: _Config) -> dict[str, Any]:
    """modeling_deepseek_v3.py: MLA; dense below ``first_k_dense_replace``; sigmoid router
    with a per-expert score-correction bias (``noaux_tc``); ``n_shared_experts`` shared."""
    kw, mla = _common(c), _mla(c)
    heads = c.int("num_attention_heads")
    first_dense, freq = c.int("first_k_dense_replace", 0, minimum=0), c.int("moe_layer_freq", 1)
    experts, top_k = c.first_int(EXPERT_KEYS), c.first_int(TOP_K_KEYS)
    if top_k > experts:  # before the groups, whose message is about holding top_k experts
        raise c.error("num_experts_per_tok", f"at most the {experts} experts", top_k)
    groups = c.int("n_group", 1)
    # with groups the limit must be given: a missing topk_group is not "1 group"
    chosen = c.int("topk_group") if groups > 1 else c.int("topk_group", 1)
    wrong = router_groups_error(experts, top_k, groups, chosen)
    if wrong:  # the HF names of MoESpec's router_groups / router_group_topk
        key = {"router_groups": "n_group", "router_group_topk": "topk_group"}[wrong[0]]
        raise c.error(key, wrong[1], groups if key == "n_group" else chosen)
    moe = _moe(c, "moe_intermediate_size", num_shared_experts=c.int("n_shared_experts", 0, 0),
               shared_ffn_hidden=c.int("moe_intermediate_size"),
               router_bias=c.data.get("topk_method", "noaux_tc") == "noaux_tc",
               router_groups=groups, router_group_topk=chosen)
    return kw | dict(
        num_heads=heads, num_kv_heads=c.int("num_key_value_heads", default=heads),
        head_dim=mla.qk_head_dim, mla=mla, moe=moe,
        moe_layers=tuple(i >= first_dense and i % freq == 0 for i in range(kw["num_layers"])),
        mtp_layers=c.int("num_nextn_predict_layers", default=0, minimum=0))


def _indexer_layers(c: _Config, num_layers: int) -> tuple[bool, ...]:
    """GLM-MoE-DSA per-layer indexer (``GlmMoeDsaConfig``): ``indexer_types`` ("full" runs the
    indexer, "shared" reuses the previous full layer's top-k), else ``index_topk_pattern``
    (a string of F/S), else every ``index_topk_freq``-th layer from ``index_skip_topk_offset``
    (default 2) runs it; with no ``index_topk_freq`` (1) every layer does. ``()``: all layers."""
    types, pattern = c.data.get("indexer_types"), c.data.get("index_topk_pattern")
    key, kinds = "indexer_types", ("full", "shared")
    if types is None and isinstance(pattern, str):
        key, types = "index_topk_pattern", [{"F": "full", "S": "shared"}.get(ch, ch)
                                            for ch in pattern]
    elif types is None and pattern is not None:
        key, types = "index_topk_pattern", pattern
    if types is None:
        freq = c.int("index_topk_freq", default=1)
        offset = c.int("index_skip_topk_offset", default=2, minimum=0)
        flags = tuple(max(i - offset + 1, 0) % freq == 0 for i in range(num_layers))
    else:
        if not isinstance(types, list) or len(types) != num_layers or any(
                t not in kinds for t in types):
            raise c.error(key, f"{num_layers} entries, each one of {', '.join(kinds)}",
                          types if not isinstance(types, list) else f"{len(types)} entries")
        flags = tuple(t == "full" for t in types)
    if not flags[0]:
        raise c.error(key, "'full' on layer 0 (a shared layer reuses an earlier one's top-k)",
                      "shared")
    return () if all(flags) else flags


def _deepseek_v32(c: _Config) -> dict[str, Any]:
    """modular_deepseek_v32.py (DeepSeek-V3.2, V3.2-Exp) and modular_glm_moe_dsa.py (GLM-5):
    DeepSeek-V3 plus a DSA lightning indexer on every layer (``index_topk``, ``index_n_heads``,
    ``index_head_dim``); GLM-5's config may mark layers that reuse an earlier indexer's top-k.
    The MLP kinds follow ``mlp_layer_types`` when given, else ``first_k_dense_replace``."""
    kw = _deepseek_v3(c)
    n = kw["num_layers"]
    kinds = c.data.get("mlp_layer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or len(kinds) != n or any(
                k not in ("dense", "sparse") for k in kinds):
            raise c.error("mlp_layer_types", f"{n} entries, each one of dense, sparse",
                          kinds if not isinstance(kinds, list) else f"{len(kinds)} entries")
        kw["moe_layers"] = tuple(k == "sparse" for k in kinds)
    if not kw["mla"].q_lora_rank:
        raise c.error("q_lora_rank", "an integer >= 1 (the DSA indexer's queries come from "
                      "the query latent)")
    sparse = SparseAttnSpec(index_topk=c.int("index_topk"),
                            index_n_heads=c.int("index_n_heads"),
                            index_head_dim=c.int("index_head_dim"))
    return kw | dict(sparse_attn=sparse, indexer_layers=_indexer_layers(c, n))


def _gpt_oss(c: _Config) -> dict[str, Any]:
    """modeling_gpt_oss.py: every layer MoE with biased experts and router; alternating
    sliding/full attention from ``layer_types``."""
    kw = _llama(c) | dict(moe=_moe(c, "intermediate_size", expert_bias=True, router_bias=True))
    if c.has("swiglu_limit"):
        kw["glu_clamp"] = c.positive("swiglu_limit")
    return kw


def _gpt2(c: _Config) -> dict[str, Any]:
    """modeling_gpt2.py: LayerNorm, biased linears, GELU MLP of ``n_inner`` (default 4h),
    learned positions, embeddings always tied."""
    hidden, heads = c.int("n_embd"), c.int("n_head")
    if hidden % heads:
        raise c.error("n_head", f"a divisor of n_embd={hidden}", heads)
    return dict(
        name=_model_name(c), source=c.source,
        num_layers=c.int("n_layer"), hidden_size=hidden, num_heads=heads, num_kv_heads=heads,
        head_dim=hidden // heads, ffn_hidden_size=c.int("n_inner", default=4 * hidden),
        vocab_size=c.int("vocab_size"), position_embeddings=c.int("n_positions"),
        glu=False, activation=c.activation("activation_function", "gelu_new"),
        tied_embeddings=c.flag("tie_word_embeddings", True), norm="layernorm",
        qkv_bias=True, attn_out_bias=True, mlp_bias=True)


def _gpt_neox(c: _Config) -> dict[str, Any]:
    """modeling_gpt_neox.py: LayerNorm, biased linears, GELU MLP, rotary (parallel residual
    changes no shapes)."""
    kw = _common(c) | dict(activation=c.activation("hidden_act", "gelu"))
    kw["num_heads"] = heads = c.int("num_attention_heads")
    if kw["hidden_size"] % heads:
        raise c.error("num_attention_heads",
                        f"a divisor of hidden_size={kw['hidden_size']}", heads)
    bias = c.flag("attention_bias", True)
    return kw | dict(num_kv_heads=heads, head_dim=kw["hidden_size"] // heads, glu=False,
                     norm="layernorm", qkv_bias=bias, attn_out_bias=bias, mlp_bias=True)


def _glm4_moe(c: _Config) -> dict[str, Any]:
    """modeling_glm4_moe.py (GLM-4.5, 4.6, 4.7): GQA with q/k/v bias from ``attention_bias``
    and no o_proj bias; dense below ``first_k_dense_replace``, then routed experts plus
    ``n_shared_experts`` of ``moe_intermediate_size``; sigmoid router with a score-correction
    bias; ``num_nextn_predict_layers`` MTP layers, counted apart."""
    kw = _common(c)
    first_dense = c.int("first_k_dense_replace", 0, minimum=0)
    moe = _moe(c, "moe_intermediate_size", num_shared_experts=c.int("n_shared_experts", 0, 0),
               shared_ffn_hidden=c.int("moe_intermediate_size"), router_bias=True)
    return kw | _attention(c, kw["hidden_size"]) | dict(
        qkv_bias=c.flag("attention_bias", False), moe=moe,
        moe_layers=tuple(i >= first_dense for i in range(kw["num_layers"])),
        mtp_layers=c.int("num_nextn_predict_layers", default=0, minimum=0))


def _minimax_m2(c: _Config) -> dict[str, Any]:
    """modeling_minimax_m2.py: GQA without biases, every layer MoE (w1/w3/w2 of
    ``intermediate_size``), sigmoid router with a score-correction bias when
    ``use_routing_bias``; a shared expert only if ``shared_intermediate_size`` > 0. MiniMax's
    lightning (linear) attention layers (``attn_type_list`` 0, MiniMax-01) are refused."""
    kinds = c.data.get("attn_type_list")
    if kinds is not None and (not isinstance(kinds, list) or any(k != 1 for k in kinds)):
        raise c.error("attn_type_list", "all 1 (softmax attention; lightning attention "
                      "layers are not modelled)", kinds)
    shared = c.int("shared_intermediate_size", default=0, minimum=0)
    moe = _moe(c, "intermediate_size", num_shared_experts=1 if shared else 0,
               shared_ffn_hidden=shared, router_bias=c.flag("use_routing_bias", False))
    return _llama(c) | dict(moe=moe)


def _llama4(c: _Config) -> dict[str, Any]:
    """modeling_llama4.py (text model): MoE every ``interleave_moe_layer_step`` layers (or the
    ``moe_layers`` list) with one shared expert as wide as a routed one
    (``intermediate_size``); dense layers use ``intermediate_size_mlp``. Layers with RoPE use
    chunked attention over ``attention_chunk_size`` tokens; every ``no_rope_layer_interval``-th
    layer (default 4th) is NoPE with full attention (or as ``no_rope_layers`` says, 1 = RoPE)."""
    kw = _llama(c) | dict(ffn_hidden_size=c.int("intermediate_size_mlp"))
    n = kw["num_layers"]
    step = c.int("interleave_moe_layer_step", default=1)
    moe_idx = c.int_list("moe_layers", n)
    moe_idx = range(step - 1, n, step) if moe_idx is None else moe_idx
    moe = _moe(c, "intermediate_size", num_shared_experts=1,
               shared_ffn_hidden=c.int("intermediate_size"))
    kw |= dict(moe=moe, moe_layers=tuple(i in set(moe_idx) for i in range(n)))
    if not c.has("attention_chunk_size"):
        return kw
    rope = c.data.get("no_rope_layers")
    if rope is None:
        interval = c.int("no_rope_layer_interval", default=4)
        rope = [int((i + 1) % interval != 0) for i in range(n)]
    elif not isinstance(rope, list) or len(rope) != n or any(r not in (0, 1) for r in rope):
        raise c.error("no_rope_layers", f"{n} entries of 0 or 1", rope)
    return kw | dict(attention_chunk=c.int("attention_chunk_size"),
                     chunk_layers=tuple(bool(r) for r in rope))


def _linear_layers(c: _Config, num_layers: int) -> tuple[bool, ...]:
    """Qwen3-Next/3.5 layer kinds: ``layer_types`` if given, else every
    ``full_attention_interval``-th layer is full attention and the others linear."""
    types = c.data.get("layer_types")
    if types is None:
        interval = c.int("full_attention_interval", default=4)
        return tuple((i + 1) % interval != 0 for i in range(num_layers))
    kinds = ("linear_attention", "full_attention")
    if not isinstance(types, list) or len(types) != num_layers or any(
            t not in kinds for t in types):
        raise c.error("layer_types", f"{num_layers} entries, each one of {', '.join(kinds)}",
                      types if not isinstance(types, list) else f"{len(types)} entries")
    return tuple(t == "linear_attention" for t in types)


def _gated_deltanet(c: _Config, num_layers: int) -> dict[str, Any]:
    """modeling_qwen3_next.py / modular_qwen3_5.py: Gated DeltaNet on the linear layers,
    output-gated softmax attention (``attn_output_gate``, always on in Qwen3-Next) on the rest."""
    spec = LinearAttnSpec(
        num_key_heads=c.int("linear_num_key_heads"),
        num_value_heads=c.int("linear_num_value_heads"),
        key_head_dim=c.int("linear_key_head_dim"), value_head_dim=c.int("linear_value_head_dim"),
        conv_kernel=c.int("linear_conv_kernel_dim"))
    if spec.num_value_heads % spec.num_key_heads:
        raise c.error("linear_num_value_heads", "a multiple of linear_num_key_heads="
                      f"{spec.num_key_heads}", spec.num_value_heads)
    linear = _linear_layers(c, num_layers)
    return dict(attn_gate=c.flag("attn_output_gate", True),
                linear_attn=spec if any(linear) else None, linear_layers=linear)


def _qwen3_next(c: _Config) -> dict[str, Any]:
    """Qwen3-Next and Qwen3.5 MoE: Qwen2-MoE-style experts (one shared expert) under a hybrid
    linear/full attention stack. Qwen3.5 MoE configs carry no ``intermediate_size``: with no
    dense layer it is never used, and the expert width stands in."""
    all_moe = not c.data.get("mlp_only_layers") and c.int("decoder_sparse_step", 1) == 1
    ffn_default = c.int("moe_intermediate_size") if all_moe else _MISSING
    kw = _qwen_moe(c, _llama(c, ffn_default), shared=True)
    return kw | _gated_deltanet(c, kw["num_layers"])


def _qwen3_5(c: _Config) -> dict[str, Any]:
    """Qwen3.5 dense: Llama-style SwiGLU MLP under the hybrid attention stack."""
    kw = _llama(c)
    return kw | _gated_deltanet(c, kw["num_layers"])


_BUILDERS: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "llama": _llama, "mistral": _llama, "mixtral": _mixtral,
    "qwen2": _qwen2, "qwen2_moe": _qwen2_moe, "qwen3": _llama, "qwen3_moe": _qwen3_moe,
    "deepseek_v3": _deepseek_v3, "kimi_k2": _deepseek_v3, "deepseek_v32": _deepseek_v32,
    "glm_moe_dsa": _deepseek_v32, "gpt_oss": _gpt_oss, "gpt2": _gpt2,
    "gpt_neox": _gpt_neox, "glm4_moe": _glm4_moe, "minimax_m2": _minimax_m2,
    "llama4": _llama4, "llama4_text": _llama4, "qwen3_next": _qwen3_next,
    "qwen3_5_moe": _qwen3_next, "qwen3_5_moe_text": _qwen3_next,
    "qwen3_5": _qwen3_5, "qwen3_5_text": _qwen3_5,
}
# Multimodal wrappers: the language model's config sits under ``text_config``.
_NESTED = ("llama4", "qwen3_5", "qwen3_5_moe", "kimi_k25")
SUPPORTED_MODEL_TYPES = tuple(_BUILDERS)


# --- public API -------------------------------------------------------------------------------

def _text_config(data: dict, source: str) -> _Config:
    """The language model's part of ``data``: ``text_config`` for a multimodal wrapper, whose
    top-level ``tie_word_embeddings`` and ``_name_or_path`` apply when the text part has none."""
    if data.get("model_type") not in _NESTED:
        return _Config(data, source)
    text = data.get("text_config")
    if not isinstance(text, dict):
        raise SpecError(source, "text_config", "an object (the language model's config)",
                        type(text).__name__)
    inherited = {k: data[k] for k in ("tie_word_embeddings", "_name_or_path", "model_type")
                 if data.get(k) is not None and text.get(k) is None}
    return _Config(text | inherited, source, prefix="text_config.")


def model_from_hf_config(data: dict, source: str) -> ModelSpec:
    """Build a ModelSpec from a parsed HF ``config.json``; ``source`` names it in errors."""
    if not isinstance(data, dict):
        raise SpecError(source, "", "a JSON object (a Hugging Face config.json)",
                        type(data).__name__)
    c = _text_config(data, source)
    model_type = c.data.get("model_type")
    if not isinstance(model_type, str) or model_type not in _BUILDERS:
        raise c.error("model_type", f"one of {', '.join(_BUILDERS)}", model_type)
    kwargs = _BUILDERS[model_type](c)
    try:
        return ModelSpec(**kwargs)
    except ValueError as err:  # a cross-field rule of ModelSpec the builders did not foresee
        raise SpecError(source, "", f"a consistent model ({err})") from None


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; a missing file or bad JSON raises SpecError naming the file."""
    path = Path(path)
    check_file_size(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(str(path), "", "a readable file", err.strerror) from None
    except UnicodeDecodeError:
        raise SpecError(str(path), "", "a UTF-8 JSON file") from None
    try:
        return parse_json(text, str(path))
    except json.JSONDecodeError as err:
        raise SpecError(str(path), f"line {err.lineno} column {err.colno}", "valid JSON",
                        err.msg) from None


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read a Hugging Face ``config.json`` file into a ModelSpec."""
    return model_from_hf_config(read_json(path), str(path))


def _model_name(c) -> str:
    """The config's ``_name_or_path``, else its file's name, or its folder's for a file named
    ``config.json`` (an HF checkpoint's folder is the model: ``Llama-3.1-8B/config.json``)."""
    if c.data.get("_name_or_path"):
        return str(c.data["_name_or_path"])
    path = Path(c.source)
    if path.name == "config.json":
        return path.resolve().parent.name or "config"
    return path.stem
