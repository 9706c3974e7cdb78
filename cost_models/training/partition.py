"""Per-layer costs that a layer-to-stage partition needs (``solvers.pipeline.dp``).

Owns :class:`PartitionInputs` and :func:`partition_inputs`: the stage-cost model of ``stage``
and the memory model of ``stage_memory`` read per layer, so that a solver which knows nothing
of either can sum them over any contiguous split. Activation shape, logits and the usable
memory come from the same functions the per-stage memory uses.
"""
from __future__ import annotations

from dataclasses import dataclass

from cost_models.compute import lm_head_forward_time
from cost_models.groups import GroupViews
from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.context import make_context
from cost_models.training.memory import in_flight_chunks, layer_params_split, state_bytes
from cost_models.training.stage import (layer_cost, mtp_cost, pp_link_s, unpaired_share,
                                        vocab_parallel_comm)
from cost_models.training.stage_memory import activation_terms, state_bytes_per_param, usable_bytes
from topologies.cluster import Cluster

__all__ = ["PartitionInputs", "partition_inputs"]


@dataclass(frozen=True, kw_only=True)
class PartitionInputs:
    """What a layer-to-stage partition needs, per layer and per stage (1F1B, vpp = 1).

    ``layer_time_s[l]``: forward + backward (+ recompute, TP/CP/EP comm) of layer l for one
    micro-batch on stage 0's links and GPUs; ``stage_slowdown[s]``: how much slower the same
    layers run on stage s's links and GPUs; ``head_time_s``: LM head and loss on the last
    stage's GPUs with their TP collectives (the embedding's too when pp = 1), divided by that
    stage's slowdown; ``embedding_time_s``: the first stage's vocabulary-parallel embedding
    collectives (0 when pp = 1); ``stage_link_s[s]``: stage s's pipeline
    send/recv per micro-batch on its two links (``stage.pp_link_s``, the term the step
    estimate adds to the stage). Memory:
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
    embedding_time_s: float = 0.0
    stage_limit_bytes: tuple[float, ...] = ()  # per stage, on its own GPUs (min is limit_bytes)
    stage_link_s: tuple[float, ...] = ()  # per stage: its pipeline send/recv per micro-batch


def partition_inputs(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: TrainingConfig,
                     prof: Profile, views: tuple[GroupViews, ...],
                     node_order: tuple[int, ...] | None = None) -> PartitionInputs:
    """Per-layer costs for the partition DP (``solvers.pipeline.dp``); see the dataclass. On a
    mixed cluster each stage is timed at its slowest replica's GPU and limited by its smallest
    GPU's memory (ranks placed by ``node_order``), so the split follows speed and memory."""
    ctx = make_context(model, cluster, workload, cfg, prof, views, node_order)
    d = cfg.degrees
    recomputed = cfg.recompute == "full" and cfg.recompute_layers is None
    layers = range(model.num_layers)

    def on_stage(s: int) -> list[float]:
        cache: dict[tuple, float] = {}
        unpaired = unpaired_share(cfg, cfg.micro_batches(workload), s)
        out = []
        for layer in layers:
            key = (model.is_moe_layer(layer), model.window(layer))
            if key not in cache:
                cache[key] = sum(layer_cost(ctx.on_stage(s), views[s], layer, recomputed,
                                            unpaired)[:5])
            out.append(cache[key])
        return out

    # Step 1: times, on stage 0's links and relative to them on the others
    base = on_stage(0)
    slowdown = [1.0] + [sum(on_stage(s)) / sum(base) for s in range(1, d.pp)]
    terms = activation_terms(ctx)
    k = terms.slices
    # the last stage's own head time, in stage-0 units (the DP scales it by that stage's
    # slowdown, and the head's is not the layers': it is never launch bound), with the MTP
    # modules Megatron-Core also puts there and the output layer's and loss's TP collectives
    # (stage_cost adds them all to the last stage)
    last = ctx.on_stage(d.pp - 1)
    vocab_s, vocab_calls = vocab_parallel_comm(last, views[d.pp - 1], d.pp - 1)
    # with one stage the head's call above holds the embedding's collectives too
    embedding_s, embedding_calls = (vocab_parallel_comm(ctx.on_stage(0), views[0], 0)
                                    if d.pp > 1 else (0.0, 0))
    head = (3 * k * lm_head_forward_time(model, ctx.slice_shard, last.rates, prof)
            + vocab_s + vocab_calls * prof.resume_s
            + sum(mtp_cost(last, views[d.pp - 1], unpaired_share(
                cfg, cfg.micro_batches(workload), d.pp - 1))[:5])) / slowdown[-1]
    # Step 2: model states per layer, and of the embedding and the LM head
    dp_shard, edp = d.dp * d.cp, d.expert_dp
    per_param = state_bytes_per_param(cfg, workload)
    states = []
    for layer in layers:
        dense, expert = layer_params_split(model, layer)
        states.append(sum(state_bytes(dense / d.tp, expert / (d.ep * d.expert_tp),
                                      dp_shard, edp, cfg.zero, per_param)))
    vocab = model.vocab_size * model.hidden_size / d.tp
    emb = sum(state_bytes(vocab + model.position_embeddings * model.hidden_size / d.tp, 0.0,
                          dp_shard, edp, cfg.zero, per_param))
    head_states = 0.0 if model.tied_embeddings and d.pp == 1 else sum(
        state_bytes(vocab, 0.0, dp_shard, edp, cfg.zero, per_param))
    # Step 3: activations per layer, per slice when slicing; partial full recompute
    # (recompute_layers) is modelled as none: times and bytes agree
    mode = "full" if recomputed else terms.rest_mode
    acts = [terms.layer_bytes(model, l, mode) / k for l in layers]
    capacity = ctx.stage_hbm_bytes or (cluster.min_hbm_bytes,) * d.pp
    live = 0.0
    if recomputed:  # one layer's full activations live during its recompute
        live = max(terms.layer_bytes(model, l, "none") for l in layers) / k
    limits = tuple(usable_bytes(c, prof) - live for c in capacity)
    m = cfg.micro_batches(workload)
    in_flight = tuple(in_flight_chunks(s, d.pp, 1, m, k) for s in range(d.pp))
    return PartitionInputs(layer_time_s=tuple(base), stage_slowdown=tuple(slowdown),
                           head_time_s=head, layer_state_bytes=tuple(states),
                           embedding_time_s=embedding_s + embedding_calls * prof.resume_s,
                           layer_activation_bytes=tuple(acts), in_flight=in_flight,
                           embedding_bytes=emb, head_bytes=head_states + terms.logits_bytes,
                           limit_bytes=min(limits), stage_limit_bytes=limits,
                           stage_link_s=tuple(pp_link_s(ctx.on_stage(s), s)
                                              for s in range(d.pp)))
