"""Decoder-only transformer description (dense, MoE, MLA) and exact parameter counts.

Parameter counts follow the weight shapes of the Hugging Face implementations
(``modeling_llama.py``, ``modeling_mixtral.py``, ``modeling_qwen3_moe.py``,
``modeling_deepseek_v3.py``, ``modeling_gpt_oss.py``, ``modeling_gpt2.py``,
``modeling_glm4_moe.py``, ``modeling_minimax_m2.py``, ``modeling_llama4.py``,
``modeling_qwen3_next.py`` / ``modular_qwen3_5.py``, ``modular_deepseek_v32.py``,
``modular_glm_moe_dsa.py``), so that a count can be checked against the totals their model cards
publish.

Three per-layer attention kinds besides full causal attention: sliding-window layers
(``sliding_layers``), chunked layers (``chunk_layers``: Llama-4, a query sees only the keys of its
own ``attention_chunk``-token block) and linear-attention layers (``linear_layers``: Gated
DeltaNet, which keep a fixed-size recurrent state per request instead of a KV cache). On top of
MLA, DeepSeek Sparse Attention (``sparse_attn``: DeepSeek-V3.2, GLM-5) lets each query attend to
the ``index_topk`` keys a lightning indexer picks; ``indexer_layers`` says which layers run
their own indexer (GLM-5.2's "shared" layers reuse the previous indexer layer's choice).
"""
from __future__ import annotations

from dataclasses import dataclass, field

# "relu2": squared ReLU (HF NemotronConfig ``hidden_act``, Megatron ``--squared-relu``)
ACTIVATIONS = ("silu", "gelu", "relu", "relu2", "swiglu", "geglu", "gelu_new",
               "gelu_pytorch_tanh")
NORMS = ("rmsnorm", "layernorm")


def router_groups_error(num_experts: int, top_k: int, groups: int,
                        chosen: int) -> tuple[str, str] | None:
    """What is wrong with group-limited routing of ``top_k`` of ``num_experts`` experts within
    ``chosen`` of ``groups`` equal groups, as (the field, what it should be), or None: the
    groups must split the experts evenly, and the chosen ones be 1..groups and hold top_k."""
    if groups < 1 or num_experts % groups:
        return "router_groups", f"a divisor of the {num_experts} routed experts"
    least = max(1, -(-top_k * groups // num_experts))  # groups holding top_k experts
    if not least <= chosen <= groups:
        return "router_group_topk", (f"{least} to {groups} groups" if least < groups else
                                     f"{groups} groups") + f", enough to hold the top {top_k} experts"
    return None


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
    # Group-limited routing (DeepSeek-V3 report, sec. 2.1.2, "node-limited routing"; HF
    # ``n_group`` / ``topk_group``; Megatron ``--moe-router-num-groups`` /
    # ``--moe-router-group-topk``): the experts form ``router_groups`` equal, consecutive
    # groups and a token's top-k lie within ``router_group_topk`` of them. 1 and 1: no limit.
    router_groups: int = 1
    router_group_topk: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"MoE top_k={self.top_k} must be in 1..num_experts={self.num_experts}")
        if self.expert_ffn_hidden < 1 or self.num_shared_experts < 0:
            raise ValueError(f"MoE expert_ffn_hidden={self.expert_ffn_hidden} must be >= 1 and "
                             f"num_shared_experts={self.num_shared_experts} >= 0")
        wrong = router_groups_error(self.num_experts, self.top_k, self.router_groups,
                                    self.router_group_topk)
        if wrong:
            raise ValueError(f"MoE {wrong[0]}={getattr(self, wrong[0])} must be {wrong[1]}")

    @property
    def shared_width(self) -> int:
        """FFN width of the shared experts together (0 without any): each is
        ``shared_ffn_hidden`` wide, or ``expert_ffn_hidden`` when that is unset."""
        return self.num_shared_experts * (self.shared_ffn_hidden or self.expert_ffn_hidden)


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
class LinearAttnSpec:
    """Gated DeltaNet linear attention (Yang et al. 2024, arXiv:2412.06464) as in Qwen3-Next
    and Qwen3.5: a depthwise causal conv over q/k/v, then a per-head delta-rule recurrence over
    a ``key_head_dim x value_head_dim`` state. Value heads share key heads in groups (like GQA)."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    def __post_init__(self) -> None:
        if min(self.num_key_heads, self.num_value_heads, self.key_head_dim,
               self.value_head_dim, self.conv_kernel) < 1:
            raise ValueError(f"linear attention sizes must be >= 1: {self}")
        if self.num_value_heads % self.num_key_heads:
            raise ValueError(f"linear attention num_value_heads={self.num_value_heads} is not a "
                             f"multiple of num_key_heads={self.num_key_heads}")

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the causal conv: q, k and v side by side."""
        return 2 * self.key_dim + self.value_dim

    @property
    def recurrent_state_elems(self) -> int:
        """Delta-rule state of one request in one layer: one d_k x d_v matrix per value head."""
        return self.num_value_heads * self.key_head_dim * self.value_head_dim

    @property
    def conv_state_elems(self) -> int:
        """Last ``conv_kernel - 1`` inputs of the causal conv, one request, one layer."""
        return self.conv_dim * (self.conv_kernel - 1)

    @property
    def state_elems(self) -> int:
        """Everything one request keeps in one linear layer, whatever its length."""
        return self.recurrent_state_elems + self.conv_state_elems


@dataclass(frozen=True)
class SparseAttnSpec:
    """DeepSeek Sparse Attention (DSA; DeepSeek-V3.2-Exp technical report, "Prototype of DSA",
    eqs. 1-2): a lightning indexer of ``index_n_heads`` heads of ``index_head_dim`` scores every
    preceding token for each query (one key per token shared by the heads; "can be implemented
    in FP8"), and the main MLA attention attends only to the ``index_topk`` best-scoring ones."""

    index_topk: int
    index_n_heads: int
    index_head_dim: int

    def __post_init__(self) -> None:
        if min(self.index_topk, self.index_n_heads, self.index_head_dim) < 1:
            raise ValueError(f"sparse attention sizes must be >= 1: {self}")


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
    # GLU whose two halves are clamped at +-glu_clamp before the activation (GPT-OSS: HF
    # ``swiglu_limit`` 7.0); None: a plain GLU
    glu_clamp: float | None = None
    mtp_layers: int = 0  # DeepSeek multi-token-prediction modules, counted apart from the total
    # Output-gated attention (Qwen3-Next, Qwen3.5): q_proj also emits a sigmoid gate per head
    # and channel, so it is twice as wide.
    attn_gate: bool = False
    linear_attn: LinearAttnSpec | None = None
    linear_layers: tuple[bool, ...] = ()  # layer i uses linear attention (no KV cache)
    attention_chunk: int | None = None  # Llama-4 chunked attention: block length in tokens
    chunk_layers: tuple[bool, ...] = ()  # layer i uses chunked attention (default: all)
    sparse_attn: SparseAttnSpec | None = None  # DSA on every MLA layer
    indexer_layers: tuple[bool, ...] = ()  # layer i runs its own indexer (default: all)
    # YaRN's attention factor ("mscale"), which scales RoPE's cos and sin: 1 without YaRN or
    # where its two mscales cancel (DeepSeek-V3); 0.1 ln(32) + 1 = 1.347 for GPT-OSS (HF
    # ``rope_scaling``; Peng et al. 2023, YaRN, eq. 22). Megatron-Core's fused RoPE does not
    # take it: any other value runs the unfused rotary (cost_models.compute).
    rope_attention_factor: float = 1.0
    # RoPE's base frequency (HF ``rope_theta``) and Llama 3's frequency scaling factor (HF
    # ``rope_scaling`` of type ``llama3``): no cost term reads them; launch files pass them
    # (Megatron-LM ``--rotary-base``, ``--use-rope-scaling --rope-scaling-factor``). None:
    # the file does not say.
    rope_theta: float | None = None
    rope_llama3_factor: float | None = None
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
        for key in ("sliding_layers", "linear_layers", "chunk_layers", "indexer_layers"):
            flags = getattr(self, key)
            if flags and len(flags) != self.num_layers:
                raise ValueError(f"model '{self.name}': {key} has {len(flags)} entries for "
                                 f"{self.num_layers} layers")
        if (self.linear_attn is None) == any(self.linear_layers):
            raise ValueError(f"model '{self.name}': linear_attn and linear_layers go together "
                             f"(linear_attn {'missing' if self.linear_attn is None else 'set'}, "
                             f"{sum(self.linear_layers)} linear layers)")
        if not self.rope_attention_factor > 0:
            raise ValueError(f"model '{self.name}': rope_attention_factor="
                             f"{self.rope_attention_factor} must be > 0")
        if self.attention_chunk is not None and self.attention_chunk < 1:
            raise ValueError(f"model '{self.name}': attention_chunk={self.attention_chunk} "
                             "must be >= 1")
        if self.attention_chunk is None and any(self.chunk_layers):
            raise ValueError(f"model '{self.name}': chunk_layers set but no attention_chunk")
        self._check_sparse_attn()

    def _check_sparse_attn(self) -> None:
        if self.sparse_attn is None:
            if any(self.indexer_layers):
                raise ValueError(f"model '{self.name}': indexer_layers set but no sparse_attn")
            return
        if self.mla is None or not self.mla.q_lora_rank:
            raise ValueError(f"model '{self.name}': sparse_attn needs mla with a q_lora_rank "
                             "(the indexer's queries come from the MLA query latent)")
        if any(self.linear_layers) or self.sliding_window or self.attention_chunk:
            raise ValueError(f"model '{self.name}': sparse_attn does not combine with linear, "
                             "sliding-window or chunked attention layers")
        if self.indexer_layers and not self.indexer_layers[0]:
            raise ValueError(f"model '{self.name}': indexer_layers[0] must be true (a layer "
                             "without an indexer reuses the top-k of an earlier one)")

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
        """Sliding attention window of layer i (None: no sliding window)."""
        if self.sliding_window and (not self.sliding_layers or self.sliding_layers[i]):
            return self.sliding_window
        return None

    def chunk(self, i: int) -> int | None:
        """Attention chunk of layer i (None: not chunked). A query at position p sees only the
        keys in ``[p - p % chunk, p]``, so the layer caches at most ``chunk`` tokens."""
        if self.attention_chunk and (not self.chunk_layers or self.chunk_layers[i]):
            return self.attention_chunk
        return None

    def is_linear_layer(self, i: int) -> bool:
        """Layer i uses linear attention: a fixed-size state per request, no KV cache."""
        return bool(self.linear_layers) and self.linear_layers[i]

    @property
    def num_linear_layers(self) -> int:
        return sum(self.linear_layers)

    @property
    def num_kv_layers(self) -> int:
        """Layers that keep a KV cache (every layer but the linear-attention ones)."""
        return self.num_layers - self.num_linear_layers

    def sparse_topk(self, i: int) -> int | None:
        """Keys one query of layer i attends to at most under sparse attention (None: dense)."""
        return self.sparse_attn.index_topk if self.sparse_attn is not None else None

    def has_indexer(self, i: int) -> bool:
        """Layer i runs its own lightning indexer (and keeps an indexer key cache)."""
        return self.sparse_attn is not None and (not self.indexer_layers
                                                 or self.indexer_layers[i])

    @property
    def num_indexer_layers(self) -> int:
        return sum(self.has_indexer(i) for i in range(self.num_layers))

    @property
    def linear_state_elems(self) -> int:
        """Linear-attention state of one request in one linear layer, in elements (0: none)."""
        return self.linear_attn.state_elems if self.linear_attn is not None else 0


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
    q_width = a * d * (2 if model.attn_gate else 1)  # gated: the gate comes out of q_proj
    proj = h * q_width + 2 * h * kv * d + a * d * h
    bias = (q_width + 2 * kv * d if model.qkv_bias else 0) + (h if model.attn_out_bias else 0)
    return proj + bias + norms


def indexer_params(model: ModelSpec) -> int:
    """One layer's DSA lightning indexer (``DeepseekV32Indexer`` in ``modular_deepseek_v32.py``;
    DeepSeek-V3.2-Exp ``inference/model.py`` ``Indexer``): wq_b, q_lora_rank -> heads x dim;
    wk, h -> dim; k_norm, a LayerNorm (weight and bias) of dim; weights_proj, h -> heads; no
    biases. 0 without sparse attention."""
    sa = model.sparse_attn
    if sa is None:
        return 0
    heads, dim, h = sa.index_n_heads, sa.index_head_dim, model.hidden_size
    return model.mla.q_lora_rank * heads * dim + h * dim + 2 * dim + h * heads


def linear_attention_params(model: ModelSpec) -> int:
    """One Gated DeltaNet layer (``Qwen3NextGatedDeltaNet``) and its two layer norms.

    in_proj_qkvz: h -> 2 d_k + 2 d_v; in_proj_ba: h -> 2 H_v (Qwen3.5 splits both into
    in_proj_qkv/z/b/a, same sizes); conv1d: depthwise, conv_dim x kernel, no bias; A_log and
    dt_bias: H_v each; gated RMSNorm: value_head_dim; out_proj: d_v -> h.
    """
    la, h = model.linear_attn, model.hidden_size
    if la is None:
        return 0
    in_proj = h * (2 * la.key_dim + 2 * la.value_dim) + h * 2 * la.num_value_heads
    conv = la.conv_dim * la.conv_kernel
    per_head = 2 * la.num_value_heads + la.value_head_dim  # A_log, dt_bias, norm weight
    return in_proj + conv + per_head + la.value_dim * h + 2 * _norm_params(model, h)


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
    n_linear = model.num_linear_layers
    # DeepSeek MTP module: embedding/head shared; own 2 norms, a 2h->h projection, one layer
    # (with an indexer under sparse attention: GLM-5.2's checkpoint has layers.78...indexer.*).
    mtp_layer = attn + indexer_params(model) + (
        experts + shared + routers if model.is_moe else dense)
    mtp = model.mtp_layers * (mtp_layer + 2 * h + 2 * h * h + h)
    return ParamCounts(
        embedding=v * h + model.position_embeddings * h,
        lm_head=0 if model.tied_embeddings else v * h,
        attention=(model.num_layers - n_linear) * attn
        + n_linear * linear_attention_params(model)
        + model.num_indexer_layers * indexer_params(model),
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
