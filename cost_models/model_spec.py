"""Decoder-only transformer description (dense, MoE, MLA) and exact parameter counts.

Parameter counts follow the weight shapes of the Hugging Face implementations
(``modeling_llama.py``, ``modeling_mixtral.py``, ``modeling_qwen3_moe.py``,
``modeling_deepseek_v3.py``, ``modeling_gpt_oss.py``, ``modeling_gpt2.py``), so that a count
can be checked against the totals their model cards publish.
"""
from __future__ import annotations

from dataclasses import dataclass, field

ACTIVATIONS = ("silu", "gelu", "relu", "swiglu", "geglu", "gelu_new", "gelu_pytorch_tanh")
NORMS = ("rmsnorm", "layernorm")


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts FFN. ``shared_ffn_hidden`` is per shared expert."""

    num_experts: int
    top_k: int
    expert_ffn_hidden: int
    num_shared_experts: int = 0
    shared_ffn_hidden: int = 0
    expert_bias: bool = False
    router_bias: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"MoE top_k={self.top_k} must be in 1..num_experts={self.num_experts}")
        if self.expert_ffn_hidden < 1 or self.num_shared_experts < 0:
            raise ValueError(f"MoE expert_ffn_hidden={self.expert_ffn_hidden} must be >= 1 and "
                             f"num_shared_experts={self.num_shared_experts} >= 0")


@dataclass(frozen=True)
class MLASpec:
    """DeepSeek multi-head latent attention (DeepSeek-V2 paper, sec. 2.1)."""

    q_lora_rank: int | None  # None: queries projected directly from the hidden state
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer. ``moe_layers[i]`` says whether layer i uses the MoE FFN."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int  # FFN width of dense layers
    vocab_size: int
    glu: bool = True
    activation: str = "silu"
    tied_embeddings: bool = False
    norm: str = "rmsnorm"
    qkv_bias: bool = False
    attn_out_bias: bool = False
    mlp_bias: bool = False
    position_embeddings: int = 0  # learned absolute position table rows (GPT-2); 0 for RoPE
    moe: MoESpec | None = None
    moe_layers: tuple[bool, ...] = ()
    mla: MLASpec | None = None
    sliding_window: int | None = None
    sliding_layers: tuple[bool, ...] = ()
    mtp_layers: int = 0  # DeepSeek multi-token-prediction modules, counted apart from the total
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                     "ffn_hidden_size", "vocab_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"model '{self.name}': {name}={getattr(self, name)} must be >= 1")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"model '{self.name}': num_heads={self.num_heads} is not a multiple "
                             f"of num_kv_heads={self.num_kv_heads}")
        if self.activation not in ACTIVATIONS or self.norm not in NORMS:
            raise ValueError(f"model '{self.name}': activation '{self.activation}' must be one of "
                             f"{ACTIVATIONS} and norm '{self.norm}' one of {NORMS}")
        if self.moe is None and any(self.moe_layers):
            raise ValueError(f"model '{self.name}': moe_layers set but no moe block")
        if self.moe is not None and not self.moe_layers:  # default: every layer is MoE
            object.__setattr__(self, "moe_layers", (True,) * self.num_layers)
        if self.moe_layers and len(self.moe_layers) != self.num_layers:
            raise ValueError(f"model '{self.name}': moe_layers has {len(self.moe_layers)} entries "
                             f"for {self.num_layers} layers")
        if self.sliding_layers and len(self.sliding_layers) != self.num_layers:
            raise ValueError(f"model '{self.name}': sliding_layers has {len(self.sliding_layers)} "
                             f"entries for {self.num_layers} layers")

    @property
    def is_moe(self) -> bool:
        return self.moe is not None and any(self.moe_layers)

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    def is_moe_layer(self, i: int) -> bool:
        return bool(self.moe_layers) and self.moe_layers[i]

    def window(self, i: int) -> int | None:
        """Attention window of layer i (None: full causal attention)."""
        if self.sliding_window and (not self.sliding_layers or self.sliding_layers[i]):
            return self.sliding_window
        return None


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by part. ``total`` excludes MTP modules; ``active`` is per token."""

    embedding: int
    lm_head: int
    attention: int  # all layers, norms inside the layer included
    dense_mlp: int  # all dense layers
    experts: int  # routed experts, all MoE layers
    shared_experts: int
    routers: int
    final_norm: int
    mtp: int

    @property
    def total(self) -> int:
        return (self.embedding + self.lm_head + self.attention + self.dense_mlp + self.experts
                + self.shared_experts + self.routers + self.final_norm)

    @property
    def non_expert(self) -> int:
        return self.total - self.experts


def _norm_params(model: ModelSpec, width: int) -> int:
    return width * (2 if model.norm == "layernorm" else 1)


def attention_params(model: ModelSpec) -> int:
    """One layer's attention block: projections, biases, and the two layer norms."""
    h, a, kv, d = model.hidden_size, model.num_heads, model.num_kv_heads, model.head_dim
    norms = 2 * _norm_params(model, h)
    if model.mla is not None:
        m = model.mla
        q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * m.qk_head_dim
             if m.q_lora_rank else h * a * m.qk_head_dim)
        kv_down = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
        kv_up = m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv_down + kv_up + a * m.v_head_dim * h + norms
    proj = h * a * d + 2 * h * kv * d + a * d * h
    bias = (a * d + 2 * kv * d if model.qkv_bias else 0) + (h if model.attn_out_bias else 0)
    return proj + bias + norms


def mlp_params(hidden: int, ffn: int, glu: bool, bias: bool) -> int:
    """A (GLU-)MLP: up (and gate) then down projection."""
    up = (2 if glu else 1) * hidden * ffn + ((2 if glu else 1) * ffn if bias else 0)
    return up + ffn * hidden + (hidden if bias else 0)


def count_params(model: ModelSpec) -> ParamCounts:
    """Exact parameter count by part (see module docstring for the shapes' source)."""
    h, v = model.hidden_size, model.vocab_size
    dense = mlp_params(h, model.ffn_hidden_size, model.glu, model.mlp_bias)
    experts = shared = routers = 0
    if model.moe is not None:
        m = model.moe
        experts = m.num_experts * mlp_params(h, m.expert_ffn_hidden, model.glu, m.expert_bias)
        shared_width = m.shared_ffn_hidden or m.expert_ffn_hidden
        shared = m.num_shared_experts * mlp_params(h, shared_width, model.glu, model.mlp_bias)
        routers = h * m.num_experts + (m.num_experts if m.router_bias else 0)
    n_moe = model.num_moe_layers
    attn = attention_params(model)
    # DeepSeek MTP module: embedding/head shared; own 2 norms, a 2h->h projection, one layer.
    mtp_layer = attn + (experts + shared + routers if model.is_moe else dense)
    mtp = model.mtp_layers * (mtp_layer + 2 * h + 2 * h * h + h)
    return ParamCounts(
        embedding=v * h + model.position_embeddings * h,
        lm_head=0 if model.tied_embeddings else v * h,
        attention=model.num_layers * attn,
        dense_mlp=model.num_dense_layers * dense,
        experts=n_moe * experts,
        shared_experts=n_moe * shared,
        routers=n_moe * routers,
        final_norm=_norm_params(model, h),
        mtp=mtp,
    )


def active_params(model: ModelSpec) -> int:
    """Parameters touched by one token: routed experts count ``top_k`` of ``num_experts``."""
    counts = count_params(model)
    if not model.is_moe:
        return counts.total
    m = model.moe
    return counts.total - counts.experts + counts.experts * m.top_k // m.num_experts
