"""The reference job's model and batch (:class:`JobShape`), what ``--size plan`` reads from a
plan (:func:`plan_shape_fields`), and what the job runs whatever the plan says
(:data:`IMPLEMENTATION`). Pure data: no torch."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from planner.errors import PlannerError

__all__ = ["GELU_LIKE", "IMPLEMENTATION", "JobShape", "plan_shape_fields", "plan_shares"]


@dataclass(frozen=True)
class JobShape:
    """The model and batch: ``micro_batches`` per DP rank of ``micro_batch`` sequences, or
    with ``shares`` (a plan's unequal DP batch shares) ``shares[r]`` micro-batches on replica
    r. ``ffn`` / ``expert_ffn`` 0 mean ``4 * hidden`` / ``2 * hidden`` (the tiny job's widths)."""

    num_layers: int
    hidden: int = 32
    heads: int = 4
    vocab: int = 128
    ffn: int = 0
    expert_ffn: int = 0
    seq_len: int = 16
    micro_batch: int = 1
    micro_batches: int = 4
    dp: int = 1
    steps: int = 3
    lr: float = 0.05
    seed: int = 0
    moe_layers: tuple[bool, ...] = ()
    num_experts: int = 0
    top_k: int = 0
    shares: tuple[int, ...] = ()  # micro-batches per DP replica; () = micro_batches each

    def __post_init__(self) -> None:
        if not self.ffn:
            object.__setattr__(self, "ffn", 4 * self.hidden)
        if not self.expert_ffn:
            object.__setattr__(self, "expert_ffn", 2 * self.hidden)
        object.__setattr__(self, "shares", tuple(self.shares))
        if self.shares and (len(self.shares) != self.dp or min(self.shares) < 1):
            raise ValueError(f"shares: {self.dp} counts >= 1, one per DP replica, got "
                             f"{self.shares}")

    def replica_micro_batches(self, replica: int) -> int:
        """Micro-batches DP replica ``replica`` runs per step."""
        return self.shares[replica] if self.shares else self.micro_batches

    def first_sequence(self, replica: int) -> int:
        """Index in the global batch of replica ``replica``'s first sequence (replicas take
        consecutive slices in replica order)."""
        return sum(self.replica_micro_batches(r) for r in range(replica)) * self.micro_batch

    @property
    def global_batch(self) -> int:
        return self.first_sequence(self.dp)


# Activations the job runs as exact (erf) GELU, ``F.gelu``: the tanh approximations differ by
# < 1e-3 and cost the same, so a model that names them is built (not bit-for-bit its kernel).
GELU_LIKE = ("gelu", "gelu_new", "gelu_pytorch_tanh")

# What this job runs, whatever the plan's options say (``planner check-run`` predicts the job
# with these): plain fp32 and SGD, gradients all-reduced in one bucket after the backward pass
# (no ZeRO, no overlap), no recompute, no sequence parallelism, SDPA attention, no dropout.
IMPLEMENTATION: Mapping[str, Any] = MappingProxyType({
    "precision": "fp32", "optimizer": "sgd", "zero": 0, "overlap_grad_reduce": False,
    "overlap_param_gather": False, "tp_comm_overlap": False, "sequence_parallel": False,
    "recompute": "none", "attention": "flash", "dropout": False, "zero_bubble": False,
    "seq_slices": 1,
    # with EP: per MoE layer, one fp32 all-reduce over the DP group of a buffer holding every
    # logical expert's gradient (reference_job/ep.py sync_expert_grads), not Megatron's
    # all-reduce of each rank's own experts over the expert-DP group
    "expert_grad_sync": "all-experts-over-dp"})


def _model_problems(m) -> list[str]:
    """Each field of model spec ``m`` that the job cannot build, with what it needs instead."""
    problems = []
    if m.glu:
        problems.append("glu=true (the job needs glu: false, a plain fc1-gelu-fc2 MLP)")
    if m.activation not in GELU_LIKE:
        problems.append(f"activation={m.activation} (the job needs one of {', '.join(GELU_LIKE)})")
    if m.norm != "layernorm":
        problems.append(f"norm={m.norm} (the job needs layernorm)")
    if m.num_kv_heads != m.num_heads:
        problems.append(f"num_kv_heads={m.num_kv_heads} (the job needs num_kv_heads = "
                        f"num_heads = {m.num_heads}: no GQA/MQA)")
    if m.head_dim * m.num_heads != m.hidden_size:
        problems.append(f"head_dim={m.head_dim} (the job needs head_dim * num_heads = "
                        f"hidden_size = {m.hidden_size})")
    if m.mla is not None:
        problems.append("mla set (the job needs plain multi-head attention)")
    if m.sliding_window is not None:
        problems.append(f"sliding_window={m.sliding_window} (the job needs full causal attention)")
    if m.moe is not None and m.moe.num_shared_experts > 0:
        problems.append(f"moe.num_shared_experts={m.moe.num_shared_experts} (the job needs 0)")
    if m.tied_embeddings:
        problems.append("tied_embeddings=true (the job needs an untied head)")
    if m.position_embeddings > 0:
        problems.append(f"position_embeddings={m.position_embeddings} (the job has none: needs 0)")
    if m.mtp_layers > 0:
        problems.append(f"mtp_layers={m.mtp_layers} (the job has no MTP modules: needs 0)")
    return problems


def plan_shape_fields(plan) -> dict[str, int]:
    """The :class:`JobShape` fields of ``--size plan``: the plan's model widths and batch.

    Raises :class:`PlannerError` (one line) when the job cannot build the plan's model exactly
    (see :mod:`planner.run.reference_job`); bias flags are not checked."""
    m = plan.model_spec()
    problems = _model_problems(m)
    if problems:
        raise PlannerError(f"--size plan: the reference job cannot build model '{m.name}' "
                           f"exactly: {'; '.join(problems)} (use --size tiny, or a model file "
                           "without these)")
    return {"hidden": m.hidden_size, "heads": m.num_heads, "ffn": m.ffn_hidden_size,
            "vocab": m.vocab_size, "expert_ffn": m.moe.expert_ffn_hidden if m.moe else 0,
            "seq_len": plan.workload().seq_len, "micro_batch": plan.config["micro_batch"],
            # global_batch // (dp * micro_batch), the plan's gradient-accumulation steps
            "micro_batches": plan.micro_batches}


def plan_shares(plan) -> tuple[int, ...]:
    """The plan's unequal DP batch shares (``Plan.replica_micro_batches``), () when equal: the
    job runs them whatever ``--size`` says, since they are the plan's decision."""
    shares = plan.replica_micro_batches()
    return tuple(shares) if len(set(shares)) > 1 else ()
