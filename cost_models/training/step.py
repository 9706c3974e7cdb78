"""Step time and memory of one parallel configuration: the composition of the cost models.

Pipeline time (Narayanan et al., SC'21, sec. 2.2): with m micro-batches, p stages, v model
chunks per stage and per-micro-batch stage times t_i, a step takes m*max(t_i) +
(p-1)/v * mean(t_i); for equal stages that is the paper's (m + (p-1)/v) * t, whose bubble
fraction is (p-1)/(v*m). ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", sec. 3.1
and Table 2) defers each backward's weight-gradient part W into the cool-down and so shrinks
the bubble to (p-1)(T_F + T_B - T_W), T_B the input-gradient part, when T_W <= min(T_F, T_B)
(``solvers.pipeline.sim.bubble_closed_form_s``: (p-1)(T_F + T_B - min(T_W, T_F, T_B))), at
1F1B's peak memory. Per stage, with w_i its weight-gradient time and T_F, T_B taken as equal
halves of t_i - w_i: (p-1) * mean(t_i - w_i - min(w_i, (t_i - w_i)/2)). ``solvers.pipeline.sim`` checks these closed forms event by event.

SlimPipe (Li et al. 2025, arXiv 2504.14519; ``ParallelConfig.seq_slices = k``): each
micro-batch of a 1F1B pipeline is cut into k sequence slices whose causal-attention cost is
evened out by workload redistribution, so a step runs m*k slice units of t_i/k each and the
bubble shrinks to (p-1)/k * mean(t_i) (``solvers.pipeline.slimpipe.step_time_s``); stage s holds
min(m k, k + p - s - 1) slices, each 1/k of a micro-batch's activations. A slice's GEMMs,
elementwise kernels, launch overheads and TP/EP collectives are costed at the slice's token
count (smaller GEMMs run less efficiently, k times as many kernels and messages), its
attention as its share of the whole causal attention (the slices add up to it).

Groups are placed by ``node_order`` (see ``cost_models.groups``) and viewed per stage: each
stage's TP/CP/EP/DP collectives run over that stage's own groups, and its send/recv over the
links to its pipeline neighbour, so a stage on slower nodes is a slower stage (which the
layer-partition DP can then give fewer layers: ``ParallelConfig.stage_layer_counts``).

Overlap assumptions (explicit, each a Megatron option in ``ParallelConfig``):
* TP collectives are exposed, unless ``tp_comm_overlap``: then they hide behind the layer's
  GEMMs and only the excess shows.
* Context-parallel KV exchange hides behind the attention core it feeds (ring attention); only
  the excess shows.
* Expert all-to-all (dispatch, combine) and pipeline send/recv are exposed.
* Data-parallel gradient reduce-scatter hides behind the last micro-batch's backward pass when
  ``overlap_grad_reduce`` (buckets start as their gradients are final); the parameter
  all-gather hides behind the first micro-batch's forward pass when ``overlap_param_gather``.
* The optimizer step is memory bound and runs after the last reduction.
"""
from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from cost_models import communication as comm
from cost_models.compute import (GpuRates, LayerTime, Shard, layer_forward_time, layer_work,
                                 lm_head_forward_time, model_flops_per_token)
from cost_models.groups import GroupViews, KINDS, stage_views, worst_of
from cost_models.training.memory import (ActivationShape, MemoryBreakdown, in_flight_chunks,
                                layer_activation_bytes, layer_params_split, state_bytes)
from cost_models.model_spec import ModelSpec
from cost_models.parallel import ParallelConfig, Workload
from cost_models.profile import Profile
from topologies.cluster import Cluster

BWD_GEMM, BWD_ATTN, BWD_ELEM = 2.0, 2.5, 2.0  # backward / forward work (see compute.py)


@dataclass(frozen=True)
class StageCost:
    """One pipeline stage, one micro-batch through all its chunks (seconds)."""

    stage: int
    layers: int
    compute_s: float
    recompute_s: float
    tp_comm_s: float
    cp_comm_s: float
    ep_comm_s: float
    pp_comm_s: float
    weight_grad_s: float = 0.0  # the part of compute_s that is weight gradients (ZB-H1's W)

    @property
    def total_s(self) -> float:
        return (self.compute_s + self.recompute_s + self.tp_comm_s + self.cp_comm_s
                + self.ep_comm_s + self.pp_comm_s)


@dataclass(frozen=True)
class TimeBreakdown:
    """One training step (seconds). The parts add up to ``step_s``."""

    compute_s: float
    recompute_s: float
    tp_comm_s: float
    cp_comm_s: float
    ep_comm_s: float
    pp_comm_s: float
    bubble_s: float
    dp_comm_s: float  # exposed part only
    optimizer_s: float

    @property
    def step_s(self) -> float:
        return (self.compute_s + self.recompute_s + self.tp_comm_s + self.cp_comm_s
                + self.ep_comm_s + self.pp_comm_s + self.bubble_s + self.dp_comm_s
                + self.optimizer_s)


@dataclass(frozen=True)
class Estimate:
    """Predicted step time, throughput and memory of one configuration."""

    model: str
    cluster: str
    num_gpus: int
    workload: Workload
    config: ParallelConfig
    time: TimeBreakdown
    memory: MemoryBreakdown
    stages: tuple[StageCost, ...]
    model_flops_per_step: float
    peak_flops_per_gpu: float
    tiers: dict[str, str] = field(default_factory=dict)  # group kind -> bottleneck tier
    dp_comm_total_s: float = 0.0  # before overlap
    node_order: tuple[int, ...] | None = None  # placement (None: the cluster's listing order)
    stage_memory: tuple[MemoryBreakdown, ...] = ()  # per stage; ``memory`` is the peak one

    @property
    def step_time_s(self) -> float:
        return self.time.step_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.workload.tokens / self.step_time_s / self.num_gpus

    @property
    def model_tflops_per_gpu(self) -> float:
        return self.model_flops_per_step / self.step_time_s / self.num_gpus / 1e12

    @property
    def mfu(self) -> float:
        return self.model_tflops_per_gpu * 1e12 / self.peak_flops_per_gpu


def config_stage_layers(num_layers: int, cfg: ParallelConfig) -> tuple[tuple[int, ...], ...]:
    """Layers of each stage: ``cfg.stage_layer_counts`` when set, else :func:`stage_layers`."""
    if cfg.stage_layer_counts is None:
        return stage_layers(num_layers, cfg.pp, cfg.vpp)
    return _counted_layers(tuple(cfg.stage_layer_counts))


@lru_cache(maxsize=1024)
def _counted_layers(counts: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    starts = [sum(counts[:s]) for s in range(len(counts))]
    return tuple(tuple(range(a, a + n)) for a, n in zip(starts, counts))


@lru_cache(maxsize=1024)  # the search asks for the same few splits thousands of times
def stage_layers(num_layers: int, pp: int, vpp: int) -> tuple[tuple[int, ...], ...]:
    """Layers of each stage: the layers are cut into p*v contiguous chunks and chunk j goes to
    stage j mod p (Megatron's interleaved assignment; v = 1 is the plain split).

    When p*v does not divide L the extra layers go to the middle chunks, away from the
    embedding (first chunk) and the LM head (last chunk), as Megatron's uneven layouts do.
    """
    chunks = pp * vpp
    base, extra = divmod(num_layers, chunks)
    middle_first = sorted(range(chunks), key=lambda j: (j in (0, chunks - 1),
                                                          abs(j - (chunks - 1) / 2), j))
    sizes = [base + (1 if j in middle_first[:extra] else 0) for j in range(chunks)]
    starts = [sum(sizes[:j]) for j in range(chunks)]
    return tuple(tuple(layer for j in range(s, chunks, pp)
                       for layer in range(starts[j], starts[j] + sizes[j])) for s in range(pp))


@dataclass(frozen=True)
class _Context:
    model: ModelSpec
    workload: Workload
    cfg: ParallelConfig
    prof: Profile
    rates: GpuRates
    views: tuple[GroupViews, ...]  # per stage
    shard: Shard
    slice_shard: Shard  # one SlimPipe slice of a micro-batch (== shard without slicing)


def _layer_comm_fwd(ctx: _Context, views: GroupViews, layer: int) -> tuple[float, float, float]:
    """(tp, cp, ep) collective time of one layer's forward, before overlap; with SlimPipe the
    TP and EP collectives run once per slice at the slice's size."""
    if ctx.cfg.seq_slices == 1:
        return _layer_comm_fwd_shard(ctx, views, layer, ctx.shard)
    k = ctx.cfg.seq_slices
    tp, _, ep = _layer_comm_fwd_shard(ctx, views, layer, ctx.slice_shard)
    cp = _layer_comm_fwd_shard(ctx, views, layer, ctx.shard)[1]
    return k * tp, cp, k * ep


def _layer_comm_fwd_shard(ctx: _Context, views: GroupViews, layer: int,
                          sh: Shard) -> tuple[float, float, float]:
    m, cfg, prof = ctx.model, ctx.cfg, ctx.prof
    elem = ctx.rates.elem_bytes
    act_bytes = sh.tokens * m.hidden_size * elem
    moe_layer = m.is_moe_layer(layer)
    tp_blocks = 1 + (0 if moe_layer and not m.moe.num_shared_experts else 1)
    tp = tp_blocks * comm.all_reduce_s(views.tp, act_bytes, prof)  # AR == AG + RS in bytes
    cp = 0.0
    if cfg.cp > 1:
        kv_width = (m.num_heads * (m.mla.qk_head_dim + m.mla.v_head_dim) if m.mla
                    else 2 * m.num_kv_heads * m.head_dim) / cfg.tp
        cp = comm.all_gather_s(views.cp, sh.tokens * kv_width * elem * cfg.cp, prof)
    ep = 0.0
    if moe_layer and cfg.ep > 1:
        send = sh.tokens / cfg.tp * m.moe.top_k * cfg.moe_imbalance * m.hidden_size * elem
        ep = 2 * comm.all_to_all_s(views.ep, send, prof)  # dispatch + combine
    return tp, cp, ep


def _backward_s(t: LayerTime) -> float:
    """Backward time of a layer from its forward parts (ratios in compute.py)."""
    return (BWD_GEMM * t.gemm_s + BWD_ATTN * t.attention_s + BWD_ELEM * t.elementwise_s
            + 2 * t.overhead_s)


def _layer_cost(ctx: _Context, views: GroupViews, layer: int,
                recomputed: bool) -> tuple[float, ...]:
    """(compute, recompute, tp, cp, ep, weight-grad) seconds of one layer, forward + backward."""
    t: LayerTime = layer_forward_time(layer_work(ctx.model, layer, ctx.shard), ctx.rates, ctx.prof)
    k = ctx.cfg.seq_slices
    if k > 1:  # k slices: GEMMs, elementwise, launches per slice; attention as a whole
        ts = layer_forward_time(layer_work(ctx.model, layer, ctx.slice_shard), ctx.rates, ctx.prof)
        t = LayerTime(k * ts.gemm_s, t.attention_s, k * ts.elementwise_s, k * ts.overhead_s)
    fwd, bwd = t.total_s, _backward_s(t)
    tp, cp, ep = _layer_comm_fwd(ctx, views, layer)
    if ctx.cfg.tp_comm_overlap:
        tp_fwd, tp_bwd = max(0.0, tp - t.gemm_s), max(0.0, tp - BWD_GEMM * t.gemm_s)
    else:
        tp_fwd = tp_bwd = tp
    cp_fwd, cp_bwd = max(0.0, cp - t.attention_s), max(0.0, 2 * cp - BWD_ATTN * t.attention_s)
    recompute = 0.0
    if recomputed:
        recompute = fwd + tp_fwd + cp_fwd + ep
    elif ctx.cfg.recompute == "selective" and ctx.shard.unfused_attention:
        recompute = t.attention_s + 0.3 * t.elementwise_s  # attention core: QK^T, softmax, AV
    elif ctx.cfg.recompute == "selective":
        recompute = 0.5 * t.elementwise_s  # norms and activation functions
    weight_grad = (BWD_GEMM - 1) * t.gemm_s  # dW = x^T dy: one forward GEMM's worth
    return fwd + bwd, recompute, tp_fwd + tp_bwd, cp_fwd + cp_bwd, 2 * ep, weight_grad


def _fully_recomputed(cfg: ParallelConfig, layers: Sequence[int]) -> int:
    """How many of a stage's layers full recompute covers (``recompute_layers`` per chunk)."""
    if cfg.recompute != "full":
        return 0
    if cfg.recompute_layers is None:
        return len(layers)
    return min(len(layers), cfg.recompute_layers * cfg.vpp)


def _stage_cost(ctx: _Context, stage: int, layers: Sequence[int],
                cache: dict[tuple, tuple[float, ...]]) -> StageCost:
    cfg, m = ctx.cfg, ctx.model
    n_recompute = _fully_recomputed(cfg, layers)
    views = ctx.views[stage]
    parts = [0.0] * 6
    for recomputed, (lo, hi) in ((True, (0, n_recompute)), (False, (n_recompute, len(layers)))):
        for kind, count, layer in _kind_counts(m, layers, lo, hi):
            key = (kind, recomputed, id(views.tp), id(views.cp), id(views.ep))
            if key not in cache:
                cache[key] = _layer_cost(ctx, views, layer, recomputed)
            parts = [a + count * b for a, b in zip(parts, cache[key])]
    k = cfg.seq_slices
    if stage == cfg.pp - 1:  # LM head and loss: forward + 2x backward
        parts[0] += 3 * k * lm_head_forward_time(m, ctx.slice_shard, ctx.rates, ctx.prof)
    # each TP rank sends 1/t of the boundary activation: sequence parallelism, or Megatron's
    # scatter/gather optimisation without it (SC'21 sec. 4.1); SlimPipe sends k slices
    act_bytes = ctx.slice_shard.tokens * m.hidden_size * ctx.rates.elem_bytes / cfg.tp
    pp = (2 * cfg.vpp * k * comm.send_recv_s(views.pp, act_bytes, ctx.prof) if cfg.pp > 1
          else 0.0)
    return StageCost(stage, len(layers), parts[0], parts[1], parts[2], parts[3], parts[4], pp,
                     parts[5])


@lru_cache(maxsize=32)
def _layer_tables(model: ModelSpec) -> tuple[tuple[tuple[float, float], ...], tuple[tuple, ...]]:
    """Per layer: (non-expert, expert) parameters, and the kind that decides its activation
    bytes (MoE or dense, attention window). Computed once per model: the search asks often."""
    params = tuple(layer_params_split(model, l) for l in range(model.num_layers))
    kinds = tuple((model.is_moe_layer(l), model.window(l)) for l in range(model.num_layers))
    return params, kinds


@lru_cache(maxsize=32)
def _prefix_tables(model: ModelSpec) -> tuple[list[float], list[float], dict[tuple, list[int]],
                                               dict[tuple, int]]:
    """Prefix sums over layers of the (non-expert, expert) parameters and of each layer kind's
    count, and a representative layer of each kind: sums over a stage's contiguous layers in
    O(1). Layers of one kind cost and store the same (keys of the caches in this module)."""
    params, kinds = _layer_tables(model)
    dense = list(itertools.accumulate((p[0] for p in params), initial=0.0))
    expert = list(itertools.accumulate((p[1] for p in params), initial=0.0))
    counts = {kind: list(itertools.accumulate((k == kind for k in kinds), initial=0))
              for kind in dict.fromkeys(kinds)}
    return dense, expert, counts, {kind: kinds.index(kind) for kind in counts}


def _contiguous(layers: Sequence[int]) -> bool:
    return not layers or layers[-1] - layers[0] == len(layers) - 1


def _kind_counts(model: ModelSpec, layers: Sequence[int], lo: int, hi: int
                 ) -> list[tuple[tuple, int, int]]:
    """(kind, count, a layer of that kind) for the stage's layers ``layers[lo:hi]``."""
    if hi <= lo:
        return []
    _, _, counts, first = _prefix_tables(model)
    if _contiguous(layers):
        a, b = layers[0] + lo, layers[0] + hi
        return [(kind, c[b] - c[a], first[kind]) for kind, c in counts.items() if c[b] > c[a]]
    kinds = _layer_tables(model)[1]
    tally = Counter(kinds[l] for l in layers[lo:hi])
    return [(kind, tally[kind], first[kind]) for kind in counts if tally[kind]]


def _stage_params(model: ModelSpec, cfg: ParallelConfig, stage: int,
                  layers: Sequence[int]) -> tuple[float, float]:
    """(non-expert, expert) parameters one GPU of ``stage`` holds, after TP/EP splits."""
    if layers and _contiguous(layers):
        dense_p, expert_p, _, _ = _prefix_tables(model)
        dense = dense_p[layers[-1] + 1] - dense_p[layers[0]]
        expert = expert_p[layers[-1] + 1] - expert_p[layers[0]]
    else:
        table = _layer_tables(model)[0]
        dense = sum(table[l][0] for l in layers)
        expert = sum(table[l][1] for l in layers)
    vocab = model.vocab_size * model.hidden_size
    if stage == 0:
        dense += vocab + model.position_embeddings * model.hidden_size
    if stage == cfg.pp - 1 and (not model.tied_embeddings or cfg.pp > 1):
        dense += vocab
    return dense / cfg.tp, expert / (cfg.ep * cfg.expert_tp)


def _dp_comm(ctx: _Context, stage: int, dense: float, expert: float) -> tuple[float, float]:
    """(gradient reduction, parameter gather) seconds for one stage's parameters."""
    cfg, views, prof = ctx.cfg, ctx.views[stage], ctx.prof
    if cfg.zero == 0:
        return (comm.all_reduce_s(views.dp_cp, 4 * dense, prof)
                + comm.all_reduce_s(views.edp, 4 * expert, prof)), 0.0
    grads = (comm.reduce_scatter_s(views.dp_cp, 4 * dense, prof)
             + comm.reduce_scatter_s(views.edp, 4 * expert, prof))
    elem = ctx.rates.elem_bytes
    params = (comm.all_gather_s(views.dp_cp, elem * dense, prof)
              + comm.all_gather_s(views.edp, elem * expert, prof))
    return grads, params


def _memory(ctx: _Context, stage: int, layers: Sequence[int], capacity: float) -> MemoryBreakdown:
    cfg, model, m = ctx.cfg, ctx.model, ctx.cfg.micro_batches(ctx.workload)
    dense, expert = _stage_params(model, cfg, stage, layers)
    weights, grads, optim = state_bytes(dense, expert, cfg.dp * cfg.cp, cfg.expert_dp, cfg.zero,
                                        ctx.workload.state_bytes_per_param)
    params = _layer_tables(model)[0]
    if cfg.zero >= 3:  # one layer gathered at a time, forward and backward prefetch
        weights += 2 * ctx.rates.elem_bytes * max((sum(params[l]) for l in layers), default=0.0) / cfg.tp
    shape = ActivationShape(ctx.shard.tokens, ctx.workload.seq_len, cfg.tp, cfg.expert_tp,
                            cfg.sequence_parallel, ctx.shard.unfused_attention, cfg.dropout,
                            cfg.moe_imbalance, ctx.shard.elem_bytes)
    k = cfg.seq_slices
    n_full = _fully_recomputed(cfg, layers)
    rest_mode = "none" if cfg.recompute == "full" else cfg.recompute  # past recompute_layers
    segments = (("full", 0, n_full), (rest_mode, n_full, len(layers)))
    per_mb = sum(count * layer_activation_bytes(model, layer, shape, mode)
                 for mode, lo, hi in segments
                 for _, count, layer in _kind_counts(model, layers, lo, hi))
    # chunks (or SlimPipe slices) in flight, each 1/vpp (1/k) of a micro-batch
    activations = per_mb * in_flight_chunks(stage, cfg.pp, cfg.vpp, m, k) / (cfg.vpp * k)
    if cfg.recompute == "full" and n_full and layers:  # one layer's full activations
        activations += layer_activation_bytes(model, layers[0], shape, "none") / k
    logits = (8 * ctx.shard.tokens / k * model.vocab_size / cfg.tp) if stage == cfg.pp - 1 else 0.0
    base = weights + grads + optim + activations + logits
    other = ctx.prof.reserved_bytes + ctx.prof.fragmentation_fraction * base
    return MemoryBreakdown(weights, grads, optim, activations, logits, other, capacity, stage)


def _make_context(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: ParallelConfig,
                  prof: Profile, views: tuple[GroupViews, ...]) -> _Context:
    gpu = cluster.slowest_gpu
    fp8 = workload.precision == "fp8"
    peak = gpu.peak_flops_for("fp32" if workload.precision == "fp32" else "bf16")
    rates = GpuRates(peak, gpu.hbm_bw_bytes_per_s, fp8, workload.elem_bytes)
    shard = Shard(cfg.micro_batch, workload.seq_len, cfg.tp, cfg.cp, cfg.ep, cfg.expert_tp,
                  cfg.sequence_parallel, cfg.attention == "unfused", cfg.dropout,
                  cfg.moe_imbalance, workload.elem_bytes)
    slice_shard = shard if cfg.seq_slices == 1 else replace(
        shard, seq_len=workload.seq_len // cfg.seq_slices)
    return _Context(model, workload, cfg, prof, rates, views, shard, slice_shard)


def estimate_memory(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: ParallelConfig,
                    prof: Profile) -> MemoryBreakdown:
    """Peak per-GPU memory of ``cfg`` (the stage that needs most); no time, no group views."""
    ctx = _make_context(model, cluster, workload, cfg, prof, ())
    split = config_stage_layers(model.num_layers, cfg)
    return max((_memory(ctx, s, layers, cluster.min_hbm_bytes) for s, layers in enumerate(split)),
               key=lambda mb: mb.peak_bytes)


def memory_fits(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: ParallelConfig,
                prof: Profile) -> bool:
    """Whether every stage of ``cfg`` fits (``estimate_memory(...).fits``), stopping at the
    first stage that does not: the first (most activations in flight) and the last (logits)
    are checked before the others."""
    ctx = _make_context(model, cluster, workload, cfg, prof, ())
    split = config_stage_layers(model.num_layers, cfg)
    order = [0] + ([len(split) - 1] if len(split) > 1 else []) + list(range(1, len(split) - 1))
    return all(_memory(ctx, s, split[s], cluster.min_hbm_bytes).fits for s in order)


def bubble_s(cfg: ParallelConfig, stages: tuple[StageCost, ...]) -> float:
    """Pipeline bubble of the schedule (module docstring): (p-1)/v * mean(t_i); for ZB-H1
    (p-1) * mean(t_i - w_i - min(w_i, (t_i - w_i)/2)); for SlimPipe with k slices
    (p-1)/k * mean(t_i)."""
    if cfg.zero_bubble:
        rest = [s.total_s - s.weight_grad_s for s in stages]
        per = [r - min(s.weight_grad_s, r / 2) for r, s in zip(rest, stages)]
        return (cfg.pp - 1) * sum(per) / len(per)
    mean_s = sum(s.total_s for s in stages) / len(stages)
    return (cfg.pp - 1) / (cfg.vpp * cfg.seq_slices) * mean_s


def estimate(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: ParallelConfig,
             prof: Profile, node_order: tuple[int, ...] | None = None,
             views: tuple[GroupViews, ...] | None = None) -> Estimate:
    """Predict step time and per-GPU memory of ``cfg`` on ``cluster``, its ranks placed on the
    nodes in ``node_order`` (None: listing order, Megatron's default). ``views`` (from
    :func:`cost_models.groups.stage_views`) may be passed in when already computed."""
    if views is None:
        views = stage_views(cluster, cfg, node_order)
    ctx = _make_context(model, cluster, workload, cfg, prof, views)
    split = config_stage_layers(model.num_layers, cfg)
    cache: dict[tuple, tuple[float, ...]] = {}  # layer costs, shared by stages with equal views
    stages = tuple(_stage_cost(ctx, s, layers, cache) for s, layers in enumerate(split))
    m = cfg.micro_batches(workload)
    slow = max(stages, key=lambda s: s.total_s)
    bubble = bubble_s(cfg, stages)
    dp_exposed = dp_total = optimizer = 0.0
    for s, layers in enumerate(split):
        dense, expert = _stage_params(model, cfg, s, layers)
        grads, params = _dp_comm(ctx, s, dense, expert)
        bwd_window = stages[s].compute_s * 2 / 3 if cfg.overlap_grad_reduce else 0.0
        fwd_window = stages[s].compute_s / 3 if cfg.overlap_param_gather else 0.0
        exposed = max(0.0, grads - bwd_window) + max(0.0, params - fwd_window)
        if cfg.zero >= 3:  # FSDP (Zhao et al. 2023, sec. 3.2): per micro-batch, weights gathered
            # before forward and again before backward, gradients reduce-scattered after it,
            # each prefetched behind the neighbouring layers' compute
            fwd_c, bwd_c = stages[s].compute_s / 3, stages[s].compute_s * 2 / 3
            exposed = m * (max(0.0, params - fwd_c) + max(0.0, params + grads - bwd_c))
            grads, params = m * grads, 2 * m * params
        shard = (dense / (cfg.dp * cfg.cp) + expert / cfg.expert_dp) if cfg.zero else dense + expert
        opt = shard * workload.optimizer_bytes_per_param / (ctx.rates.hbm_bytes_per_s * prof.hbm_efficiency)
        if exposed + opt > dp_exposed + optimizer:
            dp_exposed, optimizer, dp_total = exposed, opt, grads + params
    time = TimeBreakdown(m * slow.compute_s, m * slow.recompute_s, m * slow.tp_comm_s,
                         m * slow.cp_comm_s, m * slow.ep_comm_s, m * slow.pp_comm_s, bubble,
                         dp_exposed, optimizer)
    capacity = cluster.min_hbm_bytes
    stage_memory = tuple(_memory(ctx, s, layers, capacity) for s, layers in enumerate(split))
    memory = max(stage_memory, key=lambda mb: mb.peak_bytes)
    flops = model_flops_per_token(model, workload.seq_len) * workload.tokens
    return Estimate(model.name, cluster.name, cluster.num_gpus, workload, cfg, time, memory,
                    stages, flops, ctx.rates.peak_flops, bottleneck_tiers(views), dp_total,
                    None if node_order is None else tuple(node_order), stage_memory)


def compute_floor_s(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: ParallelConfig,
                    prof: Profile) -> float:
    """``m`` times the forward + backward compute of ``cfg``'s most loaded stage: a lower bound
    on :func:`estimate`'s step time for every option with ``cfg``'s degrees, micro-batch and
    layer split. The step is ``m * max(t_i)`` plus non-negative parts, and every ``t_i`` holds
    this compute; recompute, communication, ZeRO stage and the schedule flags only add to it,
    and SlimPipe slices run smaller, less efficient kernels (``seq_slices`` is ignored here)."""
    ctx = _make_context(model, cluster, workload, replace(cfg, seq_slices=1), prof, ())
    cache: dict[tuple, float] = {}

    def layer_s(layer: int) -> float:
        key = (model.is_moe_layer(layer), model.window(layer))
        if key not in cache:
            t = layer_forward_time(layer_work(model, layer, ctx.shard), ctx.rates, prof)
            cache[key] = t.total_s + _backward_s(t)
        return cache[key]

    split = config_stage_layers(model.num_layers, cfg)
    per_stage = [sum(layer_s(l) for l in layers) for layers in split]
    per_stage[-1] += 3 * lm_head_forward_time(model, ctx.shard, ctx.rates, prof)
    return cfg.micro_batches(workload) * max(per_stage)


def bottleneck_tiers(views: tuple[GroupViews, ...]) -> dict[str, str]:
    """Group kind -> name of the link tier that limits its slowest group, over all stages."""
    worst = {k: worst_of([getattr(v, k) for v in views]) for k in KINDS}
    return {k: worst[k].bottleneck.name for k in ("tp", "cp", "dp_cp", "pp", "ep")
            if worst[k].size > 1}


@dataclass(frozen=True)
class PartitionInputs:
    """What a layer-to-stage partition needs, per layer and per stage (1F1B, vpp = 1).

    ``layer_time_s[l]``: forward + backward (+ recompute, TP/CP/EP comm) of layer l for one
    micro-batch on stage 0's links; ``stage_slowdown[s]``: how much slower the same layers run
    on stage s's links; ``head_time_s``: LM head and loss on the last stage. Memory:
    ``layer_state_bytes`` (weights, grads, optimizer after sharding), ``layer_activation_bytes``
    (one micro-batch), ``in_flight[s]`` micro-batches held by stage s, the embedding's and
    head's bytes, and ``limit_bytes``: what states + activations may use on one GPU.
    """

    layer_time_s: tuple[float, ...]
    stage_slowdown: tuple[float, ...]
    head_time_s: float
    layer_state_bytes: tuple[float, ...]
    layer_activation_bytes: tuple[float, ...]
    in_flight: tuple[int, ...]
    embedding_bytes: float
    head_bytes: float
    limit_bytes: float


def partition_inputs(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: ParallelConfig,
                     prof: Profile, views: tuple[GroupViews, ...]) -> PartitionInputs:
    """Per-layer costs for the partition DP (``solvers.pipeline.dp``); see the dataclass."""
    ctx = _make_context(model, cluster, workload, cfg, prof, views)
    recomputed = cfg.recompute == "full" and cfg.recompute_layers is None
    layers = range(model.num_layers)

    def on_stage(s: int) -> list[float]:
        cache: dict[tuple, float] = {}
        out = []
        for layer in layers:
            key = (model.is_moe_layer(layer), model.window(layer))
            if key not in cache:
                cache[key] = sum(_layer_cost(ctx, views[s], layer, recomputed)[:5])
            out.append(cache[key])
        return out

    base = on_stage(0)
    slowdown = [1.0] + [sum(on_stage(s)) / sum(base) for s in range(1, cfg.pp)]
    k = cfg.seq_slices
    head = 3 * k * lm_head_forward_time(model, ctx.slice_shard, ctx.rates, prof)
    dp_shard, edp = cfg.dp * cfg.cp, cfg.expert_dp
    states = []
    for layer in layers:
        dense, expert = layer_params_split(model, layer)
        states.append(sum(state_bytes(dense / cfg.tp, expert / (cfg.ep * cfg.expert_tp),
                                      dp_shard, edp, cfg.zero, workload.state_bytes_per_param)))
    shape = ActivationShape(ctx.shard.tokens, workload.seq_len, cfg.tp, cfg.expert_tp,
                            cfg.sequence_parallel, ctx.shard.unfused_attention, cfg.dropout,
                            cfg.moe_imbalance, workload.elem_bytes)
    # partial full recompute (recompute_layers) is modelled as none: times and bytes agree
    mode = "full" if recomputed else ("none" if cfg.recompute == "full" else cfg.recompute)
    acts = [layer_activation_bytes(model, l, shape, mode) / k for l in layers]
    vocab = model.vocab_size * model.hidden_size / cfg.tp
    per_param = workload.state_bytes_per_param
    emb = sum(state_bytes(vocab + model.position_embeddings * model.hidden_size / cfg.tp, 0.0,
                          dp_shard, edp, cfg.zero, per_param))
    head_states = 0.0 if model.tied_embeddings and cfg.pp == 1 else sum(
        state_bytes(vocab, 0.0, dp_shard, edp, cfg.zero, per_param))
    logits = 8 * ctx.shard.tokens / k * model.vocab_size / cfg.tp
    m = cfg.micro_batches(workload)
    limit = (cluster.min_hbm_bytes - prof.reserved_bytes) / (1 + prof.fragmentation_fraction)
    if recomputed:  # one layer's full activations live during its recompute
        limit -= max(layer_activation_bytes(model, l, shape, "none") for l in layers) / k
    # slices of 1/k micro-batch when slicing (acts above are per slice)
    in_flight = tuple(in_flight_chunks(s, cfg.pp, 1, m, k) for s in range(cfg.pp))
    return PartitionInputs(tuple(base), tuple(slowdown), head, tuple(states), tuple(acts),
                           in_flight, emb, head_states + logits, limit)
