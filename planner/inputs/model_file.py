"""The model YAML/JSON schema: a pydantic mirror of :class:`ModelSpec` at the file boundary.

Owns validation of hand-written model files (unknown keys rejected, every count >= 1,
cross-field rules with a message that says what to change) and the conversion of pydantic's
``ValidationError`` into a one-line :class:`SpecError` naming the file and the field path
(``moe.top_k``). Inside the planner only the frozen ``ModelSpec`` travels.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from cost_models.model_spec import (
    ACTIVATIONS, NORMS, LinearAttnSpec, MLASpec, ModelSpec, MoESpec, SparseAttnSpec,
    router_groups_error)
from planner.errors import SpecError
from topologies.spec import exact_scalar

_STRICT = ConfigDict(extra="forbid", frozen=True)


class _File(BaseModel):
    """Base of the model-file blocks: numbers and flags only as YAML writes them
    (``topologies.spec.exact_scalar``: no ``"4"`` for 4 or ``0`` for false)."""

    model_config = _STRICT

    @field_validator("*", mode="before")
    @classmethod
    def _exact_scalars(cls, value: Any, info: ValidationInfo) -> Any:
        return exact_scalar(cls.model_fields[info.field_name].annotation, value)


class MoEFile(_File):
    """Mixture-of-experts FFN of the layers marked in ``moe_layers``."""

    model_config = _STRICT

    num_experts: int = Field(ge=1, description="Routed experts per MoE layer.")
    top_k: int = Field(ge=1, description="Routed experts each token visits.")
    expert_ffn_hidden: int = Field(ge=1, description="FFN width of one routed expert.")
    num_shared_experts: int = Field(0, ge=0, description="Always-on shared experts per layer.")
    shared_ffn_hidden: int = Field(0, ge=0, description="FFN width of one shared expert "
                                   "(0: same as expert_ffn_hidden).")
    expert_bias: bool = Field(False, description="Expert linears carry biases (gpt-oss).")
    router_bias: bool = Field(False, description="Router carries a per-expert bias.")
    router_groups: int = Field(1, ge=1, description="Equal groups of experts for group-limited "
                               "routing (DeepSeek-V3: 8; 1: no limit).")
    router_group_topk: int | None = Field(None, ge=1, validate_default=True, description=(
        "Groups a token's experts may come from (DeepSeek-V3: 4); required with "
        "router_groups > 1."))

    @field_validator("top_k")
    @classmethod
    def _top_k_fits(cls, top_k: int, info: ValidationInfo) -> int:
        experts = info.data.get("num_experts")
        if experts is not None and top_k > experts:
            raise ValueError(f"at most num_experts={experts}")
        return top_k

    @field_validator("router_groups", "router_group_topk")
    @classmethod
    def _router_groups_fit(cls, value: int | None, info: ValidationInfo) -> int | None:
        """``router_groups_error`` on the field it names: the groups first (whatever the
        chosen count), then the chosen count once the groups are known to be right. Without
        groups the chosen count is 1 (no limit); with them it must be given."""
        experts, top_k = info.data.get("num_experts"), info.data.get("top_k")
        groups = value if info.field_name == "router_groups" else info.data.get("router_groups")
        if value is None:  # router_group_topk left out
            if groups is not None and groups > 1:
                raise ValueError(f"a number of the {groups} router_groups a token's experts "
                                 "may come from (required with router_groups > 1)")
            return 1
        if None in (experts, top_k, groups):
            return value
        chosen = 1 if info.field_name == "router_groups" else value
        wrong = router_groups_error(experts, top_k, groups, chosen)
        if wrong and wrong[0] == info.field_name:
            raise ValueError(wrong[1])
        return value


class MLAFile(_File):
    """DeepSeek multi-head latent attention (DeepSeek-V2 paper, sec. 2.1)."""

    model_config = _STRICT

    q_lora_rank: int | None = Field(None, ge=1, description="Query compression rank "
                                       "(null: queries projected straight from the hidden state).")
    kv_lora_rank: int = Field(ge=1, description="Key/value latent width (d_c).")
    qk_nope_head_dim: int = Field(ge=1, description="Per-head q/k width without RoPE.")
    qk_rope_head_dim: int = Field(ge=1, description="Per-head q/k width carrying RoPE.")
    v_head_dim: int = Field(ge=1, description="Per-head value width.")


class LinearAttnFile(_File):
    """Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): heads and widths of its state."""

    model_config = _STRICT

    num_key_heads: int = Field(ge=1, description="Key heads of the delta-rule state.")
    num_value_heads: int = Field(ge=1, description="Value heads (a multiple of key heads).")
    key_head_dim: int = Field(ge=1, description="Per-head key width.")
    value_head_dim: int = Field(ge=1, description="Per-head value width.")
    conv_kernel: int = Field(ge=1, description="Depthwise causal conv kernel length.")


class SparseAttnFile(_File):
    """DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): a lightning indexer picks the keys
    each query of the MLA attention sees."""

    model_config = _STRICT

    index_topk: int = Field(ge=1, description="Keys each query attends to (top-k of the "
                            "indexer's scores).")
    index_n_heads: int = Field(ge=1, description="Indexer heads.")
    index_head_dim: int = Field(ge=1, description="Indexer query/key width (one key per "
                                "token, cached in FP8).")


class ModelFile(_File):
    """A decoder-only transformer as written in a model YAML (fields as in ModelSpec)."""

    model_config = _STRICT

    name: str = Field("", description="Model name (default: the file name).")
    description: str = Field("", description="One line on what this model is (not used "
                             "in any computation).")
    num_layers: int = Field(ge=1, description="Transformer layers.")
    hidden_size: int = Field(ge=1, description="Model width (d_model).")
    num_heads: int = Field(ge=1, description="Query heads.")
    num_kv_heads: int | None = Field(None, ge=1, description="Key/value heads "
                                        "(default: num_heads); must divide num_heads.")
    head_dim: int | None = Field(None, ge=1, validate_default=True, description="Per-head "
                                 "width (default: hidden_size / num_heads).")
    ffn_hidden_size: int = Field(ge=1, description="FFN width of dense layers.")
    vocab_size: int = Field(ge=1, description="Vocabulary size (embedding rows).")
    glu: bool = Field(True, description="Gated MLP (SwiGLU/GeGLU) with gate and up projections.")
    activation: Literal[ACTIVATIONS] = Field("silu", description="MLP activation.")
    tied_embeddings: bool = Field(False, description="Output head shares the input embedding.")
    norm: Literal[NORMS] = Field("rmsnorm", description="Normalisation (layernorm has a bias).")
    qkv_bias: bool = Field(False, description="Q/K/V projections carry biases.")
    attn_out_bias: bool = Field(False, description="Attention output projection carries a bias.")
    mlp_bias: bool = Field(False, description="Dense MLP linears carry biases.")
    position_embeddings: int = Field(0, ge=0, description="Rows of a learned absolute position "
                                     "table (GPT-2/3); 0 for rotary.")
    moe: MoEFile | None = Field(None, description="Mixture-of-experts FFN, if any.")
    moe_layers: list[bool] | None = Field(None, description="Per layer: uses the MoE FFN "
                                             "(default: every layer when moe is given).")
    mla: MLAFile | None = Field(None, description="Multi-head latent attention, if any.")
    sliding_window: int | None = Field(None, ge=1, description="Sliding attention window, "
                                          "tokens (null: full causal attention).")
    sliding_layers: list[bool] | None = Field(None, description="Per layer: uses the "
                                                 "sliding window (default: every layer).")
    glu_clamp: float | None = Field(None, gt=0, description="The GLU's halves are clamped at "
                                    "+-this value before the activation (GPT-OSS: 7.0; null: "
                                    "none).")
    rope_attention_factor: float = Field(1.0, gt=0, description="YaRN's attention factor "
                                         "scaling RoPE's cos and sin (GPT-OSS: 1.347; 1 "
                                         "without YaRN).")
    rope_theta: float | None = Field(None, gt=0, description="RoPE's base frequency (HF "
                                     "rope_theta; Llama 3.1: 500000), for launch files.")
    rope_llama3_factor: float | None = Field(None, gt=0, description="Llama 3's RoPE "
                                             "frequency scaling factor (HF rope_scaling type "
                                             "llama3: 8), for launch files.")
    mtp_layers: int = Field(0, ge=0, description="DeepSeek multi-token-prediction modules.")
    attn_gate: bool = Field(False, description="Output-gated attention (q_proj twice as wide: "
                            "Qwen3-Next, Qwen3.5).")
    linear_attn: LinearAttnFile | None = Field(None, description="Linear attention, if any "
                                               "layers use it.")
    linear_layers: list[bool] | None = Field(None, description="Per layer: uses linear "
                                             "attention (no KV cache).")
    attention_chunk: int | None = Field(None, ge=1, description="Chunked attention block, "
                                        "tokens (Llama-4; null: none).")
    chunk_layers: list[bool] | None = Field(None, description="Per layer: uses chunked "
                                            "attention (default: every layer).")
    sparse_attn: SparseAttnFile | None = Field(None, description="DeepSeek Sparse Attention "
                                               "on every MLA layer, if any.")
    indexer_layers: list[bool] | None = Field(None, description="Per layer: runs its own "
                                              "sparse-attention indexer (default: every "
                                              "layer; the others reuse the previous one's "
                                              "top-k).")

    @field_validator("num_kv_heads")
    @classmethod
    def _kv_divides_heads(cls, kv: int | None, info: ValidationInfo) -> int | None:
        heads = info.data.get("num_heads")
        if kv is not None and heads is not None and heads % kv:
            raise ValueError(f"a divisor of num_heads={heads}")
        return kv

    @field_validator("head_dim")
    @classmethod
    def _head_dim_default(cls, head_dim: int | None, info: ValidationInfo) -> int | None:
        hidden, heads = info.data.get("hidden_size"), info.data.get("num_heads")
        if head_dim is None and hidden and heads and hidden % heads:
            raise ValueError(f"a value, since hidden_size={hidden} is not a multiple of "
                             f"num_heads={heads}")
        return head_dim

    @field_validator("moe_layers", "sliding_layers", "linear_layers", "chunk_layers",
                     "indexer_layers")
    @classmethod
    def _one_per_layer(cls, flags: list[bool] | None, info: ValidationInfo) -> list[bool] | None:
        layers = info.data.get("num_layers")
        if flags and layers is not None and len(flags) != layers:
            raise ValueError(f"{layers} entries, one per layer (num_layers={layers})")
        if info.field_name == "moe_layers" and flags and any(flags) and not info.data.get("moe"):
            raise ValueError("no MoE layers unless a moe block is given")
        return flags


_BLOCKS: dict[str, type[BaseModel]] = {"moe": MoEFile, "mla": MLAFile,
                                       "linear_attn": LinearAttnFile,
                                       "sparse_attn": SparseAttnFile}


def to_model_spec(file: ModelFile, name: str, source: str) -> ModelSpec:
    """Convert a validated file to the frozen ModelSpec (defaults filled in)."""
    fields = file.model_dump(exclude={"description", "moe", "mla", "linear_attn",
                                      "sparse_attn"})
    fields.update(
        name=file.name or name, source=source,
        num_kv_heads=file.num_kv_heads or file.num_heads,
        head_dim=file.head_dim or file.hidden_size // file.num_heads,
        moe=MoESpec(**file.moe.model_dump()) if file.moe else None,
        mla=MLASpec(**file.mla.model_dump()) if file.mla else None,
        linear_attn=(LinearAttnSpec(**file.linear_attn.model_dump()) if file.linear_attn
                     else None),
        moe_layers=tuple(file.moe_layers or ()), sliding_layers=tuple(file.sliding_layers or ()),
        sparse_attn=(SparseAttnSpec(**file.sparse_attn.model_dump()) if file.sparse_attn
                     else None),
        linear_layers=tuple(file.linear_layers or ()),
        chunk_layers=tuple(file.chunk_layers or ()),
        indexer_layers=tuple(file.indexer_layers or ()))
    return ModelSpec(**fields)


def _spec_error(err: ValidationError, source: str) -> SpecError:
    """The first pydantic error as a one-line SpecError with a dotted field path."""
    first = err.errors()[0]
    path = ".".join(str(part) for part in first["loc"])
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    if first["type"] == "extra_forbidden":
        block = _BLOCKS.get(first["loc"][0], ModelFile) if len(first["loc"]) == 2 else ModelFile
        known = ", ".join(block.model_fields)
        return SpecError(source, path, f"a known field ({known}){more}")
    if first["type"] == "missing":
        return SpecError(source, path, f"a value (required field){more}")
    message = first["msg"].removeprefix("Value error, ").removeprefix("Input should be ")
    return SpecError(source, path, message + more, first.get("input"))


def model_from_yaml_dict(data: Any, source: str) -> ModelSpec:
    """Validate a parsed model file and build its ModelSpec; errors name ``source``."""
    if not isinstance(data, dict):
        raise SpecError(source, "", "a mapping of model fields", type(data).__name__)
    try:
        file = ModelFile.model_validate(data)
    except ValidationError as err:
        raise _spec_error(err, source) from None
    try:
        return to_model_spec(file, Path(source).stem, source)
    except ValueError as err:  # a ModelSpec rule not mirrored above
        raise SpecError(source, "", f"a consistent model ({err})") from None
