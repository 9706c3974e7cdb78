"""From command-line choices to an :class:`~cost_models.training.step.Estimate`.

Owns the wiring behind ``planner estimate`` (and the cluster choice of ``planner topo show``):
which cluster the options name, the defaults of the parallel degrees (``dp`` fills the GPUs),
the calibration profile, and the consistency check. Every bad choice leaves this module as one
:class:`~planner.errors.SpecError` naming the option or file, never as a bare ``ValueError``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from cost_models.groups import stage_views
from cost_models.model_spec import ModelSpec
from cost_models.parallel import ConfigError, Degrees
from cost_models.training.config import (PRECISIONS, RECOMPUTE, TrainingConfig, Workload,
                                         check_config)
from cost_models.profile import Profile, apply_overrides, default_profile
from cost_models.training.step import Estimate, compute_floor_s, estimate, estimate_memory
from planner.inputs.clusters import OPTIONS_SOURCE, cluster_from_options, load_cluster
from planner.errors import SpecError
from topologies.cluster import Cluster

DEFAULT_GPU = "H100"
DEFAULT_NODES = 8
AUTO = "auto"  # a ParallelChoice field left to auto_estimate: the fastest value that fits
MAX_AUTO_MICRO_BATCH = 64  # --micro-batch auto tries the divisors of global_batch/dp up to this


@dataclass(frozen=True)
class ClusterChoice:
    """What the user typed to name a cluster: a preset or file, or a GPU and a node count."""

    cluster: str | None = None
    gpu: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None


@dataclass(frozen=True)
class ParallelChoice:
    """The degrees and options as typed; ``None`` means "use the default" and :data:`AUTO`
    (``etp``, ``micro_batch``, ``recompute``) "the fastest value that fits", which only
    :func:`auto_estimate` resolves (:func:`make_config` takes explicit choices)."""

    tp: int = 1
    pp: int = 1
    dp: int | None = None  # default: whatever fills the cluster
    cp: int = 1
    ep: int = 1
    etp: int | None | str = None  # default: equal to tp; "auto": fastest that fits
    vpp: int = 1
    micro_batch: int | str = 1
    recompute: str = "none"
    recompute_layers: int | None = None
    recompute_modules: tuple[str, ...] = ()  # with selective: Megatron-Core's submodule names
    sequence_parallel: bool | None = None  # default: on when tp > 1
    zero: int = 1
    zero_bubble: bool = False
    seq_slices: int = 1
    moe_dispatcher: str = "alltoall"
    attention: str = "flash"
    cuda_graphs: str = "none"
    fp8_attention: bool = False
    fused_grouped_mlp: bool = False

    @property
    def auto_fields(self) -> tuple[str, ...]:
        """The fields left to :func:`auto_estimate`, in ``("recompute", "micro_batch",
        "etp")`` order."""
        return tuple(name for name in ("recompute", "micro_batch", "etp")
                     if getattr(self, name) == AUTO)


def resolve_cluster(choice: ClusterChoice, default_gpu: str | None = None) -> Cluster:
    """The cluster ``choice`` names; with neither a cluster nor a GPU, ``default_gpu`` nodes."""
    by_gpu = (choice.gpu, choice.nodes, choice.gpus_per_node)
    if choice.cluster is not None:
        if any(value is not None for value in by_gpu):
            raise SpecError(OPTIONS_SOURCE, "--cluster", "either a cluster (preset or file) or "
                            "--gpu/--nodes/--gpus-per-node, not both", choice.cluster)
        return load_cluster(choice.cluster)
    gpu = choice.gpu or default_gpu
    if gpu is None:
        raise SpecError(OPTIONS_SOURCE, "CLUSTER", "a cluster preset or file, or --gpu NAME "
                        "--nodes N")
    nodes = DEFAULT_NODES if choice.nodes is None else choice.nodes
    return cluster_from_options(gpu, nodes, choice.gpus_per_node)


def default_dp(choice: ParallelChoice, num_gpus: int) -> int:
    """``choice.dp``, or the data-parallel degree that fills ``num_gpus`` GPUs."""
    if choice.dp is not None:
        return choice.dp
    model_parallel = choice.tp * choice.pp * choice.cp
    if num_gpus % model_parallel:
        raise SpecError(OPTIONS_SOURCE, "--tp/--pp/--cp", f"tp*pp*cp dividing the cluster's "
                        f"{num_gpus} GPUs when --dp is left out (or give --dp)",
                        f"{choice.tp}*{choice.pp}*{choice.cp} = {model_parallel}")
    return num_gpus // model_parallel


def make_config(choice: ParallelChoice, num_gpus: int) -> TrainingConfig:
    """The :class:`TrainingConfig` of ``choice`` with every default filled in (no field may
    be :data:`AUTO`; see :func:`auto_estimate`)."""
    if choice.auto_fields:
        raise SpecError(OPTIONS_SOURCE, option_of(choice.auto_fields[0]), "an explicit value "
                        "here (auto is resolved by planner estimate only)", AUTO)
    if choice.recompute_layers is not None and choice.recompute != "full":
        raise SpecError(OPTIONS_SOURCE, "--recompute-layers", "--recompute full alongside it",
                        f"--recompute {choice.recompute}")
    sequence_parallel = (choice.tp > 1 if choice.sequence_parallel is None
                         else choice.sequence_parallel)
    try:
        degrees = Degrees(tp=choice.tp, pp=choice.pp, dp=default_dp(choice, num_gpus),
                          cp=choice.cp, ep=choice.ep, etp=choice.etp)
        return TrainingConfig(
            degrees=degrees, vpp=choice.vpp, micro_batch=choice.micro_batch,
            recompute=choice.recompute, recompute_layers=choice.recompute_layers,
            recompute_modules=choice.recompute_modules,
            sequence_parallel=sequence_parallel, zero=choice.zero,
            zero_bubble=choice.zero_bubble, seq_slices=choice.seq_slices,
            moe_dispatcher=choice.moe_dispatcher, attention=choice.attention,
            cuda_graphs=choice.cuda_graphs, fp8_attention=choice.fp8_attention,
            fused_grouped_mlp=choice.fused_grouped_mlp)
    except ValueError as err:
        raise _options_error(err) from None


def make_workload(seq_len: int, global_batch: int, precision: str,
                  optimizer: str = "adam", cluster: Cluster | None = None) -> Workload:
    """The :class:`Workload`; constructor errors name the options. With ``cluster``, also
    checks that its GPUs compute in ``precision`` (:func:`check_precision`)."""
    try:
        workload = Workload(seq_len=seq_len, global_batch=global_batch, precision=precision,
                            optimizer=optimizer)
    except ValueError as err:
        raise _options_error(err) from None
    if cluster is not None:
        check_precision(cluster, precision)
    return workload


def load_profile(gpu_name: str, calibration: Path | None) -> Profile:
    """The fitted profile of ``gpu_name``, overridden by the ``--calibration`` JSON if given."""
    profile = default_profile(gpu_name)
    if calibration is None:
        return profile
    if not calibration.is_file():
        raise SpecError(str(calibration), "", "an existing calibration JSON file "
                        "(see docs/calibration.md)")
    try:
        return apply_overrides(profile, calibration, gpu_name)
    except json.JSONDecodeError as err:
        raise SpecError(f"{calibration}:{err.lineno}", "", f"valid JSON ({err.msg})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(str(calibration), "", f"a readable text file ({err})") from None
    except RecursionError:
        raise SpecError(str(calibration), "", "a calibration JSON file nested a few levels "
                        "deep") from None
    except (ValueError, TypeError, AttributeError, OverflowError) as err:
        raise SpecError(str(calibration), "", f"profile fields of cost_models.profile.Profile "
                        f"with values in range ({err})") from None


def checked_estimate(model: ModelSpec, cluster: Cluster, workload: Workload,
                     cfg: TrainingConfig, profile: Profile) -> Estimate:
    """Check ``cfg`` against the model, workload and cluster, then estimate it."""
    try:
        check_config(model, workload, cfg, cluster.num_gpus)
    except ConfigError as err:
        raise SpecError(OPTIONS_SOURCE, option_of(err.quantity), err.expected, err.got) from None
    try:
        return estimate(model, cluster, workload, cfg, profile)
    except ValueError as err:
        raise _options_error(err) from None


def check_precision(cluster: Cluster, precision: str) -> None:
    """Raise a SpecError naming ``--precision`` when a GPU of ``cluster`` does not compute in
    ``precision`` (V100 has no bf16, A100 no fp8, Hopper no nvfp4: :meth:`GpuSpec.supports`)."""
    for gpu in dict.fromkeys(group.gpu for group in cluster.node_groups):
        if not gpu.supports(precision):
            have = ", ".join(p for p in PRECISIONS if gpu.supports(p))
            raise SpecError(OPTIONS_SOURCE, "--precision", f"a precision {gpu.name} computes "
                            f"in ({have or 'none in the catalog'})", precision)


def parse_auto_int(value: str, option: str) -> int | str:
    """``auto`` or a whole number >= 1 as typed for ``option`` (``--micro-batch``)."""
    if value.strip().lower() == AUTO:
        return AUTO
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise SpecError(OPTIONS_SOURCE, option, "a whole number >= 1 or auto", value)
    return number


def parse_names(value: str | None) -> tuple[str, ...]:
    """A comma-separated list as typed (``--recompute-modules layernorm,moe_act``); the names
    are checked where they are used (TrainingConfig)."""
    if value is None:
        return ()
    return tuple(name.strip() for name in value.split(",") if name.strip())


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def candidate_choices(choice: ParallelChoice, model: ModelSpec, workload: Workload,
                      num_gpus: int) -> Iterator[ParallelChoice]:
    """Every explicit choice the :data:`AUTO` fields of ``choice`` stand for (``choice`` alone
    when none is auto): recompute none, selective, full; micro-batches dividing the sequences
    per data-parallel replica (``global_batch / dp``, up to :data:`MAX_AUTO_MICRO_BATCH`),
    ``recompute_modules`` kept for the selective candidate only;
    expert TP the divisors of ``tp`` on MoE models (dense models: equal to tp, unused)."""
    recomputes = RECOMPUTE if choice.recompute == AUTO else (choice.recompute,)
    micro_batches: list[int | str] = [choice.micro_batch]
    if choice.micro_batch == AUTO:
        dp = default_dp(choice, num_gpus)
        per_replica = workload.global_batch // dp if workload.global_batch % dp == 0 else 1
        micro_batches = [*_divisors(per_replica, MAX_AUTO_MICRO_BATCH)]
    etps: list[int | str | None] = [choice.etp]
    if choice.etp == AUTO:
        etps = [*_divisors(choice.tp, choice.tp)] if model.moe is not None else [None]
    for recompute in recomputes:
        for micro_batch in micro_batches:
            for etp in etps:
                modules = choice.recompute_modules
                if choice.recompute == AUTO and recompute != "selective":
                    modules = ()
                yield replace(choice, recompute=recompute, recompute_modules=modules,
                              micro_batch=micro_batch, etp=etp)


@dataclass(frozen=True)
class AutoEstimate:
    """:func:`auto_estimate`'s answer: the estimate, the value picked for each auto field
    (``chosen``; expert TP only on MoE models), and how many explicit candidates passed the
    checks (``candidates``)."""

    estimate: Estimate
    chosen: dict[str, Any]
    candidates: int


def auto_estimate(model: ModelSpec, cluster: Cluster, workload: Workload,
                  choice: ParallelChoice, profile: Profile) -> AutoEstimate:
    """The fastest estimate that fits among :func:`candidate_choices` of ``choice``; when none
    fits, the one with the smallest peak memory (the report then says it does not fit).
    Without auto fields this is :func:`checked_estimate` of ``choice``."""
    if choice.recompute == AUTO and choice.recompute_layers is not None:
        raise SpecError(OPTIONS_SOURCE, "--recompute-layers", "--recompute full alongside it",
                        f"--recompute {AUTO}")
    # Step 1: the candidates that pass the consistency checks (none: the first one's error)
    valid: list[TrainingConfig] = []
    first_error: SpecError | None = None
    for cand in candidate_choices(choice, model, workload, cluster.num_gpus):
        try:
            cfg = make_config(cand, cluster.num_gpus)
            check_config(model, workload, cfg, cluster.num_gpus)
        except SpecError as err:
            first_error = first_error or err
            continue
        except ConfigError as err:
            first_error = first_error or _options_error(err)
            continue
        valid.append(cfg)
    if not valid:
        raise first_error or SpecError(OPTIONS_SOURCE, "", "at least one candidate")
    try:
        best = _fastest_fitting(model, cluster, workload, valid, profile)
    except ValueError as err:
        raise _options_error(err) from None
    chosen = {"recompute": best.config.recompute, "micro_batch": best.config.micro_batch,
              "etp": best.config.degrees.expert_tp}
    fields = [f for f in choice.auto_fields if f != "etp" or model.moe is not None]
    return AutoEstimate(best, {f: chosen[f] for f in fields}, len(valid))


def _fastest_fitting(model: ModelSpec, cluster: Cluster, workload: Workload,
                     configs: list[TrainingConfig], profile: Profile) -> Estimate:
    """Estimate of the fastest of ``configs`` that fits (ties: the earliest), else of the one
    needing least memory. Costs configs in order of their compute floor (a lower bound on the
    step time, :func:`compute_floor_s`) and stops once the floor reaches the best step time."""
    if len(configs) == 1:
        return estimate(model, cluster, workload, configs[0], profile)
    # Step 1: memory only (cheap); keep those that fit
    peaks = [estimate_memory(model, cluster, workload, cfg, profile) for cfg in configs]
    fitting = [cfg for cfg, mem in zip(configs, peaks) if mem.fits]
    if not fitting:
        least = min(range(len(configs)), key=lambda i: peaks[i].peak_bytes)
        return estimate(model, cluster, workload, configs[least], profile)
    # Step 2: full estimates in order of the compute floor, stopping when it cannot win
    floors = sorted((compute_floor_s(model, cluster, workload, cfg, profile), i)
                    for i, cfg in enumerate(fitting))
    views: dict[Degrees, Any] = {}  # stage views depend on the degrees only
    best: tuple[float, int, Estimate] | None = None  # (step time, candidate index, estimate)
    for floor, i in floors:
        if best is not None and floor > best[0]:
            break
        cfg = fitting[i]
        if cfg.degrees not in views:
            views[cfg.degrees] = stage_views(cluster, cfg.degrees)
        est = estimate(model, cluster, workload, cfg, profile, views=views[cfg.degrees])
        if best is None or (est.step_time_s, i) < best[:2]:
            best = (est.step_time_s, i, est)
    assert best is not None
    return best[2]


# Quantities the cost models name whose command-line option is not simply "--" + the name.
_OPTION_OF = {"stage_layer_counts": "stage_layer_counts", "zero_bubble": "--schedule"}


def option_of(quantity: str) -> str:
    """The command-line option(s) behind a cost-model quantity: ``ep*etp`` -> ``--ep/--etp``,
    ``global_batch`` -> ``--global-batch``."""
    if quantity in _OPTION_OF:
        return _OPTION_OF[quantity]
    return "/".join("--" + part.replace("_", "-") for part in quantity.split("*"))


def _options_error(err: ValueError) -> SpecError:
    """A cost-model constructor's complaint about the options, as one SpecError line."""
    if isinstance(err, ConfigError):
        return SpecError(OPTIONS_SOURCE, option_of(err.quantity), err.expected, err.got)
    return SpecError(OPTIONS_SOURCE, "", f"options the cost model accepts ({err})")
