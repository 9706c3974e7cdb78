"""A training workload and one parallel configuration of it, checked for consistency.

Degrees follow Megatron-LM: world = tp * cp * dp * pp; the expert layers fold the same
tp * cp * dp ranks into etp * ep * edp (MoE parallel folding, Megatron-Core MoE docs), so
``ep * etp`` must divide ``tp * cp * dp``.
"""
from __future__ import annotations

from dataclasses import dataclass

RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp16", "fp8", "fp32")
OPTIMIZERS = ("adam", "sgd")
ATTENTION = ("flash", "unfused")


class ConfigError(ValueError):
    """A configuration that does not fit the model, workload or cluster; names the option."""

    def __init__(self, option: str, expected: str, got: object) -> None:
        self.option, self.expected, self.got = option, expected, got
        super().__init__(f"{option}: expected {expected}, got {got!r}")


@dataclass(frozen=True)
class Workload:
    """What is trained: sequence length, global batch in sequences, precision, optimizer.

    ``precision``: bf16/fp16/fp8 are mixed precision (2-byte activations and weights, fp32 main
    gradients and master weights); fp32 trains in plain fp32 (4-byte everything, no master copy),
    as a plain-torch job on CPU does. ``optimizer``: adam (two fp32 moments) or sgd (none).
    """

    seq_len: int
    global_batch: int
    precision: str = "bf16"
    optimizer: str = "adam"

    def __post_init__(self) -> None:
        if self.seq_len < 1 or self.global_batch < 1:
            raise ValueError(f"seq_len={self.seq_len} and global_batch={self.global_batch} "
                             "must be >= 1")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision '{self.precision}' must be one of {PRECISIONS}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer '{self.optimizer}' must be one of {OPTIMIZERS}")

    @property
    def elem_bytes(self) -> int:
        """Bytes of one activation or weight element: 4 in fp32, else 2 (bf16/fp16 storage)."""
        return 4 if self.precision == "fp32" else 2

    @property
    def state_bytes_per_param(self) -> tuple[int, int, int]:
        """(weights, gradients, optimizer) bytes per parameter.

        Mixed precision (Megatron-LM ``docs/source/api-guide/dist_optimizer.md``): 2-byte
        weights, 4-byte fp32 main gradients, and fp32 master weights (4) plus Adam's two moments
        (8). Plain fp32: 4-byte weights and gradients, the weights are the master copy, so only
        Adam's moments (8) remain; SGD without momentum keeps no state.
        """
        master = 0 if self.precision == "fp32" else 4
        moments = 8 if self.optimizer == "adam" else 0
        return self.elem_bytes, 4, master + moments

    @property
    def optimizer_bytes_per_param(self) -> int:
        """HBM bytes the optimizer step moves per parameter (memory bound).

        Fused Adam, mixed precision: read fp32 p, m, v, g (16), write p, m, v (12), write the
        2-byte copy (2) = 30. SGD: read p and g, write p (12), plus the 2-byte copy when mixed.
        """
        if self.optimizer == "adam":
            return 28 + (2 if self.precision != "fp32" else 0)
        return 12 + (2 if self.precision != "fp32" else 0)

    @property
    def tokens(self) -> int:
        return self.seq_len * self.global_batch


@dataclass(frozen=True)
class ParallelConfig:
    """One way to cut the work. ``etp=None`` means expert TP equals attention TP.

    ``zero``: 0 = plain data parallel, 1 = distributed optimizer (optimizer states sharded),
    2 = also gradients, 3 = also weights (FSDP). ``attention``: ``flash`` (fused, no s^2
    activations) or ``unfused`` (Megatron's 2021 softmax kernels, Korthikanti et al. 2022).
    The overlap flags are the Megatron options of the same names. ``recompute="selective"``
    recomputes what is cheap and large: with unfused attention the attention core (Korthikanti
    et al. 2022, sec. 5); with flash attention, which keeps no s^2 tensors, the norms and
    activation functions (Megatron-Core ``--recompute-modules layernorm mlp moe_act``).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    vpp: int = 1
    micro_batch: int = 1
    recompute: str = "none"
    recompute_layers: int | None = None  # with full recompute: layers per stage (None: all)
    sequence_parallel: bool = False
    zero: int = 1
    attention: str = "flash"
    dropout: bool = False
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: bool = False
    moe_imbalance: float = 1.0  # busiest / average expert load (1.0 = forced balance)
    zero_bubble: bool = False  # ZB-H1 schedule (Qi et al. 2023): 1F1B with weight grads deferred
    stage_layer_counts: tuple[int, ...] | None = None  # layers per stage (None: even split)
    seq_slices: int = 1  # SlimPipe (Li et al. 2025): micro-batches cut into k sequence slices

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.etp is not None and self.etp < 1:
            raise ValueError(f"etp={self.etp} must be >= 1")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute '{self.recompute}' must be one of {RECOMPUTE}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero={self.zero} must be 0, 1, 2 or 3")
        if self.attention not in ATTENTION:
            raise ValueError(f"attention '{self.attention}' must be one of {ATTENTION}")
        if self.moe_imbalance < 1.0:
            raise ValueError(f"moe_imbalance={self.moe_imbalance} must be >= 1 (busiest/average)")
        if (self.tp * self.cp * self.dp) % (self.ep * self.expert_tp):
            raise ConfigError("--ep/--etp", f"ep*etp dividing tp*cp*dp = {self.tp}*{self.cp}*"
                              f"{self.dp} (MoE parallel folding)", f"{self.ep}*{self.expert_tp}")
        if self.vpp > 1 and self.pp == 1:
            raise ConfigError("--vpp", "1 without pipeline parallelism (pp = 1)", self.vpp)
        if self.seq_slices < 1:
            raise ValueError(f"seq_slices={self.seq_slices} must be >= 1")
        if self.seq_slices > 1 and (self.pp == 1 or self.vpp > 1 or self.zero_bubble):
            raise ConfigError("--seq-slices", "1 unless the schedule is plain 1F1B with pp > 1 "
                              "(SlimPipe slices 1F1B micro-batches)", self.seq_slices)
        if self.zero_bubble and self.vpp > 1:
            raise ConfigError("--schedule", "zb-h1 only with vpp = 1", self.vpp)
        if self.stage_layer_counts is not None:
            if self.vpp > 1:
                raise ConfigError("stage_layer_counts", "an even split (none) with vpp > 1",
                                  self.stage_layer_counts)
            if len(self.stage_layer_counts) != self.pp or min(self.stage_layer_counts) < 0:
                raise ConfigError("stage_layer_counts", f"{self.pp} counts >= 0, one per stage",
                                  self.stage_layer_counts)

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        return self.tp * self.cp * self.dp // (self.ep * self.expert_tp)

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    def micro_batches(self, workload: Workload) -> int:
        """Micro-batches per pipeline per step (gradient-accumulation steps)."""
        return workload.global_batch // (self.dp * self.micro_batch)

    @property
    def schedule(self) -> str:
        """Pipeline schedule: ``zb-h1``, ``interleaved-1f1b`` (vpp > 1), ``slimpipe`` (1F1B over
        sequence slices) or ``1f1b``."""
        if self.zero_bubble:
            return "zb-h1"
        if self.seq_slices > 1:
            return "slimpipe"
        return "interleaved-1f1b" if self.vpp > 1 else "1f1b"


def _divides(option: str, value: int, what: str, total: int) -> None:
    if total % value:
        raise ConfigError(option, f"a divisor of {what} ({total})", value)


def check_config(model, workload: Workload, config: ParallelConfig, num_gpus: int) -> None:
    """Raise :class:`ConfigError` naming the first option inconsistent with the others.

    ``model`` is a :class:`cost_models.model_spec.ModelSpec` (untyped here to keep imports flat).
    """
    if config.num_gpus != num_gpus:
        raise ConfigError("--tp/--pp/--dp/--cp", f"tp*pp*dp*cp equal to the cluster's "
                          f"{num_gpus} GPUs", f"{config.tp}*{config.pp}*{config.dp}*{config.cp}"
                          f" = {config.num_gpus}")
    _divides("--tp", config.tp, "attention heads", model.num_heads)
    if model.mla is None and model.num_kv_heads % config.tp and config.tp % model.num_kv_heads:
        raise ConfigError("--tp", f"a divisor or multiple of the KV heads ({model.num_kv_heads})",
                          config.tp)
    if model.num_layers + 2 < config.pp * config.vpp:  # embedding and loss may be own chunks
        raise ConfigError("--pp/--vpp", f"pp*vpp <= layers + 2 ({model.num_layers + 2})",
                          config.pp * config.vpp)
    if (config.stage_layer_counts is not None
            and sum(config.stage_layer_counts) != model.num_layers):
        raise ConfigError("stage_layer_counts", f"counts summing to the {model.num_layers} "
                          "layers", config.stage_layer_counts)
    _divides("--cp", config.cp, "the sequence length", workload.seq_len)
    if config.seq_slices > 1:
        _divides("--seq-slices", config.cp * config.seq_slices, "the sequence length (cp * "
                 "slices)", workload.seq_len)
    if config.sequence_parallel and (workload.seq_len // (config.cp * config.seq_slices)
                                     ) % config.tp:
        raise ConfigError("--sequence-parallel", f"tokens per CP rank and slice "
                          f"({workload.seq_len // (config.cp * config.seq_slices)}) divisible "
                          f"by tp ({config.tp})", workload.seq_len)
    if workload.global_batch % (config.dp * config.micro_batch):
        raise ConfigError("--global-batch", f"a multiple of dp*micro_batch = "
                          f"{config.dp}*{config.micro_batch}", workload.global_batch)
    if config.vpp > 1 and config.micro_batches(workload) % config.pp:
        raise ConfigError("--vpp", f"micro-batches ({config.micro_batches(workload)}) a multiple "
                          f"of pp ({config.pp}) for the interleaved schedule", config.vpp)
    if config.ep > 1 and not model.is_moe:
        raise ConfigError("--ep", "1 for a dense model", config.ep)
    if model.is_moe:
        _divides("--ep", config.ep, "the routed experts", model.moe.num_experts)
    if config.sequence_parallel and config.tp == 1:
        raise ConfigError("--sequence-parallel", "tp > 1", config.tp)
