"""From command-line choices to an :class:`~cost_models.training.step.Estimate`.

Owns the wiring behind ``planner estimate`` (and the cluster choice of ``planner topo show``):
which cluster the options name, the defaults of the parallel degrees (``dp`` fills the GPUs),
the calibration profile, and the consistency check. Every bad choice leaves this module as one
:class:`~planner.errors.SpecError` naming the option or file, never as a bare ``ValueError``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cost_models.model_spec import ModelSpec
from cost_models.parallel import ConfigError, Degrees
from cost_models.training.config import TrainingConfig, Workload, check_config
from cost_models.profile import Profile, apply_overrides, default_profile
from cost_models.training.step import Estimate, estimate
from planner.inputs.clusters import OPTIONS_SOURCE, cluster_from_options, load_cluster
from planner.errors import SpecError
from topologies.cluster import Cluster

DEFAULT_GPU = "H100"
DEFAULT_NODES = 8


@dataclass(frozen=True)
class ClusterChoice:
    """What the user typed to name a cluster: a preset or file, or a GPU and a node count."""

    cluster: str | None = None
    gpu: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None


@dataclass(frozen=True)
class ParallelChoice:
    """The degrees and options as typed; ``None`` means "use the default"."""

    tp: int = 1
    pp: int = 1
    dp: int | None = None  # default: whatever fills the cluster
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # default: equal to tp
    vpp: int = 1
    micro_batch: int = 1
    recompute: str = "none"
    recompute_layers: int | None = None
    sequence_parallel: bool | None = None  # default: on when tp > 1
    zero: int = 1
    zero_bubble: bool = False
    seq_slices: int = 1


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
    """The :class:`TrainingConfig` of ``choice`` with every default filled in."""
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
            sequence_parallel=sequence_parallel, zero=choice.zero,
            zero_bubble=choice.zero_bubble, seq_slices=choice.seq_slices)
    except ValueError as err:
        raise _options_error(err) from None


def make_workload(seq_len: int, global_batch: int, precision: str,
                  optimizer: str = "adam") -> Workload:
    """The :class:`Workload`; constructor errors name the options."""
    try:
        return Workload(seq_len=seq_len, global_batch=global_batch, precision=precision,
                        optimizer=optimizer)
    except ValueError as err:
        raise _options_error(err) from None


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
