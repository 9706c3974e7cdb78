"""Calibration parameters: every tunable number of the cost models, in one structure.

A :class:`Profile` holds the efficiencies of one GPU type (compute, memory) and of each link
tier (bandwidth efficiency and per-message latency). Defaults live in
``data/profiles.json`` (fitted on the published runs, see ``docs/calibration.md``);
``--calibration FILE`` overrides any of them with a JSON of the same shape.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path


COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
_DICT_FIELDS = ("link_efficiency", "collective_latency_factor", "collective_bw_factor",
                "collective_tables")
# Fields only a measured machine sets (planner calibrate); left out of plain data while unset,
# so plans and profiles written before they existed keep their form and hash.
MEASURED_ONLY_FIELDS = ("collective_switch_s", "collective_tables", "resume_s", "p2p_latency_s",
                        "collective_skew_sqrt_s", "collective_burst_s", "stream_efficiency",
                        "dispatch_solve_s", "dispatch_solve_per_expert_s", "eager_call_s",
                        "late_read_s", "cold_weight_s_per_byte", "p2p_post_s")


@dataclass(frozen=True)
class Profile:
    """Efficiencies are achieved / nominal, in (0, 1]. Sizes in bytes, times in seconds."""

    gemm_efficiency: float = 0.75  # large bf16 GEMMs, fraction of dense peak
    gemm_half_dim: float = 96.0  # GEMM dim at which efficiency halves (tile/wave quantisation)
    attention_efficiency: float = 0.55  # fused (flash) attention, fraction of dense peak
    #                                     (its asymptote at long sequences when the next is set)
    # Fused attention's two knees (cost_models.compute.fused_attention_efficiency):
    # eff = attention_efficiency * L / (L + attention_half_keys) * T / (T + attention_half_tiles)
    # with L the keys a query attends to on average (s/2 causal) and T the 128-query tiles of
    # one kernel call (micro-batch x local heads x s/128): the fixed work per tile against work
    # that grows with L, and a GPU's SMs left idle by too few tiles. 0: that knee is off. The
    # shipped values are measured on GPU kernels, not fitted (docs/benchmarks.md
    # "device_kernels"); ``planner calibrate`` fits the keys' knee on its own machine.
    attention_half_keys: float = 0.0
    attention_half_tiles: float = 0.0
    fp8_speedup: float = 1.6  # GEMM time ratio bf16/fp8 actually reached (peak ratio is 2;
    #                           the shipped profiles fit it: cost_models/data/profiles.json)
    hbm_efficiency: float = 0.8  # memory-bound kernels, fraction of HBM bandwidth
    # What one long streaming pass over flat buffers reaches of the memory bandwidth (the
    # optimizer step, a gradient buffer's packing), where it differs from the layers'
    # element-wise kernels: ``planner calibrate`` fits hbm_efficiency on whole layers (short
    # kernels, launch gaps, cache effects: 0.37 on a 2-vCPU Xeon) and the bandwidth itself on
    # stream copies, so a calibrated profile streams at 1.0 of it. 0 where not measured: the
    # shipped profiles price both at hbm_efficiency (``stream_eff``).
    stream_efficiency: float = 0.0
    kernel_overhead_s: float = 4e-6  # launch gap per kernel
    # CPU time to issue one kernel from eager PyTorch (Python, autograd, dispatcher, launch):
    # a layer whose GPU work is shorter than its launches is launch bound
    # (compute.LayerTime.total_s); kernels in CUDA graphs cost none (TrainingConfig.cuda_graphs)
    host_launch_s: float = 0.0
    link_efficiency: dict[str, float] = field(default_factory=lambda: {
        "nvswitch": 0.8, "nvlink": 0.75, "xgmi": 0.7, "pcie": 0.7,
        "ib": 0.85, "roce": 0.8, "tcp": 0.5})
    # Per collective (all_reduce, all_gather, reduce_scatter, all_to_all, send_recv): factors on
    # the tier's latency and bandwidth, for libraries whose algorithms do not follow the busbw
    # factors (gloo's; fitted by ``planner calibrate``). Missing ops: 1.
    collective_latency_factor: dict[str, float] = field(default_factory=dict)
    collective_bw_factor: dict[str, float] = field(default_factory=dict)
    # What one blocking collective inside a layer (TP all-reduce, EP all-to-all) adds to the
    # compute around it beyond its own time: the waiting core's wake-up and the caches the
    # library's threads displaced. Fitted by ``planner calibrate`` (compute and all-reduces
    # taking turns, cost_models/fitting.py ``fit_collective_switch``); 0 where not measured.
    collective_switch_s: float = 0.0
    # Arrival skew: two ranks that compute the same work for T seconds reach the next blocking
    # collective apart, and the first waits. With independent delays (OS noise, a descheduled
    # vCPU) the gap grows as a random walk, ~ sqrt(T) (Hoefler, Schneider, Lumsdaine, "Characterizing
    # the Influence of System Noise on Large-Scale Applications by Simulation", SC'10). A
    # collective after a compute segment of T s costs collective_skew_sqrt_s * (sqrt(T) -
    # sqrt(collective_burst_s)) beyond its table time: the tables were measured after a
    # compute burst of collective_burst_s, whose skew they already hold
    # (communication.py ``arrival_skew_s``). Fitted by ``planner calibrate`` on compute and
    # all-reduces taking turns at several segment lengths; 0 where not measured (GPU jobs:
    # kernels queued ahead of the host keep ranks in step).
    collective_skew_sqrt_s: float = 0.0
    collective_burst_s: float = 0.0
    # The calibrated machine's own collective times by size, ``"<tier>:<op>:<group size>"`` ->
    # ``[[bytes, seconds], ...]`` (planner calibrate's means after a compute burst), used for
    # groups inside one domain of that tier (cost_models/communication.py ``measured_s``).
    collective_tables: dict[str, list] = field(default_factory=dict)
    # What compute a process runs right after blocking in a receive takes beyond the same
    # compute run back to back: the blocked core went idle, and resumes on cold caches (on a
    # VM, a vCPU the host descheduled). Measured by ``planner calibrate`` (a ping-pong whose
    # waiting rank then computes; planner/run/calibrate_job.py ``resume_cases``); 0 where not
    # measured. Used where a process waits for messages between compute (the AFD job), and
    # as compute after each blocking collective inside a layer (TP, EP:
    # cost_models/training/stage.py ``_restarts``).
    resume_s: float = 0.0
    # One-way latency of a small point-to-point message whose receiver already waits in its
    # receive: half a ping-pong's round trip (the same benchmark); 0 where not measured (the
    # ``send_recv`` alpha-beta, timed after a barrier and a compute burst, prices it then).
    p2p_latency_s: float = 0.0
    # What a process waits for a message that arrived while it computed, once it blocks for
    # it: planner's jobs run gloo's transport threads only on idle cores
    # (planner/run/transport_threads.py), so such a message is read after the receiver blocks
    # (wake-ups, the read). Measured by ``planner calibrate`` (the same pairs: a message sent
    # while both ranks compute, waited for later; calibrate_job.py ``resume_cases``); 0 where
    # not measured. Used where the AFD job's stages take messages that came while they were
    # busy (solvers/serving/pingpong.py ``rounds_s``'s ``late_s``).
    late_read_s: float = 0.0
    # One non-blocking point-to-point call's own time (``isend`` / ``irecv`` on gloo: the
    # pair's lock, the receive-ready notice or the payload written to its socket, the remote
    # thread's wake-up). Measured by ``planner calibrate`` (the same pairs, posting while the
    # peer computes: calibrate_job.py ``resume_cases``' ``post_s``); 0 where not measured
    # (then an eager call's cost prices it). Used for the AFD job's posts
    # (planner/serving/afd_run_prediction.py ``POSTS``).
    p2p_post_s: float = 0.0
    # Host time of one expert dispatch's bookkeeping where the job solves the planner's
    # real-time quotas on every MoE layer and micro-batch (the reference job's ``quota_solve``:
    # quotas, dispatch matrix, each token's slot, the splits): dispatch_solve_s +
    # dispatch_solve_per_expert_s * experts. Measured by ``planner calibrate``
    # (planner/run/calibrate_job.py ``dispatch_cases``); 0 where not measured.
    dispatch_solve_s: float = 0.0
    dispatch_solve_per_expert_s: float = 0.0
    # One eager torch call on tiny tensors without autograd (a no-grad decode's dispatcher
    # cost; ``kernel_overhead_s`` is fitted on training layers, autograd included). Measured
    # by ``planner calibrate`` (planner/run/calibrate_job.py ``eager_cases``); 0 where not
    # measured (then kernel_overhead_s prices such calls).
    eager_call_s: float = 0.0
    # A CPU core's time per byte of a GEMM's weight that is not in its cache (a training
    # layer's weights are evicted by the layers between two uses): a single-threaded GEMM
    # loads it without overlapping its math, a fixed cost per GEMM whatever the tokens. On
    # the 2-vCPU box (2026-11-28) a 256 x 1024 fp32 weight (1 MB) took 26-112 us more when
    # 16-96 MB of other weights ran between its uses than back to back, at 32-512 tokens.
    # Fitted by ``planner calibrate`` on its layer cases (``cost_models.fitting``
    # ``fit_layer_overheads``) on CPU; 0 on GPUs, whose GEMMs stream their weights from HBM
    # as they compute (the roofline of ``compute.gemm_time_s``).
    cold_weight_s_per_byte: float = 0.0
    # Memory outside states, activations and logits (``training.stage_memory.other_bytes``).
    # Both are assumptions, neither fitted nor measured here: the CUDA context, NCCL's
    # communicator buffers (NCCL_BUFFSIZE, 4 MiB per channel and peer by default: NCCL docs,
    # "Environment Variables") and cuBLAS workspaces; and the caching allocator's
    # fragmentation (PyTorch docs, "CUDA semantics: memory management"; ZeRO, Rajbhandari et
    # al. SC'20, names fragmentation as what runs large models out of memory with free memory
    # left). Checked only in aggregate: every published run in the calibration set is
    # predicted to fit (docs/calibration.md).
    reserved_bytes: float = 2.5 * 2**30
    fragmentation_fraction: float = 0.05  # of the states, activations and logits

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _DICT_FIELDS[1:]:
                continue
            if f.name != "link_efficiency" and (not isinstance(value, (int, float))
                                                or isinstance(value, bool) or value < 0):
                raise ValueError(f"profile {f.name}={value!r} must be a number >= 0")
        if not isinstance(self.link_efficiency, dict):
            raise ValueError(f"profile link_efficiency must be an object of tier -> efficiency, "
                             f"got {self.link_efficiency!r}")
        if self.fp8_speedup < 1 or self.fragmentation_fraction >= 1:
            raise ValueError(f"profile fp8_speedup={self.fp8_speedup} must be >= 1 and "
                             f"fragmentation_fraction={self.fragmentation_fraction} < 1")
        if self.stream_efficiency > 1:
            raise ValueError(f"profile stream_efficiency={self.stream_efficiency} must be in "
                             "(0, 1], or 0 for hbm_efficiency")
        for name in ("gemm_efficiency", "attention_efficiency", "hbm_efficiency"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"profile {name}={value} must be in (0, 1]")
        for name in ("collective_latency_factor", "collective_bw_factor"):
            table = getattr(self, name)
            if not isinstance(table, dict) or any(
                    op not in COLLECTIVE_OPS or not isinstance(v, (int, float)) or v <= 0
                    for op, v in table.items()):
                raise ValueError(f"profile {name} must map collectives {COLLECTIVE_OPS} to "
                                 f"positive numbers, got {table!r}")
        for key, rows in self.collective_tables.items():
            parts = str(key).split(":")
            if (len(parts) != 3 or parts[1] not in COLLECTIVE_OPS or not parts[2].isdigit()
                    or not isinstance(rows, (list, tuple)) or len(rows) < 2
                    or any(not isinstance(r, (list, tuple)) or len(r) != 2
                           or not all(isinstance(v, (int, float)) and v > 0 for v in r)
                           for r in rows)):
                raise ValueError(f"profile collective_tables.{key} must be keyed "
                                 "'<tier>:<collective>:<group size>' and hold at least two "
                                 "[bytes, seconds] rows of positive numbers")
        for tier, value in self.link_efficiency.items():
            if not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"profile link_efficiency.{tier}={value} must be in (0, 1]")

    @property
    def stream_eff(self) -> float:
        """Efficiency of a long streaming pass (``stream_efficiency``, else
        ``hbm_efficiency``)."""
        return self.stream_efficiency or self.hbm_efficiency

    def link_eff(self, tier_name: str) -> float:
        """Efficiency of a tier named like ``ib`` or ``roce+spine`` (the transport decides)."""
        base = tier_name.split("+")[0].split("/")[0]
        return self.link_efficiency.get(base, 0.7)

    def op_factors(self, op: str) -> tuple[float, float]:
        """(latency factor, bandwidth factor) of collective ``op`` (1, 1 unless calibrated)."""
        return (self.collective_latency_factor.get(op, 1.0),
                self.collective_bw_factor.get(op, 1.0))


def _merge(base: Profile, overrides: dict) -> Profile:
    if not isinstance(overrides, dict):
        raise ValueError(f"profile overrides must be a JSON object, got {overrides!r}")
    known = {f.name for f in fields(Profile)}
    unknown = set(overrides) - known
    if unknown:
        raise ValueError(f"unknown profile field(s) {sorted(unknown)}; known: {sorted(known)}")
    for name in _DICT_FIELDS:
        if name in overrides and isinstance(overrides[name], dict):
            overrides = {**overrides, name: {**getattr(base, name), **overrides[name]}}
    return replace(base, **overrides)


@lru_cache(maxsize=1)
def _defaults() -> dict:
    text = resources.files("cost_models").joinpath("data/profiles.json").read_text()
    return json.loads(text)


def default_profile(gpu_name: str) -> Profile:
    """Fitted defaults for ``gpu_name``: the common block, then the GPU's own entries.

    GPU types without their own entry use the entry of their architecture family
    (``arch_fallback``), else the common block.
    """
    data = _defaults()
    profile = _merge(Profile(), data.get("common", {}))
    key = gpu_name if gpu_name in data["gpus"] else data.get("arch_fallback", {}).get(gpu_name)
    return _merge(profile, data["gpus"].get(key, {})) if key else profile


@lru_cache(maxsize=64)  # on every mixed-cluster estimate's path; cleared with _defaults
def gemm_efficiency_ratio(gpu_name: str, profile_gpu: str) -> float:
    """GEMM efficiency of ``gpu_name`` relative to ``profile_gpu``'s, by the fitted defaults
    (one GEMM efficiency per GPU family, ``docs/calibration.md``): on a cluster of several GPU
    types the job's profile is its slowest GPU's (``planner`` loads it so), and the other types
    keep their own efficiency relative to it (A100 0.79, H100 0.69: an H100 is not an A100
    with 3.2x the peak)."""
    return (default_profile(gpu_name).gemm_efficiency
            / default_profile(profile_gpu).gemm_efficiency)


def apply_overrides(profile: Profile, path: str | Path, gpu_name: str) -> Profile:
    """Apply a calibration JSON: either flat fields, or ``{"common": {...}, "gpus": {...}}``."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError("a calibration file must hold a JSON object")
    if data.get("schema") == "planner.calibration/v1":  # written by planner calibrate
        return _merge(profile, data.get("profile", {}))
    if "gpus" in data or "common" in data:
        profile = _merge(profile, data.get("common", {}))
        gpus = data.get("gpus", {})
        if not isinstance(gpus, dict):
            raise ValueError(f"'gpus' must map GPU names to profile fields, got {gpus!r}")
        return _merge(profile, gpus.get(gpu_name, {}))
    return _merge(profile, data)


def profile_to_dict(profile: Profile) -> dict:
    """Every field; the per-collective factors and the switch cost only when calibrated (older
    plans hash alike)."""
    out = asdict(profile)
    for name in dict.fromkeys((*_DICT_FIELDS[1:], *MEASURED_ONLY_FIELDS)):
        if not out[name]:
            del out[name]
    return out
