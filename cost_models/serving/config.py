"""What a serving estimate takes: the workload and the layout of one pool of engine instances.

A pool layout uses the engines' own words (SGLang ``--tp-size/--dp-size/--ep-size``, vLLM
``--tensor-parallel-size/--data-parallel-size/--enable-expert-parallel``): ``dp`` is the number
of attention data-parallel ranks inside one instance, each of ``tp`` GPUs, so an instance has
``tp*pp*dp`` GPUs; MoE layers fold those GPUs into ``etp*ep`` (``etp*ep == tp*dp``); ``batch``
is the number of running requests per attention rank; ``workers`` the number of instances.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, replace

from cost_models.model_spec import ModelSpec
from cost_models.parallel import ConfigError

# Bytes per weight. NVFP4: 4-bit values plus one fp8 scale per 16 (NVIDIA, "Introducing NVFP4",
# 2025); int4 (AWQ/GPTQ): 4-bit values plus one bf16 scale per group of 128 (AWQ paper sec. 4).
WEIGHT_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1 / 16,
                                  "int4": 0.5 + 2 / 128}
KV_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
ENGINES = ("sglang", "vllm", "trtllm")
POOL_KEYS = ("tp", "pp", "dp", "ep", "etp", "batch", "workers", "redundant")


@dataclass(frozen=True)
class ServingWorkload:
    """Requests and targets. Lengths in tokens; ``prefix_hit`` is the fraction of input tokens
    served from the prefix cache; speculative decoding (MTP) proposes ``mtp_depth`` tokens per
    step, each accepted with probability ``mtp_acceptance`` given the previous was."""

    isl: int = 1024
    osl: int = 256
    rate_per_s: float | None = None
    concurrency: int | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    prefix_hit: float = 0.0
    mtp_depth: int = 0
    mtp_acceptance: float = 0.0
    precision: str = "bf16"
    kv_dtype: str = "bf16"
    moe_imbalance: float = 1.0  # busiest EP rank's routed tokens / the mean (1: balanced)
    ttft_quantile: float | None = 0.9  # the TTFT target holds for this share of requests
    #                                    (None: for the mean)
    isl_scv: float = 0.0  # squared coefficient of variation of input lengths (0: fixed)
    osl_scv: float = 0.0  # ... of output lengths (isl and osl are then the means)

    def __post_init__(self) -> None:
        if self.isl < 1 or self.osl < 1:
            raise ConfigError("isl/osl", ">= 1 token", (self.isl, self.osl))
        if not (math.isfinite(self.prefix_hit) and 0 <= self.prefix_hit < 1):
            raise ConfigError("prefix_hit", "a fraction in [0, 1)", self.prefix_hit)
        if self.precision not in WEIGHT_BYTES:
            raise ConfigError("precision", f"one of {', '.join(WEIGHT_BYTES)}", self.precision)
        if self.kv_dtype not in KV_BYTES:
            raise ConfigError("kv_dtype", f"one of {', '.join(KV_BYTES)}", self.kv_dtype)
        if self.mtp_depth < 0 or not 0 <= self.mtp_acceptance <= 1:
            raise ConfigError("mtp", "depth >= 0 and acceptance in [0, 1]",
                              (self.mtp_depth, self.mtp_acceptance))
        if self.ttft_quantile is not None and not 0 < self.ttft_quantile < 1:
            raise ConfigError("ttft_quantile", "a fraction in (0, 1), or none for the mean",
                              self.ttft_quantile)
        # NaN fails every comparison, so each check asks for the good range (finite)
        if not all(math.isfinite(x) and x >= 0 for x in (self.isl_scv, self.osl_scv)):
            raise ConfigError("isl_scv/osl_scv", ">= 0", (self.isl_scv, self.osl_scv))
        if not (math.isfinite(self.moe_imbalance) and self.moe_imbalance >= 1):
            raise ConfigError("moe_imbalance", "a finite number >= 1", self.moe_imbalance)
        for name in ("rate_per_s", "concurrency", "ttft_ms", "tpot_ms"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(name, "a finite number > 0", value)

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a decode step emits: 1 + a + a^2 + ... + a^depth (the accepted
        prefix of a chain of drafts plus the verified token; Leviathan et al. 2023, eq. 1)."""
        a = self.mtp_acceptance
        return 1.0 + sum(a ** i for i in range(1, self.mtp_depth + 1))

    @property
    def new_input_tokens(self) -> float:
        """Input tokens a prefill computes (the rest come from the prefix cache)."""
        return self.isl * (1.0 - self.prefix_hit)


@dataclass(frozen=True)
class PoolLayout:
    """One pool's engine instances (module docstring). ``etp`` None: tp*dp // ep."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    etp: int | None = None
    batch: int = 1
    workers: int = 1
    redundant: int = 0  # redundant expert replicas per MoE layer (SGLang
    #                     --ep-num-redundant-experts, vLLM EPLB num_redundant_experts)

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "ep", "batch", "workers"):
            if getattr(self, name) < 1:
                raise ConfigError(name, ">= 1", getattr(self, name))
        if self.redundant < 0:
            raise ConfigError("redundant", ">= 0", self.redundant)
        if self.etp is not None and self.etp < 1:
            raise ConfigError("etp", ">= 1", self.etp)

    @property
    def gpus_per_instance(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def gpus(self) -> int:
        return self.gpus_per_instance * self.workers

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else max(1, self.tp * self.dp // self.ep)

    @property
    def requests_per_instance(self) -> int:
        return self.batch * self.dp

    def as_dict(self) -> dict[str, int]:
        out = {"tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep,
               "etp": self.expert_tp, "batch": self.batch, "workers": self.workers}
        return {**out, "redundant": self.redundant} if self.redundant else out


def parse_pool(text: str) -> PoolLayout:
    """``tp=8,dp=1,ep=8,batch=64,workers=2`` -> PoolLayout; ValueError names the bad part."""
    values: dict[str, int] = {}
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        key, sep, raw = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in POOL_KEYS:
            raise ValueError(f"'{part}': expected KEY=INT with KEY one of {', '.join(POOL_KEYS)}")
        if key in values:
            raise ValueError(f"'{key}' given twice")
        try:
            values[key] = int(raw)
        except ValueError:
            raise ValueError(f"'{part}': {key} must be an integer, got {raw.strip()!r}") from None
    if not values:
        raise ValueError("empty pool: expected KEY=INT pairs like tp=8,batch=64")
    return PoolLayout(**values)


def check_layout(model: ModelSpec, layout: PoolLayout) -> None:
    """The layout can shard the model (ConfigError names the degree)."""
    if model.num_heads % layout.tp:
        raise ConfigError("tp", f"a divisor of the {model.num_heads} attention heads", layout.tp)
    if model.num_layers < layout.pp:
        raise ConfigError("pp", f"<= the {model.num_layers} layers", layout.pp)
    if not model.is_moe:
        if layout.ep != 1 or (layout.etp not in (None, layout.tp * layout.dp)):
            raise ConfigError("ep", "1 for a dense model", layout.ep)
        if layout.redundant:
            raise ConfigError("redundant", "0 for a dense model", layout.redundant)
        return
    slots = model.moe.num_experts + layout.redundant
    if slots % layout.ep:
        raise ConfigError("ep", f"a divisor of the {slots} expert slots "
                          f"({model.moe.num_experts} experts + {layout.redundant} redundant)",
                          layout.ep)
    if layout.expert_tp * layout.ep != layout.tp * layout.dp:
        raise ConfigError("ep*etp", f"tp*dp = {layout.tp * layout.dp}",
                          layout.expert_tp * layout.ep)
    if model.moe.expert_ffn_hidden % layout.expert_tp:
        raise ConfigError("etp", f"a divisor of the expert width {model.moe.expert_ffn_hidden}",
                          layout.expert_tp)


def with_batch(layout: PoolLayout, batch: int) -> PoolLayout:
    return replace(layout, batch=batch)
