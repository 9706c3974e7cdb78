"""``planner estimate``'s table view: one :class:`~cost_models.training.step.Estimate` as rich renderables.

These only format: every figure comes from the Estimate (time and memory breakdowns, derived
throughput, bottleneck tiers), the model spec and the cluster. Nothing is computed here beyond
unit conversion and the share of the step each component takes.
"""
from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from cost_models.training.memory import MemoryBreakdown
from cost_models.model_spec import ModelSpec
from cost_models.training.step import Estimate, TimeBreakdown
from topologies.catalog import GIB
from topologies.cluster import Cluster

TIME_ROWS = (
    ("compute_s", "Compute (forward + backward)"),
    ("recompute_s", "Recompute"),
    ("tp_comm_s", "TP communication"),
    ("cp_comm_s", "CP communication"),
    ("ep_comm_s", "EP all-to-all"),
    ("pp_comm_s", "PP send/recv"),
    ("bubble_s", "Pipeline bubble"),
    ("dp_comm_s", "DP communication (exposed)"),
    ("optimizer_s", "Optimizer step"),
)
MEMORY_ROWS = (
    ("weights_bytes", "Weights"),
    ("grads_bytes", "Gradients"),
    ("optimizer_bytes", "Optimizer states"),
    ("activations_bytes", "Activations"),
    ("logits_bytes", "Logits"),
    ("other_bytes", "Other (workspaces, fragmentation)"),
)
GROUP_NAMES = {"tp": "TP", "cp": "CP", "dp_cp": "DP x CP", "pp": "PP", "ep": "EP"}


def _gpu_names(cluster: Cluster) -> str:
    return ", ".join(dict.fromkeys(group.gpu.name for group in cluster.node_groups))


def _header(est: Estimate, model: ModelSpec, cluster: Cluster) -> Text:
    cfg, work = est.config, est.workload
    title = Text(f"{est.model} on {est.cluster}", style="bold")
    title.append(f": {est.num_gpus:,} x {_gpu_names(cluster)}, {model.num_layers} layers\n",
                 style="")
    title.append(f"tp {cfg.tp} · pp {cfg.pp} · dp {cfg.dp} · cp {cfg.cp} · ep {cfg.ep} · "
                 f"etp {cfg.expert_tp} · vpp {cfg.vpp} · schedule {cfg.schedule}\n")
    title.append(f"global batch {work.global_batch:,} x {work.seq_len:,} tokens in "
                 f"{cfg.micro_batches(work):,} micro-batches of {cfg.micro_batch}\n")
    title.append(f"{work.precision} · recompute {cfg.recompute} · ZeRO-{cfg.zero} · sequence "
                 f"parallel {'on' if cfg.sequence_parallel else 'off'}")
    return title


def _time_table(time: TimeBreakdown) -> Table:
    table = Table(title="Step time", title_justify="left")
    table.add_column("Component")
    table.add_column("Seconds", justify="right")
    table.add_column("% of step", justify="right")
    for attr, label in TIME_ROWS:
        value = getattr(time, attr)
        table.add_row(label, f"{value:.3f}", f"{100 * value / time.step_s:.1f}",
                      style="dim" if value == 0 else None)
    table.add_section()
    table.add_row("Step", f"{time.step_s:.3f}", "100.0", style="bold")
    return table


def _throughput_table(est: Estimate) -> Table:
    table = Table(title="Throughput", title_justify="left", show_header=False)
    table.add_column("Metric")
    table.add_column("Value", justify="right")
    table.add_row("Step time", f"{est.step_time_s:.3f} s")
    table.add_row("Tokens/s per GPU", f"{est.tokens_per_s_per_gpu:,.0f}")
    table.add_row("Model TFLOP/s per GPU", f"{est.model_tflops_per_gpu:,.1f}")
    table.add_row("MFU", f"{100 * est.mfu:.1f}%")
    return table


def _memory_table(memory: MemoryBreakdown, pp: int) -> Table:
    peak = f"Peak (pipeline stage {memory.stage})" if pp > 1 else "Peak"
    table = Table(title="Memory per GPU", title_justify="left")
    table.add_column("Component")
    table.add_column("GiB", justify="right")
    for attr, label in MEMORY_ROWS:
        table.add_row(label, f"{getattr(memory, attr) / GIB:.1f}")
    table.add_section()
    table.add_row(peak, f"{memory.peak_bytes / GIB:.1f}", style="bold")
    table.add_row("Capacity", f"{memory.capacity_bytes / GIB:.1f}")
    return table


def verdict(memory: MemoryBreakdown) -> Text:
    """``fits, 12.3 GiB headroom`` or ``does NOT fit: needs 93.1 GiB per GPU, has 80.0 GiB``."""
    if memory.fits:
        return Text(f"fits, {memory.headroom_bytes / GIB:.1f} GiB headroom", style="bold green")
    return Text(f"does NOT fit: needs {memory.peak_bytes / GIB:.1f} GiB per GPU, has "
                f"{memory.capacity_bytes / GIB:.1f} GiB", style="bold red")


def _tiers_table(tiers: dict[str, str]) -> RenderableType:
    if not tiers:
        return Text("Communicating groups: none (one GPU per group)")
    table = Table(title="Bottleneck tiers", title_justify="left")
    table.add_column("Group")
    table.add_column("Slowest tier crossed")
    for kind, tier in tiers.items():
        table.add_row(GROUP_NAMES.get(kind, kind), tier)
    return table


def render_estimate(est: Estimate, model: ModelSpec, cluster: Cluster) -> RenderableType:
    """The ``planner estimate`` view: header, step time, throughput, memory, verdict, tiers."""
    return Group(_header(est, model, cluster), Text(), _time_table(est.time),
                 _throughput_table(est), _memory_table(est.memory, est.config.pp),
                 verdict(est.memory), Text(), _tiers_table(est.tiers))
