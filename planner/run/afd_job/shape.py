"""The AFD decode job's model and batch (:class:`AfdShape`) and what it reads from a plan
(:func:`afd_shape`). Pure data: no torch."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from planner.errors import PlannerError
from planner.run.runtime import afd_role, afd_world

__all__ = ["MAX_EXPERTS", "MAX_LAYERS", "MAX_SHARED", "MAX_TOP_K", "TINY", "AfdShape",
           "afd_shape", "sample_layers"]

MAX_LAYERS = 4  # the plan's layer pattern, sampled down to this many layers
MAX_EXPERTS = 8  # routed experts (at least one per FFN rank: more when the FFN pool is wider)
MAX_TOP_K = 2
MAX_SHARED = 1
TINY: Mapping[str, int] = {"hidden": 64, "heads": 4, "vocab": 128, "batch": 8, "context": 16,
                           "steps": 4}


@dataclass(frozen=True)
class AfdShape:
    """The job's model (fp32, seeded) and work: ``batch`` sequences per attention rank, each a
    ``context``-token seeded prompt (the prefill: its first token), then ``steps`` greedy
    decode steps. Per MoE layer every
    attention rank cuts its batch into ``micro_batches`` micro-batches (sizes differ by at most
    one). ``attention_ranks`` / ``ffn_ranks``: the whole decode world (all units)."""

    moe_layers: tuple[bool, ...]
    num_experts: int
    top_k: int
    attention_ranks: int
    ffn_ranks: int
    micro_batches: int
    shared_experts: int = 0
    hidden: int = 64
    heads: int = 4
    vocab: int = 128
    batch: int = 8
    context: int = 16
    steps: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "moe_layers", tuple(bool(x) for x in self.moe_layers))
        if self.micro_batches < 1 or self.batch < self.micro_batches:
            raise PlannerError(f"--batch {self.batch} must be >= the micro-batches "
                               f"({self.micro_batches}) and micro-batches >= 1")
        if min(self.context, self.steps, self.hidden, self.heads, self.vocab) < 1:
            raise PlannerError("context, steps, hidden, heads and vocab must be >= 1")
        if self.hidden % self.heads:
            raise PlannerError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        if not 1 <= self.top_k <= self.num_experts:
            raise PlannerError(f"top-k {self.top_k} must be within 1..{self.num_experts} experts")

    @property
    def num_layers(self) -> int:
        return len(self.moe_layers)

    @property
    def moe_layer_ids(self) -> tuple[int, ...]:
        return tuple(i for i, moe in enumerate(self.moe_layers) if moe)

    @property
    def sequences(self) -> int:
        """Sequences of the whole world (``batch`` on each attention rank)."""
        return self.attention_ranks * self.batch

    @property
    def max_len(self) -> int:
        """KV cache length: the prompt, then one token per decode step (the prefill's token
        is the first step's input; the last step's token is never fed back)."""
        return self.context + self.steps

    def micro_batch_rows(self) -> tuple[tuple[int, int], ...]:
        """``(start, stop)`` of each micro-batch in an attention rank's batch."""
        base, extra = divmod(self.batch, self.micro_batches)
        out, start = [], 0
        for j in range(self.micro_batches):
            stop = start + base + (j < extra)
            out.append((start, stop))
            start = stop
        return tuple(out)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["moe_layers"] = list(self.moe_layers)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AfdShape":
        return cls(**{**d, "moe_layers": tuple(d["moe_layers"])})


def sample_layers(moe_layers: tuple[bool, ...], cap: int = MAX_LAYERS) -> tuple[bool, ...]:
    """The plan's dense/MoE layer pattern on at most ``cap`` layers: every layer when there
    are few enough, else ``cap`` evenly spaced ones (first and last kept, so DeepSeek-V3's
    leading dense layers stay in front); at least one MoE layer."""
    n = len(moe_layers)
    if n <= cap:
        picked = list(moe_layers)
    else:
        picked = [moe_layers[round(i * (n - 1) / (cap - 1))] for i in range(cap)]
    if not any(picked):
        picked[-1] = True
    return tuple(bool(x) for x in picked)


def afd_shape(plan, overrides: Mapping[str, Any]) -> AfdShape:
    """The job's shape for AFD plan ``plan`` with ``overrides`` (``batch``, ``context``,
    ``steps``, ``micro_batches``, ``hidden``, ...); :class:`PlannerError` for a plan it
    cannot run (not AFD, a dense model, attention TP > 1)."""
    A, F = afd_world(plan)
    role = afd_role(plan, 0)
    if role.attention_tp != 1:
        raise PlannerError(f"the AFD reference job runs attention TP 1 only; this plan's "
                           f"attention instances have tp={role.attention_tp} (attention TP "
                           "is not implemented in planner.run.afd_job)")
    model = plan.model_spec()
    if model.moe is None:
        raise PlannerError(f"model {model.name} is dense: AFD decode needs an MoE model")
    per_unit = len(afd_role(plan, A).ffn_ranks)  # FFN ranks of a unit: each holds an expert
    experts = min(model.moe.num_experts, max(MAX_EXPERTS, per_unit))
    fields = {"moe_layers": sample_layers(tuple(model.moe_layers)), "num_experts": experts,
              "top_k": min(model.moe.top_k, MAX_TOP_K, experts), "attention_ranks": A,
              "ffn_ranks": F, "micro_batches": role.micro_batches,
              "shared_experts": min(model.moe.num_shared_experts, MAX_SHARED), **TINY}
    return AfdShape(**{**fields, **{k: v for k, v in overrides.items() if v is not None}})
