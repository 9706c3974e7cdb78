"""Attention/FFN disaggregated decode: what one micro-batch costs at each stage of a layer.

An AFD decode unit (MegaScale-Infer, Zhu et al. 2025, sec. 3-4; Step-3, StepFun 2025, sec. 3)
runs the attention of every layer on ``attention_ranks`` attention instances of
``attention_tp`` GPUs (data parallel, each with its requests' KV cache and a full copy of the
attention, dense-layer, shared-expert and router weights) and the routed experts of every MoE
layer on ``ffn_gpus`` expert GPUs (expert parallel, one slice of the experts each). Each
attention instance cuts its batch into ``micro_batches`` micro-batches; per MoE layer a
micro-batch crosses four single-server stages in order:

1. **attention** on its attention instance: the attention projections (weights read once per
   micro-batch), the attention core over its requests' KV, the router and the shared experts;
   a TP all-reduce when ``attention_tp > 1``;
2. **dispatch**: its tokens' hidden states (fp8, as DeepEP dispatches) to the expert GPUs that
   hold their top-k experts, each token once per distinct destination GPU;
3. **experts** on the expert GPUs: every attention instance's micro-batch arrives together, so
   an expert GPU runs ``attention_ranks * b * top_k / ffn_gpus`` (token, expert) pairs, times
   the placement's imbalance, over the experts they touch;
4. **combine**: the expert outputs (bf16) back to the attention instance.

Dense layers (DeepSeek-V3's first three) run whole on the attention side. The stage times are
combined into a step time by the ping-pong pipeline of ``solvers.serving.pingpong`` (the
planner wires the two rooms).

Sources beside each term: GEMMs and attention are :mod:`cost_models.serving.latency`'s
(roofline, PagedAttention reads, absorbed MLA); expected distinct experts touched
``E (1 - (1 - k/E)^T)`` as there; distinct destination GPUs (or nodes) of a token from
:func:`cost_models.communication.distinct_groups_hit` (the training dispatcher's count: its k
distinct experts drawn without replacement, within its routing groups where the model limits
them, experts spread evenly in consecutive slices; :func:`destinations_per_token`);
transfers alpha-beta over the link between the two pools (:class:`PoolLink`), hierarchical
across nodes (:func:`transfer_s`).
"""
from __future__ import annotations

from dataclasses import dataclass

from cost_models.communication import all_reduce_s, distinct_groups_hit
from cost_models.model_spec import ModelSpec, MoESpec, attention_params, mlp_params
from cost_models.serving.config import WEIGHT_BYTES, PoolLayout
from cost_models.serving.latency import Costing, _expert_params, _head_s, decode_step, gemm_s
from cost_models.serving.memory import BF16, kv_bytes_per_request, weight_bytes_per_gpu

DISPATCH_BYTES = 1.0  # fp8 hidden states out (DeepEP dispatch; DeepSeek-V3 report sec. 3.4)
COMBINE_BYTES = BF16  # bf16 expert outputs back (DeepEP combine)


@dataclass(frozen=True)
class AfdLayout:
    """One AFD decode unit (module docstring); ``batch`` requests per attention instance."""

    attention_tp: int
    attention_ranks: int
    ffn_gpus: int
    micro_batches: int
    batch: int
    redundant: int = 0  # redundant expert slots per MoE layer on the expert GPUs

    def __post_init__(self) -> None:
        for name in ("attention_tp", "attention_ranks", "ffn_gpus", "micro_batches", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"AFD {name} must be >= 1, got {getattr(self, name)}")

    @property
    def attention_gpus(self) -> int:
        return self.attention_tp * self.attention_ranks

    @property
    def gpus(self) -> int:
        return self.attention_gpus + self.ffn_gpus

    @property
    def micro_batch(self) -> float:
        """Requests per micro-batch on one attention instance."""
        return self.batch / self.micro_batches

    @property
    def requests(self) -> int:
        return self.batch * self.attention_ranks

    def as_dict(self) -> dict[str, float]:
        return {"attention_tp": self.attention_tp, "attention_instances": self.attention_ranks,
                "ffn_gpus": self.ffn_gpus, "micro_batches": self.micro_batches,
                "batch": self.batch}

    def attention_pool(self) -> PoolLayout:
        return PoolLayout(tp=self.attention_tp, dp=1, ep=1, batch=self.batch,
                          workers=self.attention_ranks)


@dataclass(frozen=True)
class PoolLink:
    """The path from an attention GPU to the expert GPUs: the bandwidth each GPU gets on the
    link between the pools (bytes/s, already scaled by its efficiency), one message's latency,
    and, when the expert GPUs share nodes, how many share one (``ffn_gpus_per_node``) and the
    bandwidth that forwards tokens inside a node (``forward_bytes_per_s``)."""

    bytes_per_s: float
    latency_s: float
    ffn_gpus_per_node: int = 1
    forward_bytes_per_s: float = float("inf")


@dataclass(frozen=True)
class AfdStages:
    """Per micro-batch times of one MoE layer's four stages and of one dense layer (seconds),
    plus what a step pays once (LM head, per-iteration and per-request overheads)."""

    attention_s: float
    dispatch_s: float
    experts_s: float
    combine_s: float
    dense_layer_s: float
    moe_layers: int
    dense_layers: int
    once_s: float

    @property
    def moe_stages(self) -> tuple[float, float, float, float]:
        return (self.attention_s, self.dispatch_s, self.experts_s, self.combine_s)

    def as_dict(self) -> dict[str, float]:
        return {"attention_s": self.attention_s, "dispatch_s": self.dispatch_s,
                "experts_s": self.experts_s, "combine_s": self.combine_s,
                "dense_layer_s": self.dense_layer_s, "once_s": self.once_s}


def destinations_per_token(moe: MoESpec, slices: int) -> float:
    """Expected distinct expert GPUs (or nodes) among ``slices`` equal, consecutive slices of
    the routed experts that one token's top-k experts sit on
    (:func:`cost_models.communication.distinct_groups_hit`, with the model's routing groups).

    More slices than experts means each expert has replicas on several GPUs and a token uses
    one replica of each of its experts: its k experts then land on k different GPUs, which is
    the count for one expert per slice, so the slices are capped at the expert count."""
    return distinct_groups_hit(moe.num_experts, moe.top_k, min(slices, moe.num_experts),
                               moe.router_groups, moe.router_group_topk)


def attention_side_s(att: Costing, micro: float, context: float, tokens_per_request: float
                     ) -> tuple[float, float]:
    """(one MoE layer, one dense layer) on an attention instance for ``micro`` requests of
    ``context`` tokens, each verifying ``tokens_per_request`` positions."""
    model, tp = att.model, att.layout.tp
    q = micro * tokens_per_request
    attn_p = attention_params(model) / tp
    # activation traffic of the projections, an estimate: read the hidden state, write
    # q/k/v (about one hidden state's worth with GQA), read the attention output, write the
    # hidden state: 4 hidden states of bf16 per token
    act = q * model.hidden_size * BF16 * 4
    proj = gemm_s(att, 2.0 * q * attn_p, attn_p, q, act)
    # the attention core of every layer (the decode step's own term), shared evenly: AFD
    # models run one attention kind on every layer
    core = decode_step(att, micro, context, tokens_per_request).attention_s / model.num_layers
    reduce = all_reduce_s(att.hw.tp_view, q * model.hidden_size * BF16, att.prof) if tp > 1 else 0.0
    dense_p = mlp_params(model.hidden_size, model.ffn_hidden_size, model.glu,
                         model.mlp_bias) / tp
    dense = proj + core + gemm_s(att, 2.0 * q * dense_p, dense_p, q, act) + 2 * reduce
    if not model.is_moe:
        return 0.0, dense
    _, shared = _expert_params(model)
    shared_s = gemm_s(att, 2.0 * q * shared / tp, shared / tp, q, 0.0)
    e = model.moe.num_experts
    router = gemm_s(att, 2.0 * q * model.hidden_size * e, 0.0, q,
                    model.hidden_size * e * BF16)
    return proj + core + shared_s + router + reduce, dense


def experts_side_s(ffn: Costing, tokens: float, ffn_gpus: int, redundant: int) -> float:
    """Routed experts of one MoE layer on the busiest expert GPU for ``tokens`` tokens from
    every attention instance (``ffn.moe_imbalance``: busiest over mean pairs)."""
    model = ffn.model
    moe = model.moe
    one, _ = _expert_params(model)
    local = (moe.num_experts + redundant) / ffn_gpus
    touched = local * (1.0 - (1.0 - moe.top_k / moe.num_experts) ** tokens)
    pairs = tokens * moe.top_k / ffn_gpus * ffn.moe_imbalance
    per_expert = pairs / max(touched, 1e-9)
    return gemm_s(ffn, 2.0 * pairs * one, touched * one, per_expert,
                  2 * pairs * model.hidden_size * BF16)


def transfer_s(model: ModelSpec, lay: AfdLayout, q: float, link: PoolLink,
               bytes_per_value: float) -> float:
    """One way between the pools for one micro-batch of ``q`` tokens per attention instance,
    sent hierarchically as DeepEP's normal kernels do (deepseek-ai/DeepEP README: RDMA to one
    GPU of each destination node, NVLink forwarding inside it): a token crosses the network
    once per distinct expert *node* among its top-k, then once per distinct expert GPU inside
    the node. The time is the slowest of an attention GPU's egress (its TP share of the
    tokens), an expert node's NIC ingress (every instance's tokens bound for it, over the
    node's GPUs' links) and the forwarding inside an expert node."""
    if link.bytes_per_s <= 0:
        return 0.0
    h = model.hidden_size
    per_node = max(1, min(link.ffn_gpus_per_node, lay.ffn_gpus))
    nodes = max(1, lay.ffn_gpus // per_node)
    to_nodes = destinations_per_token(model.moe, nodes)
    to_gpus = destinations_per_token(model.moe, lay.ffn_gpus)
    out_bytes = q / lay.attention_tp * to_nodes * h * bytes_per_value
    in_bytes = q * lay.attention_ranks * to_nodes / nodes * h * bytes_per_value / per_node
    forward_bytes = q * lay.attention_ranks * to_gpus / lay.ffn_gpus * h * bytes_per_value
    network = max(out_bytes, in_bytes) / link.bytes_per_s
    forward = forward_bytes / link.forward_bytes_per_s if per_node > 1 else 0.0
    return link.latency_s + max(network, forward)


def afd_stages(att: Costing, ffn: Costing, lay: AfdLayout, link: PoolLink, context: float,
               tokens_per_request: float = 1.0) -> AfdStages:
    """Stage times of ``lay`` for its micro-batch size (module docstring). ``att`` and ``ffn``
    are costings on the attention and expert GPU types (their layouts' degrees are ignored
    beyond the attention TP)."""
    model = att.model
    micro = lay.micro_batch
    q = micro * tokens_per_request
    moe_s, dense_s = attention_side_s(att, micro, context, tokens_per_request)
    experts = experts_side_s(ffn, q * lay.attention_ranks, lay.ffn_gpus, lay.redundant) if (
        model.is_moe) else 0.0
    dispatch = transfer_s(model, lay, q, link, DISPATCH_BYTES) if model.is_moe else 0.0
    combine = transfer_s(model, lay, q, link, COMBINE_BYTES) if model.is_moe else 0.0
    # once per step: the LM head over the whole batch, the engine iteration, each request
    once = (_head_s(att, lay.batch * tokens_per_request) + att.sprof.decode_step_overhead_s
            + lay.batch * att.sprof.per_request_overhead_s)
    return AfdStages(attention_s=moe_s, dispatch_s=dispatch, experts_s=experts,
                     combine_s=combine, dense_layer_s=dense_s, moe_layers=model.num_moe_layers,
                     dense_layers=model.num_layers - model.num_moe_layers, once_s=once)


@dataclass(frozen=True)
class AfdMemory:
    """Bytes on one attention GPU and one expert GPU, and how many requests' KV fit."""

    attention_weights_bytes: float
    kv_bytes_per_request: float
    attention_capacity_bytes: float
    max_batch: int  # requests per attention instance whose full-context KV fits
    ffn_weights_bytes: float
    ffn_capacity_bytes: float

    @property
    def ffn_fits(self) -> bool:
        return self.ffn_weights_bytes <= self.ffn_capacity_bytes

    def as_dict(self) -> dict[str, float]:
        return {"attention_weights_bytes": self.attention_weights_bytes,
                "kv_bytes_per_request": self.kv_bytes_per_request,
                "attention_capacity_bytes": self.attention_capacity_bytes,
                "max_batch": self.max_batch, "ffn_weights_bytes": self.ffn_weights_bytes,
                "ffn_capacity_bytes": self.ffn_capacity_bytes}


def routed_bytes_per_layer(model: ModelSpec, precision: str) -> float:
    """All routed experts of one MoE layer."""
    one, _ = _expert_params(model)
    return model.moe.num_experts * one * WEIGHT_BYTES[precision]


def afd_memory(model: ModelSpec, lay: AfdLayout, precision: str, kv_dtype: str,
               context: float, att_capacity_bytes: float, ffn_capacity_bytes: float
               ) -> AfdMemory:
    """Attention GPUs hold everything but the routed experts (sharded over the attention TP)
    plus KV at full ``context``; expert GPUs hold their slice of the routed experts and
    redundant slots. Capacities are usable bytes (HBM share less reserved)."""
    pool = lay.attention_pool()
    everything = weight_bytes_per_gpu(model, pool, precision)
    routed = (model.num_moe_layers * routed_bytes_per_layer(model, precision) / lay.attention_tp
              if model.is_moe else 0.0)
    att_weights = everything - routed
    kv = kv_bytes_per_request(model, pool, kv_dtype, context)
    free = att_capacity_bytes - att_weights
    max_batch = int(free // kv) if kv > 0 and free > 0 else 0
    ffn_weights = 0.0
    if model.is_moe:
        slots = (model.moe.num_experts + lay.redundant) / model.moe.num_experts
        ffn_weights = model.num_moe_layers * routed_bytes_per_layer(model, precision) * (
            slots / lay.ffn_gpus)
    return AfdMemory(att_weights, kv, att_capacity_bytes, max_batch, ffn_weights,
                     ffn_capacity_bytes)
