"""The facts of a plan that the emitters use, checked once.

A plan file is user input: every field an emitter writes is checked here for type and
consistency (a plan edited by hand may hold a string where a degree belongs, a node table
out of order, or host names with shell metacharacters). Host names and the other free-text
values are *not* restricted here beyond being representable text; each emitter quotes them
for its own syntax (shell, YAML, TOML, JSON).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.emit._nccl import FabricNode, fabric_notes, fabric_of
from planner.plan.document import Plan

if TYPE_CHECKING:  # annotations only: the objects come from the Plan's accessors
    from cost_models.model_spec import ModelSpec
    from cost_models.training.config import TrainingConfig, Workload

_INT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "seq_slices")
_BOOL_FIELDS = ("sequence_parallel", "dropout", "overlap_grad_reduce", "overlap_param_gather",
                "tp_comm_overlap", "zero_bubble")
_MODEL_INTS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
               "ffn_hidden_size", "vocab_size", "position_embeddings", "mtp_layers")
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Node:
    """One torchrun node: its node rank, host name, GPU count and first global rank."""

    rank: int
    host: str
    gpus: int
    first_rank: int


@dataclass(frozen=True)
class Facts:
    """What the emitters read from a plan, validated.

    ``chunk_layers`` lists the decoder layers of every model chunk in virtual-stage order
    (chunk ``j = v * pp + s`` is virtual stage ``v`` of pipeline stage ``s``, Megatron's
    interleaved assignment); with ``vpp == 1`` it is the per-stage layer count.
    ``fabric``: each node's NCCL settings, in node-rank order (None when the plan has no
    fabric section, :mod:`planner.emit._nccl`); ``fabric_notes`` describe them.
    """

    nodes: tuple[Node, ...]
    cfg: TrainingConfig
    model: ModelSpec
    workload: Workload
    micro_batches: int
    chunk_layers: tuple[int, ...]
    schedule: str
    inputs_hash: str
    fabric: tuple[FabricNode, ...] | None = None
    fabric_notes: tuple[str, ...] = ()

    @property
    def stage_layers(self) -> tuple[int, ...]:
        """Decoder layers per pipeline stage (all of its chunks)."""
        pp = self.cfg.degrees.pp
        return tuple(sum(self.chunk_layers[s::pp]) for s in range(pp))

    @property
    def master(self) -> Node:
        return self.nodes[0]

    @property
    def uniform_gpus(self) -> int | None:
        """The GPUs per node when every node has the same count, else None."""
        counts = {n.gpus for n in self.nodes}
        return counts.pop() if len(counts) == 1 else None


def check_text(what: str, value: Any) -> str:
    """``value`` if it is a string that every output format can carry, else ValueError.

    NUL cannot appear in a shell word, an argv entry or a Kubernetes string, and a lone UTF-16
    surrogate cannot be written as UTF-8; both are refused. Everything else (quotes, ``$``,
    backquotes, newlines, ...) is allowed and quoted by the emitters.
    """
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a string, got {type(value).__name__}")
    if "\x00" in value:
        raise ValueError(f"{what}: NUL characters cannot be passed to a launcher: {value!r}")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise ValueError(f"{what}: lone surrogate characters are not text: {value!r}")
    return value


DP_SHARES_NOTE = ("The plan gives data-parallel replicas unequal micro-batch counts per step "
                  "(dp_shares: {counts}); {framework} cannot express that: these settings run "
                  "{m} micro-batches on every replica, slower than the plan predicts. A custom "
                  "loop can read its replica's count from planner.runtime "
                  "(replica_micro_batches) and weight its loss by tokens.")


SLIMPIPE_NOTE = ("SlimPipe ({k} sequence slices per micro-batch, Li et al. 2025) is not in "
                 "{framework}: these settings run plain 1F1B, which keeps more micro-batches' "
                 "activations in flight than the plan's memory figure and a larger bubble than "
                 "its predicted step time; check memory before launching.")


def comment_safe(value: str) -> str:
    """``value`` as one line of printable ASCII (a JSON string literal), safe inside a comment
    of any of the emitted formats: no newline can end the comment early."""
    return json.dumps(value, ensure_ascii=True)


def _int(what: str, value: Any, low: int = 0) -> int:
    if type(value) is not int or value < low:
        raise ValueError(f"plan: {what} must be an integer >= {low}, got {value!r}")
    return value


def _nodes(plan: Plan) -> tuple[Node, ...]:
    if not isinstance(plan.nodes, list) or not plan.nodes:
        raise ValueError("plan: nodes must be a non-empty list")
    nodes, first = [], 0
    for i, row in enumerate(plan.nodes):
        if not isinstance(row, dict):
            raise ValueError(f"plan: nodes[{i}] must be an object")
        rank = _int(f"nodes[{i}].node_rank", row.get("node_rank"))
        if rank != i:
            raise ValueError(f"plan: nodes must be listed in node-rank order; nodes[{i}] has "
                             f"node_rank {rank}")
        host = check_text(f"plan: nodes[{i}].host", row.get("host"))
        if not host:
            raise ValueError(f"plan: nodes[{i}].host must not be empty")
        gpus = _int(f"nodes[{i}].gpus", row.get("gpus"), 1)
        if _int(f"nodes[{i}].first_rank", row.get("first_rank")) != first:
            raise ValueError(f"plan: nodes[{i}].first_rank must be {first} (the GPUs of the "
                             f"nodes before it), got {row.get('first_rank')!r}")
        nodes.append(Node(rank, host, gpus, first))
        first += gpus
    hosts = [n.host for n in nodes]
    dupes = sorted({h for h in hosts if hosts.count(h) > 1})
    if dupes:
        raise ValueError(f"plan: host names must be unique; repeated: {dupes}")
    return tuple(nodes)


def dp_shares_note(f: "Facts", framework: str) -> str:
    """The note for a plan with unequal DP batch shares (:data:`DP_SHARES_NOTE`)."""
    return DP_SHARES_NOTE.format(counts=", ".join(map(str, sorted(set(f.cfg.dp_shares)))),
                                 framework=framework, m=f.micro_batches)


def _config(plan: Plan) -> TrainingConfig:
    raw = plan.config
    if not isinstance(raw, dict):
        raise ValueError("plan: config must be an object")
    for name in _INT_FIELDS:
        _int(f"config.{name}", raw.get(name), 0)
    for name in _BOOL_FIELDS:
        if type(raw.get(name)) is not bool:
            raise ValueError(f"plan: config.{name} must be true or false, got {raw.get(name)!r}")
    for name in ("etp", "recompute_layers"):
        if raw.get(name) is not None:
            _int(f"config.{name}", raw.get(name), 1)
    shares = raw.get("dp_shares")
    if shares is not None:
        if not isinstance(shares, list):
            raise ValueError("plan: config.dp_shares must be a list or absent")
        for i, c in enumerate(shares):
            _int(f"config.dp_shares[{i}]", c, 1)
    counts = raw.get("stage_layer_counts")
    if counts is not None:
        if not isinstance(counts, list):
            raise ValueError("plan: config.stage_layer_counts must be a list or null")
        for i, c in enumerate(counts):
            _int(f"config.stage_layer_counts[{i}]", c)
    try:
        return plan.parallel_config()
    except (TypeError, ValueError) as err:
        raise ValueError(f"plan: config: {err}") from None


def _model(plan: Plan) -> ModelSpec:
    raw = plan.inputs.get("model") if isinstance(plan.inputs, dict) else None
    if not isinstance(raw, dict):
        raise ValueError("plan: inputs.model must be an object")
    check_text("plan: inputs.model.name", raw.get("name"))
    for name in _MODEL_INTS:
        _int(f"inputs.model.{name}", raw.get(name))
    moe = raw.get("moe")
    if moe is not None:
        if not isinstance(moe, dict):
            raise ValueError("plan: inputs.model.moe must be an object or null")
        for name in ("num_experts", "top_k", "expert_ffn_hidden", "num_shared_experts",
                     "shared_ffn_hidden"):
            _int(f"inputs.model.moe.{name}", moe.get(name, 0))
    mla = raw.get("mla")
    if mla is not None:
        if not isinstance(mla, dict):
            raise ValueError("plan: inputs.model.mla must be an object or null")
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _int(f"inputs.model.mla.{name}", mla.get(name))
        if mla.get("q_lora_rank") is not None:
            _int("inputs.model.mla.q_lora_rank", mla.get("q_lora_rank"))
    try:
        return plan.model_spec()
    except (TypeError, ValueError) as err:
        raise ValueError(f"plan: inputs.model: {err}") from None


def _workload(plan: Plan) -> Workload:
    raw = plan.inputs.get("workload") if isinstance(plan.inputs, dict) else None
    if not isinstance(raw, dict):
        raise ValueError("plan: inputs.workload must be an object")
    _int("inputs.workload.seq_len", raw.get("seq_len"), 1)
    _int("inputs.workload.global_batch", raw.get("global_batch"), 1)
    try:
        return plan.workload()
    except (TypeError, ValueError) as err:
        raise ValueError(f"plan: inputs.workload: {err}") from None


def _chunk_layers(plan: Plan, cfg: TrainingConfig, num_layers: int) -> tuple[int, ...]:
    stages = plan.stages
    if not isinstance(stages, list) or len(stages) != cfg.degrees.pp:
        raise ValueError(f"plan: stages must list the {cfg.degrees.pp} pipeline stages")
    runs: dict[int, tuple[int, int]] = {}
    for s, stage in enumerate(stages):
        chunks = stage.get("chunks") if isinstance(stage, dict) else None
        if not isinstance(chunks, list) or len(chunks) != cfg.vpp:
            raise ValueError(f"plan: stages[{s}].chunks must hold {cfg.vpp} [first, count] pairs")
        for v, run in enumerate(chunks):
            if not (isinstance(run, list) and len(run) == 2):
                raise ValueError(f"plan: stages[{s}].chunks[{v}] must be [first, count]")
            runs[v * cfg.degrees.pp + s] = (_int(f"stages[{s}].chunks[{v}][0]", run[0]),
                                    _int(f"stages[{s}].chunks[{v}][1]", run[1]))
    nxt, counts = 0, []
    for j in range(cfg.degrees.pp * cfg.vpp):
        first, count = runs[j]
        if first != nxt:
            raise ValueError(f"plan: model chunk {j} starts at layer {first}, expected {nxt} "
                             "(chunks must cover the layers in virtual-stage order)")
        counts.append(count)
        nxt += count
    if nxt != num_layers:
        raise ValueError(f"plan: the stages hold {nxt} layers, the model has {num_layers}")
    return tuple(counts)


def facts_of(plan: Plan) -> Facts:
    """The validated :class:`Facts` of ``plan``; ValueError names the first bad field."""
    if not isinstance(plan, Plan):
        raise ValueError(f"expected a Plan, got {type(plan).__name__}")
    cfg, model, workload = _config(plan), _model(plan), _workload(plan)
    nodes = _nodes(plan)
    total = sum(n.gpus for n in nodes)
    if total != cfg.degrees.num_gpus:
        raise ValueError(f"plan: the nodes hold {total} GPUs but tp*cp*dp*pp = {cfg.degrees.num_gpus}")
    micro_batches = _int("micro_batches", plan.micro_batches, 1)
    if workload.global_batch != cfg.micro_batch * cfg.degrees.dp * micro_batches:
        raise ValueError(f"plan: global batch {workload.global_batch} != micro_batch "
                         f"{cfg.micro_batch} x dp {cfg.degrees.dp} x micro_batches {micro_batches}")
    if plan.schedule != cfg.schedule:
        raise ValueError(f"plan: schedule {plan.schedule!r} does not match the config "
                         f"({cfg.schedule!r})")
    digest = plan.inputs_hash
    if not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
        raise ValueError(f"plan: inputs_hash must be 64 lowercase hex digits, got {digest!r}")
    chunks = _chunk_layers(plan, cfg, model.num_layers)
    fabric = fabric_of(plan)
    if fabric is not None and [(n.rank, n.host) for n in fabric] != [(n.rank, n.host)
                                                                      for n in nodes]:
        raise ValueError("plan: fabric.nodes must list the plan's nodes in node-rank order")
    return Facts(nodes, cfg, model, workload, micro_batches, chunks, plan.schedule, digest,
                 fabric, tuple(fabric_notes(fabric, plan.fabric)))


def degrees_line(f: Facts) -> str:
    """One line summing up the parallel layout (numbers only)."""
    c = f.cfg
    return (f"{len(f.nodes)} nodes, {c.degrees.num_gpus} GPUs: tp={c.degrees.tp} pp={c.degrees.pp} dp={c.degrees.dp} cp={c.degrees.cp} "
            f"ep={c.degrees.ep} etp={c.degrees.expert_tp} vpp={c.vpp}; schedule {f.schedule}; micro-batch "
            f"{c.micro_batch} x {f.micro_batches} micro-batches, global batch "
            f"{f.workload.global_batch}, seq {f.workload.seq_len}, {f.workload.precision}; "
            f"zero={c.zero}, recompute={c.recompute}")


def header_lines(f: Facts, fmt: str) -> tuple[str, ...]:
    """The header every emitted text file starts with (without comment markers)."""
    from planner import __version__
    return (f"Generated by planner {__version__} (planner emit {fmt}). Do not edit by hand: "
            "change the plan and re-run planner emit.",
            f"plan inputs_hash: {f.inputs_hash}",
            f"model: {comment_safe(f.model.name)}",
            degrees_line(f))
