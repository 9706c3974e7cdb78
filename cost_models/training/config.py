"""A training workload and one training configuration of it (degrees plus training options),
checked for consistency with the model.

:class:`TrainingConfig` composes the shared :class:`~cost_models.parallel.Degrees` with the
options only training has (micro-batch, recompute, ZeRO, pipeline schedule, overlap flags).
Errors name the quantity (``global_batch``, ``vpp``), not a command-line flag.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import cached_property

from cost_models.compute import CUDA_GRAPHS
from cost_models.parallel import (ConfigError, Degrees, check_degrees, divides,
                                  lockstep_replicas)

RECOMPUTE = ("none", "selective", "full")  # Megatron's modes: what --recompute auto searches
RECOMPUTE_MODES = ("none", "selective", "op", "full")  # also torchtitan's per-op checkpointing
PRECISIONS = ("bf16", "fp16", "fp8", "nvfp4", "fp32")
NVFP4_PARAM_BYTES = 2 * (0.5 + 1 / 256)  # Workload.param_bytes
OPTIMIZERS = ("adam", "sgd")
ATTENTION = ("flash", "flash2", "unfused")
MOE_DISPATCHERS = ("alltoall", "flex")
OFFLOAD_MODULES = ("expert_fc1", "moe_act")
# Megatron-Core's selective-recompute submodules (``TransformerConfig.recompute_modules``,
# ``--recompute-modules``; megatron/core/transformer/transformer_config.py): the attention core,
# the routed experts' activation function, the two norms, MLA's up-projections and RoPE, the
# dense MLP, the whole MoE layer and the shared experts
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "moe",
                     "shared_experts")


def default_selective_modules(unfused_attention: bool) -> frozenset[str]:
    """What selective recompute re-runs when no submodule is named: the attention core with
    unfused attention (Korthikanti et al. 2022, sec. 5; Megatron's default), else the norms
    and the routed experts' activation functions (``--recompute-modules layernorm moe_act``)."""
    return frozenset(("core_attn",) if unfused_attention else ("layernorm", "moe_act"))


DEGREE_KEYS = tuple(f.name for f in fields(Degrees))  # the keys of a flat (schema-1) config


@dataclass(frozen=True)
class Workload:
    """What is trained: sequence length, global batch in sequences, precision, optimizer.

    ``precision``: bf16/fp16/fp8/nvfp4 are mixed precision (2-byte activations and weights,
    fp32 main gradients and master weights; fp8 and nvfp4 GEMMs quantise their operands, nvfp4
    keeps 4-bit weights, :attr:`param_bytes`); fp32 trains in plain fp32 (4-byte everything, no
    master copy), as a plain-torch job on CPU does. ``optimizer``: adam (two fp32 moments) or
    sgd (none). fp16 adds dynamic loss scaling (Micikevicius et al. 2018, "Mixed Precision
    Training", sec. 3.2), whose only per-step cost is one pass over the main gradients before
    the optimizer (:attr:`loss_scaling_bytes_per_param`); its memory is that of bf16 (the
    scaler's state is a few scalars).
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
    def low_precision_gemms(self) -> bool:
        """Whether the weight GEMMs run below 16 bits: fp8 (MXFP8, FP8 current or delayed
        scaling) or nvfp4 (TransformerEngine's NVFP4 recipe: the fp8 rate times the GPU's fp4
        over fp8 peak, plus its quantisation passes; ``cost_models.compute``)."""
        return self.precision in ("fp8", "nvfp4")

    @property
    def elem_bytes(self) -> int:
        """Bytes of one activation or weight element: 4 in fp32, else 2 (bf16/fp16 storage)."""
        return 4 if self.precision == "fp32" else 2

    @property
    def param_bytes(self) -> float:
        """Bytes of one model (compute) weight as kept between steps and all-gathered: the
        activations' width, except NVFP4, whose weights stay in 4 bits (Megatron-LM
        ``--fp4-param-gather``: "Keep the compute param in fp4 ... and perform the param
        all-gather in fp4", which Megatron-Bridge's NVFP4 recipe sets, ``bf16_with_nvfp4_mixed``
        in ``training/mixed_precision.py``): E2M1 values with one E4M3 scale per 16 x 16 block
        (TransformerEngine ``NVFP4BlockScaling``), a row-wise and a column-wise copy for the
        forward and the backward GEMMs: 2 x (0.5 + 1/256)."""
        return NVFP4_PARAM_BYTES if self.precision == "nvfp4" else self.elem_bytes

    @property
    def state_bytes_per_param(self) -> tuple[float, int, int]:
        """(weights, gradients, optimizer) bytes per parameter.

        Mixed precision (Megatron-LM ``docs/source/api-guide/dist_optimizer.md``): 2-byte
        weights (:attr:`param_bytes`: 4-bit ones in nvfp4), 4-byte fp32 main gradients, and fp32
        master weights (4) plus Adam's two moments (8). Plain fp32: 4-byte weights and
        gradients, the weights are the master copy, so only Adam's moments (8) remain; SGD
        without momentum keeps no state.
        """
        master = 0 if self.precision == "fp32" else 4
        moments = 8 if self.optimizer == "adam" else 0
        return self.param_bytes, 4, master + moments

    @property
    def loss_scaling_bytes_per_param(self) -> int:
        """HBM bytes fp16's loss scaling moves per parameter and step: unscaling the fp32 main
        gradients and checking them for inf/NaN in one fused pass, read 4 + write 4 (Megatron-LM
        ``MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan``, which calls
        ``torch._amp_foreach_non_finite_check_and_unscale_``); 0 for other precisions. Steps
        skipped on overflow are not counted: with Megatron's defaults (scale x2 after 1,000
        clean steps, ``--loss-scale-window``) about one step in a thousand, once the scale has
        settled, which is below this model's resolution."""
        return 8 if self.precision == "fp16" else 0

    @property
    def optimizer_bytes_per_param(self) -> int:
        """HBM bytes the optimizer step moves per parameter (memory bound).

        Fused Adam, mixed precision: read fp32 p, m, v, g (16), write p, m, v (12), write the
        2-byte copy (2) = 30. SGD: read p and g, write p (12), plus the 2-byte copy when mixed.
        fp16 adds :attr:`loss_scaling_bytes_per_param`. Source: the fused Adam kernel reads
        the parameter, its gradient and both moments and writes back the parameter and the
        moments in one pass (``torch.optim.Adam(fused=True)``, ``_fused_adam``; Apex
        ``FusedAdam``, whose ``multi_tensor_adam`` takes the same four lists), and mixed
        precision then copies the fp32 main parameters to the 2-byte model parameters
        (Megatron-Core ``DistributedOptimizer``, "copy main params to model params").
        """
        mixed = 2 if self.precision != "fp32" else 0
        base = 28 if self.optimizer == "adam" else 12
        return base + mixed + self.loss_scaling_bytes_per_param

    @property
    def tokens(self) -> int:
        return self.seq_len * self.global_batch


@dataclass(frozen=True)
class TrainingConfig:
    """One way to train: the parallel degrees plus the options only training has.

    ``zero``: 0 = plain data parallel, 1 = distributed optimizer (optimizer states sharded),
    2 = also gradients, 3 = also weights (FSDP). ``attention``: ``flash`` (the GPU's native
    fused kernel, no s^2 activations: FlashAttention-2 on Ampere, cuDNN/FlashAttention-3 on
    Hopper and later), ``flash2`` (FlashAttention-2-generation kernels on any GPU, as flash-attn
    2.x and PyTorch SDPA's default backend run on Hopper: slower there,
    :data:`cost_models.compute.FA2_ON_SM90_PLUS`) or ``unfused`` (Megatron's 2021 softmax
    kernels, Korthikanti et al. 2022).
    The overlap flags are the Megatron options of the same names. ``recompute="selective"``
    re-runs Megatron-Core submodules (``recompute_modules``): by default what is cheap and
    large, with unfused attention the attention core (Korthikanti et al. 2022, sec. 5), with
    flash attention, which keeps no s^2 tensors, the norms and the routed experts' activation
    functions (``--recompute-modules layernorm moe_act``).
    ``recompute="op"`` is torchtitan's per-op selective activation checkpointing
    (``selective_ac_option = "op"``): every op's output is recomputed but those of matmuls,
    SDPA and reduce-scatters, and of every second matmul of a block also recomputed
    (``cost_models.training.stage`` ``op_recompute_s``); dense layers with standard attention.
    """

    degrees: Degrees = Degrees()
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
    moe_a2a_overlap: bool = False  # Megatron --overlap-moe-expert-parallel-comm (combined 1F1B)
    # micro-batches per data-parallel replica per step (None: micro_batches() each); unequal
    # shares let replicas on faster GPUs take more of the batch (HexiScale, Cephalo)
    dp_shares: tuple[int, ...] | None = None
    # ZeRO-3 / FSDP with mixed precision: whether a low-precision shard of the weights is kept
    # beside the fp32 master shard (DeepSpeed ZeRO-3, Megatron: True) or the fp32 shard is the
    # only persistent copy and low-precision weights exist only while a unit is gathered
    # (PyTorch FSDP and FSDP2: "outside forward and backward, the sharded parameters are kept
    # in full precision", torch.distributed.fsdp.MixedPrecision docs: False)
    low_precision_shard: bool = True
    # the loss keeps the logits in the compute dtype and writes their gradient in it too
    # (flash-attn's fused cross-entropy, llm-foundry's default ``loss_fn: fused_crossentropy``):
    # 2 x 2 bytes per logit instead of the fp32 logits and their gradient (8)
    fused_cross_entropy: bool = False
    # Megatron's MoE token dispatcher: "alltoall" sends every (token, expert) pair
    # (``MoEAlltoAllTokenDispatcher``); "flex" (DeepEP or HybridEP) sends a token once per
    # destination GPU and, across nodes, once per destination node
    # (:func:`cost_models.communication.dedup_dispatch_s`)
    moe_dispatcher: str = "alltoall"
    # Megatron keeps and reduce-scatters the main gradients in fp32 (True, its default with
    # bf16); False: in the compute dtype (``--grad-reduce-in-bf16``; Megatron-Bridge's
    # performance configs set ``grad_reduce_in_fp32 = False``): half the bytes in memory and on
    # the wire
    grad_reduce_in_fp32: bool = True
    # bytes of each of Adam's two moments: 4 (fp32), or 2 with TransformerEngine's
    # precision-aware optimizer storing them in bf16 (``--use-precision-aware-optimizer
    # --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16``); the fp32 master weights stay
    optimizer_moment_bytes: int = 4
    # what CUDA graphs capture, so that the CPU does not launch it kernel by kernel each
    # micro-batch: "none" (Megatron's default), TransformerEngine per-module graphs over the
    # MoE router and dispatcher preprocessing ("moe_router"; Megatron ``--cuda-graph-impl
    # transformer_engine --cuda-graph-scope moe_router moe_preprocess``) or also attention
    # ("attn+moe_router", ``--cuda-graph-scope attn moe_router moe_preprocess``), or the whole
    # iteration ("full", ``--cuda-graph-impl full_iteration``)
    cuda_graphs: str = "none"
    # activations Megatron keeps on the host between a layer's forward and backward
    # (``--fine-grained-activation-offloading --offload-modules ...``): "expert_fc1", the routed
    # experts' FC1 input, and "moe_act", their activation function's input. Memory only: the
    # copies run on a side stream beside the compute and are not priced in time
    offload_modules: tuple[str, ...] = ()
    # with fp8 GEMMs: the attention core runs in fp8 too (TransformerEngine's FP8 fused
    # attention; Megatron-Core ``TransformerConfig.fp8_dot_product_attention``, which
    # ``pretrain_gpt.py`` has no flag for), cost_models.compute.FP8_ATTENTION_SPEEDUP faster
    fp8_attention: bool = False
    # with MXFP8 on Blackwell: TransformerEngine's fused grouped MLP
    # (``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``; ``transformer_engine/pytorch/ops/fused/
    # grouped_mlp.py``): each expert GEMM of a layer in one grouped CuTe kernel, the activation
    # and its quantisation fused into FC1's, so the routed experts launch a few kernels
    # whatever their number (cost_models.compute.FUSED_GROUPED_MLP_LAUNCHES)
    fused_grouped_mlp: bool = False
    # with fp8/NVFP4 GEMMs: each Linear keeps its input for the backward in the quantised form
    # only (TransformerEngine, ``module/linear.py``; cost_models.training.memory), not in the
    # compute dtype as torchao's float8 does (torchtitan): False
    quantized_saved_inputs: bool = True
    # layers per stage whose activations Megatron moves to the host between forward and
    # backward (``--cpu-offloading --cpu-offloading-num-layers N``; Megatron-Bridge's Llama 3
    # 70B FSDP configs on GB200/GB300): the first N of each stage, double-buffered (one layer's
    # stays). Memory only, like ``offload_modules``: the copies run on a side stream
    offload_layers: int = 0
    # with recompute="selective": the Megatron-Core submodules re-run in the backward
    # (RECOMPUTE_MODULES; ``--recompute-modules``), their outputs not kept. None named: the
    # attention core with unfused attention (Korthikanti et al. 2022, sec. 5; Megatron's
    # default), else the norms and the routed experts' activation functions
    # (:meth:`selective_modules`)
    recompute_modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("vpp", "micro_batch"):
            if getattr(self, name) < 1:
                raise ConfigError(name, ">= 1", getattr(self, name))
        if self.recompute not in RECOMPUTE_MODES:
            raise ConfigError("recompute", f"one of {RECOMPUTE_MODES}", self.recompute)
        if self.zero not in (0, 1, 2, 3):
            raise ConfigError("zero", "0, 1, 2 or 3", self.zero)
        if self.attention not in ATTENTION:
            raise ConfigError("attention", f"one of {ATTENTION}", self.attention)
        if self.optimizer_moment_bytes not in (2, 4):
            raise ConfigError("optimizer_moment_bytes", "4 (fp32) or 2 (bf16)",
                              self.optimizer_moment_bytes)
        if self.moe_dispatcher not in MOE_DISPATCHERS:
            raise ConfigError("moe_dispatcher", f"one of {MOE_DISPATCHERS}", self.moe_dispatcher)
        if not set(self.offload_modules) <= set(OFFLOAD_MODULES):
            raise ConfigError("offload_modules", f"names among {OFFLOAD_MODULES}",
                              self.offload_modules)
        if (not set(self.recompute_modules) <= set(RECOMPUTE_MODULES)
                or len(set(self.recompute_modules)) != len(self.recompute_modules)):
            raise ConfigError("recompute_modules", f"distinct names among {RECOMPUTE_MODULES}",
                              self.recompute_modules)
        if self.recompute_modules and self.recompute != "selective":
            raise ConfigError("recompute_modules", "none unless recompute is 'selective'",
                              self.recompute_modules)
        if self.cuda_graphs not in CUDA_GRAPHS:
            raise ConfigError("cuda_graphs", f"one of {CUDA_GRAPHS}", self.cuda_graphs)
        if self.offload_layers < 0:
            raise ConfigError("offload_layers", ">= 0", self.offload_layers)
        if self.moe_imbalance < 1.0:
            raise ConfigError("moe_imbalance", ">= 1 (busiest/average)", self.moe_imbalance)
        pp = self.degrees.pp
        if self.vpp > 1 and pp == 1:
            raise ConfigError("vpp", "1 without pipeline parallelism (pp = 1)", self.vpp)
        if self.seq_slices < 1:
            raise ConfigError("seq_slices", ">= 1", self.seq_slices)
        if self.seq_slices > 1 and (pp == 1 or self.vpp > 1 or self.zero_bubble):
            raise ConfigError("seq_slices", "1 unless the schedule is plain 1F1B with pp > 1 "
                              "(SlimPipe slices 1F1B micro-batches)", self.seq_slices)
        # Megatron-LM validate_args for --overlap-moe-expert-parallel-comm: interleaved schedule
        # when pipelined, no full recompute
        if self.moe_a2a_overlap and ((pp > 1 and self.vpp == 1) or self.recompute == "full"):
            raise ConfigError("moe_a2a_overlap", "off with full recompute, and with pp > 1 "
                              "unless vpp > 1 (Megatron's combined 1F1B)", True)
        if self.zero_bubble and self.vpp > 1:
            raise ConfigError("vpp", "1 with the zb-h1 schedule", self.vpp)
        if self.stage_layer_counts is not None:
            if self.vpp > 1:
                raise ConfigError("stage_layer_counts", "an even split (none) with vpp > 1",
                                  self.stage_layer_counts)
            if len(self.stage_layer_counts) != pp or min(self.stage_layer_counts) < 0:
                raise ConfigError("stage_layer_counts", f"{pp} counts >= 0, one per stage",
                                  self.stage_layer_counts)

        if self.dp_shares is not None:
            if len(self.dp_shares) != self.degrees.dp or min(self.dp_shares) < 1:
                raise ConfigError("dp_shares", f"{self.degrees.dp} counts >= 1, one per DP "
                                  "replica", self.dp_shares)
            if self.vpp > 1:
                raise ConfigError("dp_shares", "equal shares (none) with vpp > 1",
                                  self.dp_shares)
            for block in lockstep_replicas(self.degrees):
                if len({self.dp_shares[r] for r in block}) > 1:
                    raise ConfigError("dp_shares", f"one share for replicas {list(block)}, which "
                                      "an expert-parallel group joins (its all-to-all runs "
                                      "micro-batch by micro-batch)", self.dp_shares)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainingConfig":
        """A config from plain data: ``{"degrees": {...}, <options>}``, or the flat form of plan
        files before schema 2 (degree keys beside the options)."""
        data = dict(data)
        degrees = data.pop("degrees", None)
        if degrees is None:
            degrees = {k: data.pop(k) for k in DEGREE_KEYS if k in data}
        if data.get("stage_layer_counts") is not None:
            data["stage_layer_counts"] = tuple(data["stage_layer_counts"])
        if data.get("dp_shares") is not None:
            data["dp_shares"] = tuple(data["dp_shares"])
        for name in ("offload_modules", "recompute_modules"):
            if data.get(name) is not None:
                data[name] = tuple(data[name])
        return cls(degrees=Degrees(**degrees), **data)

    def options_dict(self) -> dict:
        """The training options as plain data (every field but ``degrees``; ``moe_a2a_overlap``,
        ``dp_shares``, ``low_precision_shard``, ``fused_cross_entropy``, ``moe_dispatcher``,
        ``grad_reduce_in_fp32``, ``optimizer_moment_bytes``, ``cuda_graphs``,
        ``offload_modules``, ``fp8_attention``, ``fused_grouped_mlp`` and
        ``quantized_saved_inputs``, ``offload_layers`` and ``recompute_modules`` only when
        not their defaults,
        so that plans written before them read and hash alike)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "degrees"}
        for name, default in (("low_precision_shard", True), ("fused_cross_entropy", False),
                              ("moe_dispatcher", "alltoall"), ("grad_reduce_in_fp32", True),
                              ("optimizer_moment_bytes", 4), ("cuda_graphs", "none"),
                              ("offload_modules", ()), ("fp8_attention", False),
                              ("fused_grouped_mlp", False), ("quantized_saved_inputs", True),
                              ("offload_layers", 0), ("recompute_modules", ())):
            if out[name] == default:
                del out[name]
        if out["stage_layer_counts"] is not None:
            out["stage_layer_counts"] = list(out["stage_layer_counts"])
        for name in ("offload_modules", "recompute_modules"):
            if name in out:
                out[name] = list(out[name])
        if not out["moe_a2a_overlap"]:
            del out["moe_a2a_overlap"]
        if out["dp_shares"] is None:
            del out["dp_shares"]
        else:
            out["dp_shares"] = list(out["dp_shares"])
        return out

    @cached_property
    def _selective_modules(self) -> frozenset[str]:
        if self.recompute != "selective":
            return frozenset()
        if self.recompute_modules:
            return frozenset(self.recompute_modules)
        return default_selective_modules(self.attention == "unfused")

    def selective_modules(self) -> frozenset[str]:
        """The submodules selective recompute re-runs (none unless ``recompute`` is
        "selective"): those named, or by default the attention core with unfused attention and
        the norms and routed experts' activation functions with fused attention."""
        return self._selective_modules

    def flat_dict(self) -> dict:
        """Degrees and options in one flat dict (``planner estimate --format json``'s config)."""
        return {**asdict(self.degrees), **self.options_dict()}

    def micro_batches(self, workload: Workload) -> int:
        """Micro-batches per pipeline per step (gradient-accumulation steps); with
        ``dp_shares`` the mean share (the shares sum to ``dp`` times this)."""
        return workload.global_batch // (self.degrees.dp * self.micro_batch)

    @property
    def schedule(self) -> str:
        """Pipeline schedule: ``zb-h1``, ``interleaved-1f1b`` (vpp > 1), ``slimpipe`` (1F1B over
        sequence slices) or ``1f1b``."""
        if self.zero_bubble:
            return "zb-h1"
        if self.seq_slices > 1:
            return "slimpipe"
        return "interleaved-1f1b" if self.vpp > 1 else "1f1b"


def check_config(model, workload: Workload, config: TrainingConfig, num_gpus: int) -> None:
    """Raise :class:`ConfigError` naming the first quantity inconsistent with the others.

    ``model`` is a :class:`cost_models.model_spec.ModelSpec` (untyped here to keep imports flat).
    """
    d = config.degrees
    check_degrees(model, d, num_gpus)
    if model.num_layers + 2 < d.pp * config.vpp:  # embedding and loss may be own chunks
        raise ConfigError("pp*vpp", f"<= layers + 2 ({model.num_layers + 2})", d.pp * config.vpp)
    if (config.stage_layer_counts is not None
            and sum(config.stage_layer_counts) != model.num_layers):
        raise ConfigError("stage_layer_counts", f"counts summing to the {model.num_layers} "
                          "layers", config.stage_layer_counts)
    steps = d.dp * config.micro_batches(workload)
    if config.dp_shares is not None and sum(config.dp_shares) != steps:
        raise ConfigError("dp_shares", f"shares summing to the {steps} micro-batches of the "
                          "global batch", config.dp_shares)
    divides("cp", d.cp, "the sequence length", workload.seq_len)
    if config.seq_slices > 1:
        divides("seq_slices", d.cp * config.seq_slices, "the sequence length (cp * slices)",
                workload.seq_len)
    if config.sequence_parallel and (workload.seq_len // (d.cp * config.seq_slices)) % d.tp:
        raise ConfigError("sequence_parallel", f"tokens per CP rank and slice "
                          f"({workload.seq_len // (d.cp * config.seq_slices)}) divisible "
                          f"by tp ({d.tp})", workload.seq_len)
    if workload.global_batch % (d.dp * config.micro_batch):
        raise ConfigError("global_batch", f"a multiple of dp*micro_batch = "
                          f"{d.dp}*{config.micro_batch}", workload.global_batch)
    if config.vpp > 1 and config.micro_batches(workload) % d.pp:
        raise ConfigError("vpp", f"micro-batches ({config.micro_batches(workload)}) a multiple "
                          f"of pp ({d.pp}) for the interleaved schedule", config.vpp)
    if config.sequence_parallel and d.tp == 1:
        raise ConfigError("sequence_parallel", "tp > 1", d.tp)
    if config.fp8_attention and workload.precision != "fp8":
        raise ConfigError("fp8_attention", "fp8 precision (fp8 GEMMs)", workload.precision)
    if config.fused_grouped_mlp and (workload.precision != "fp8" or model.moe is None):
        raise ConfigError("fused_grouped_mlp", "an MoE model in fp8 (MXFP8) precision",
                          f"{workload.precision}, {'MoE' if model.moe else 'dense'}")
