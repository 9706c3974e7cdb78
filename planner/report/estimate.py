"""``planner estimate``'s table view, and the step-time and memory tables ``planner explain``
shares with it.

Reads the plain estimate object of :func:`planner.training.estimate_json.estimate_to_dict` (the
``--format json`` output, also a plan's ``prediction``). These only format: every figure comes
from that object, the cluster (GPU names) and the model's layer count; nothing is computed
beyond unit conversion and the share of the step each component takes.
"""
from __future__ import annotations

from typing import Any, Mapping

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from topologies.catalog import GIB
from topologies.cluster import Cluster

__all__ = ["TIME_ROWS", "MEMORY_ROWS", "GROUP_NAMES", "render_estimate", "time_table",
           "memory_table", "verdict"]

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
GROUP_NAMES = {"tp": "TP", "cp": "CP", "dp": "DP", "dp_cp": "DP x CP", "pp": "PP", "ep": "EP",
               "edp": "EDP"}
_CHOSEN_NAMES = {"recompute": "recompute", "micro_batch": "micro-batch", "etp": "etp"}


def _gpu_names(cluster: Cluster) -> str:
    return ", ".join(dict.fromkeys(group.gpu.name for group in cluster.node_groups))


def _header(est: Mapping[str, Any], cluster: Cluster, num_layers: int) -> Text:
    cfg, work = est["config"], est["workload"]
    title = Text(f"{est['model']} on {est['cluster']}", style="bold")
    title.append(f": {est['num_gpus']:,} x {_gpu_names(cluster)}, {num_layers} layers\n",
                 style="")
    title.append(f"tp {cfg['tp']} · pp {cfg['pp']} · dp {cfg['dp']} · cp {cfg['cp']} · ep "
                 f"{cfg['ep']} · etp {cfg['expert_tp']} · vpp {cfg['vpp']} · schedule "
                 f"{cfg['schedule']}\n")
    title.append(f"global batch {work['global_batch']:,} x {work['seq_len']:,} tokens in "
                 f"{cfg['micro_batches']:,} micro-batches of {cfg['micro_batch']}\n")
    title.append(f"{work['precision']} · recompute {cfg['recompute']} · ZeRO-{cfg['zero']} · "
                 f"sequence parallel {'on' if cfg['sequence_parallel'] else 'off'}")
    if cfg.get("recompute_modules"):  # named when set, as the plan's options
        title.append(f"\nrecompute modules {', '.join(cfg['recompute_modules'])}")
    if cfg.get("attention", "flash") != "flash":  # the default kernels go unnamed
        title.append(f" · attention {cfg['attention']}")
    if cfg.get("cuda_graphs", "none") != "none":  # as the plan's options: named when set
        title.append(f"\nCUDA graphs {cfg['cuda_graphs']} (captured kernels cost the CPU no "
                     "launch)")
    fused = [name for key, name in (("fp8_attention", "fp8 attention"),
                                     ("fused_grouped_mlp", "fused grouped MLP")) if cfg.get(key)]
    if fused:
        title.append("\n" + " · ".join(fused))
    chosen = est.get("chosen")
    if chosen:
        picked = ", ".join(f"{_CHOSEN_NAMES.get(k, k)} {v}" for k, v in chosen.items())
        title.append(f"\nchosen (auto, fastest that fits): {picked}", style="cyan")
    return title


def time_table(time: Mapping[str, float]) -> Table:
    """Seconds per component of the step and each one's share (``time``: the estimate's)."""
    table = Table(title="Step time", title_justify="left")
    table.add_column("Component")
    table.add_column("Seconds", justify="right")
    table.add_column("% of step", justify="right")
    for key, label in TIME_ROWS:
        table.add_row(label, f"{time[key]:.3f}", f"{100 * time[key] / time['step_s']:.1f}",
                      style="dim" if time[key] == 0 else None)
    table.add_section()
    table.add_row("Step", f"{time['step_s']:.3f}", "100.0", style="bold")
    return table


def _throughput_table(est: Mapping[str, Any]) -> Table:
    table = Table(title="Throughput", title_justify="left", show_header=False)
    table.add_column("Metric")
    table.add_column("Value", justify="right")
    table.add_row("Step time", f"{est['step_time_s']:.3f} s")
    table.add_row("Tokens/s per GPU", f"{est['tokens_per_s_per_gpu']:,.0f}")
    table.add_row("Model TFLOP/s per GPU", f"{est['model_tflops_per_gpu']:,.1f}")
    table.add_row("MFU", f"{100 * est['mfu']:.1f}%")
    return table


def memory_table(memory: Mapping[str, Any], title: str, peak_label: str) -> Table:
    """GiB per component on the most loaded GPU, its peak and the capacity."""
    table = Table(title=title, title_justify="left")
    table.add_column("Component")
    table.add_column("GiB", justify="right")
    for key, label in MEMORY_ROWS:
        table.add_row(label, f"{memory[key] / GIB:.1f}")
    table.add_section()
    table.add_row(peak_label, f"{memory['peak_bytes_per_gpu'] / GIB:.1f}", style="bold")
    table.add_row("Capacity", f"{memory['capacity_bytes_per_gpu'] / GIB:.1f}")
    return table


def verdict(memory: Mapping[str, Any]) -> Text:
    """``fits, 12.3 GiB headroom`` or ``does NOT fit: needs 93.1 GiB per GPU, has 80.0 GiB``."""
    peak, capacity = memory["peak_bytes_per_gpu"], memory["capacity_bytes_per_gpu"]
    if peak <= capacity:
        return Text(f"fits, {memory['headroom_bytes_per_gpu'] / GIB:.1f} GiB headroom",
                    style="bold green")
    return Text(f"does NOT fit: needs {peak / GIB:.1f} GiB per GPU, has "
                f"{capacity / GIB:.1f} GiB", style="bold red")


def _tiers_table(tiers: Mapping[str, str]) -> RenderableType:
    if not tiers:
        return Text("Communicating groups: none (one GPU per group)")
    table = Table(title="Bottleneck tiers", title_justify="left")
    table.add_column("Group")
    table.add_column("Slowest tier crossed")
    for kind, tier in tiers.items():
        table.add_row(GROUP_NAMES.get(kind, kind), tier)
    return table


def render_estimate(est: Mapping[str, Any], cluster: Cluster, num_layers: int
                    ) -> RenderableType:
    """The ``planner estimate`` view of one estimate object: header, step time, throughput,
    memory, verdict, tiers."""
    memory = est["memory"]
    pp = est["config"]["pp"]
    peak = f"Peak (pipeline stage {memory['stage']})" if pp > 1 else "Peak"
    return Group(_header(est, cluster, num_layers), Text(), time_table(est["time"]),
                 _throughput_table(est), memory_table(memory, "Memory per GPU", peak),
                 verdict(memory), Text(), _tiers_table(est["tiers"]))
