"""The space of parallel configurations: generators that yield only consistent choices.

Pure integer logic, no cost model (see ``planner.training.search`` for the evaluation). Each generator
yields candidates that satisfy the divisibility rules of Megatron-LM, so nothing is built only
to be filtered out afterwards (calculon's ``get_all_tensor_parallelisms`` does the same):

* tensor parallel ``tp`` divides the attention heads, is a divisor or multiple of the KV heads
  (MLA: any divisor) and stays inside one NVLink domain (``max_tp``);
* context parallel ``cp`` divides the sequence and keeps at least ``min_cp_tokens`` tokens per
  rank (ring attention needs enough work per step to hide the KV exchange);
* pipeline parallel ``pp`` is at most the layer count; ``dp`` fills the GPUs and divides the
  global batch;
* expert parallel ``ep`` divides the routed experts and, with the expert TP ``etp`` (1 or
  ``tp``: MoE parallel folding), divides the ``tp*cp*dp`` ranks of a stage;
* interleaving ``vpp``: ``pp*vpp`` model chunks of equal size, or with the first and/or last
  chunk one layer short (the embedding and the loss take their place: Megatron's
  ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``);
  Megatron's interleaved schedule needs the micro-batch count to be a multiple of ``pp``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from cost_models.parallel import Degrees

MICRO_BATCHES = (1, 2, 4, 8)
MAX_VPP = 8


@dataclass(frozen=True)
class SpaceLimits:
    """What bounds the space: the model's shape, the workload and the cluster."""

    num_gpus: int
    num_heads: int
    num_kv_heads: int
    num_layers: int
    num_experts: int  # routed experts; 0 for a dense model
    global_batch: int
    seq_len: int
    max_tp: int  # GPUs of one NVLink domain (capped by the caller)
    mla: bool = False
    min_cp_tokens: int = 4096
    max_pp: int = 128
    max_ep: int = 256


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n``, ascending."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def tensor_parallel_sizes(lim: SpaceLimits) -> list[int]:
    """TP sizes that split heads evenly and keep KV heads whole or evenly split."""
    def kv_ok(t: int) -> bool:
        return lim.mla or lim.num_kv_heads % t == 0 or t % lim.num_kv_heads == 0
    return [t for t in divisors(lim.num_heads)
            if t <= lim.max_tp and lim.num_gpus % t == 0 and kv_ok(t)]


def context_parallel_sizes(lim: SpaceLimits) -> list[int]:
    """CP sizes dividing the sequence with at least ``min_cp_tokens`` tokens per rank."""
    return [c for c in divisors(lim.seq_len)
            if c == 1 or (lim.seq_len // c >= lim.min_cp_tokens and (c & (c - 1)) == 0)]


def expert_choices(lim: SpaceLimits, tp: int, stage_ranks: int) -> list[tuple[int, int]]:
    """(ep, etp) pairs: ep divides the experts, ep*etp divides a stage's tp*cp*dp ranks."""
    if lim.num_experts == 0:
        return [(1, tp)]
    etps = sorted({1, tp})
    return [(e, t) for t in etps for e in divisors(lim.num_experts)
            if e <= lim.max_ep and stage_ranks % (e * t) == 0]


def degree_tuples(lim: SpaceLimits) -> Iterator[Degrees]:
    """Every consistent (tp, cp, pp, dp, ep, etp), smallest tp first."""
    for tp in tensor_parallel_sizes(lim):
        for cp in context_parallel_sizes(lim):
            if lim.num_gpus % (tp * cp):
                continue
            for pp in divisors(lim.num_gpus // (tp * cp)):
                dp = lim.num_gpus // (tp * cp * pp)
                if pp > min(lim.num_layers, lim.max_pp) or lim.global_batch % dp:
                    continue
                for ep, etp in expert_choices(lim, tp, tp * cp * dp):
                    yield Degrees(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp)


def micro_batch_sizes(lim: SpaceLimits, dp: int) -> list[int]:
    """Micro-batch sizes that divide each data-parallel rank's share of the batch."""
    per_rank = lim.global_batch // dp
    return [b for b in MICRO_BATCHES if per_rank % b == 0]


def vpp_sizes(num_layers: int, pp: int, micro_batches: int) -> list[int]:
    """Model chunks per stage for the interleaved schedule (see module docstring); 1 first."""
    if pp == 1 or micro_batches % pp:
        return [1]
    sizes = [1]
    for v in range(2, MAX_VPP + 1):
        chunks = pp * v
        if chunks <= num_layers + 2 and any((num_layers + short) % chunks == 0
                                            for short in (0, 1, 2)):
            sizes.append(v)
    return sizes
