"""Which layers each pipeline stage holds, and sums over a stage's layers.

Owns the layer-to-stage split (:func:`stage_layers`, Megatron's interleaved assignment, and
:func:`config_stage_layers`, which honours ``TrainingConfig.stage_layer_counts``) and the
per-model tables that make a stage's sums O(1): layer kinds (layers of one kind cost and store
the same; :func:`kind_counts`) and the (non-expert, expert) parameters a stage's GPU holds
(:func:`stage_params`).
"""
from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from cost_models.model_spec import ModelSpec
from cost_models.training.config import TrainingConfig
from cost_models.training.memory import layer_params_split

__all__ = ["config_stage_layers", "kind_counts", "layer_tables", "mtp_params", "stage_layers",
           "stage_params"]


def config_stage_layers(num_layers: int, cfg: TrainingConfig) -> tuple[tuple[int, ...], ...]:
    """Layers of each stage: ``cfg.stage_layer_counts`` when set, else :func:`stage_layers`."""
    if cfg.stage_layer_counts is None:
        return stage_layers(num_layers, cfg.degrees.pp, cfg.vpp)
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


@lru_cache(maxsize=32)
def layer_tables(model: ModelSpec) -> tuple[tuple[tuple[float, float], ...], tuple[tuple, ...]]:
    """Per layer: (non-expert, expert) parameters, and the kind that decides its costs and
    activation bytes (MoE or dense, attention window). Computed once per model: the search
    asks often."""
    params = tuple(layer_params_split(model, l) for l in range(model.num_layers))
    kinds = tuple((model.is_moe_layer(l), model.window(l)) for l in range(model.num_layers))
    return params, kinds


@lru_cache(maxsize=32)
def _prefix_tables(model: ModelSpec) -> tuple[list[float], list[float], dict[tuple, list[int]],
                                               dict[tuple, int]]:
    """Prefix sums over layers of the (non-expert, expert) parameters and of each layer kind's
    count, and a representative layer of each kind: sums over a stage's contiguous layers in
    O(1)."""
    params, kinds = layer_tables(model)
    dense = list(itertools.accumulate((p[0] for p in params), initial=0.0))
    expert = list(itertools.accumulate((p[1] for p in params), initial=0.0))
    counts = {kind: list(itertools.accumulate((k == kind for k in kinds), initial=0))
              for kind in dict.fromkeys(kinds)}
    return dense, expert, counts, {kind: kinds.index(kind) for kind in counts}


def _contiguous(layers: Sequence[int]) -> bool:
    return not layers or layers[-1] - layers[0] == len(layers) - 1


def kind_counts(model: ModelSpec, layers: Sequence[int], lo: int, hi: int
                ) -> list[tuple[tuple, int, int]]:
    """(kind, count, a layer of that kind) for the stage's layers ``layers[lo:hi]``."""
    if hi <= lo:
        return []
    _, _, counts, first = _prefix_tables(model)
    if _contiguous(layers):
        a, b = layers[0] + lo, layers[0] + hi
        return [(kind, c[b] - c[a], first[kind]) for kind, c in counts.items() if c[b] > c[a]]
    kinds = layer_tables(model)[1]
    tally = Counter(kinds[l] for l in layers[lo:hi])
    return [(kind, tally[kind], first[kind]) for kind in counts if tally[kind]]


def stage_params(model: ModelSpec, cfg: TrainingConfig, stage: int,
                 layers: Sequence[int]) -> tuple[float, float]:
    """(non-expert, expert) parameters one GPU of ``stage`` holds, after TP/EP splits; the
    first stage adds the embedding, the last the LM head (unless tied on a single stage)."""
    if layers and _contiguous(layers):
        dense_p, expert_p, _, _ = _prefix_tables(model)
        dense = dense_p[layers[-1] + 1] - dense_p[layers[0]]
        expert = expert_p[layers[-1] + 1] - expert_p[layers[0]]
    else:
        table = layer_tables(model)[0]
        dense = sum(table[l][0] for l in layers)
        expert = sum(table[l][1] for l in layers)
    vocab = model.vocab_size * model.hidden_size
    if stage == 0:
        dense += vocab + model.position_embeddings * model.hidden_size
    if stage == cfg.degrees.pp - 1:
        if not model.tied_embeddings or cfg.degrees.pp > 1:
            dense += vocab
        mtp_dense, mtp_expert = mtp_params(model)
        dense, expert = dense + mtp_dense, expert + mtp_expert
    return dense / cfg.degrees.tp, expert / (cfg.degrees.ep * cfg.degrees.expert_tp)


def mtp_params(model: ModelSpec) -> tuple[float, float]:
    """(non-expert, expert) parameters of the MTP modules, held by the last stage: per module a
    layer of the last layer's kind, two RMSNorms (2h) and the projection M_k (2h x h) (DeepSeek-V3
    report, sec. 2.2; the embedding and output head are shared with the main model)."""
    if not model.mtp_layers:
        return 0.0, 0.0
    h = model.hidden_size
    dense, expert = layer_tables(model)[0][model.num_layers - 1]
    return (model.mtp_layers * (dense + 2 * h + 2 * h * h + h),
            model.mtp_layers * expert)
