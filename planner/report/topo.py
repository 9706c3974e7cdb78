"""``topo show`` and ``topo list``: rich renderables of a cluster and of the preset registry.

These only format: the figures come from the :class:`~topologies.cluster.Cluster` and from
:func:`~topologies.graph.tier_summary`.
"""
from __future__ import annotations

from typing import Mapping

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from planner.report.fit import Col, FitTable, Row
from topologies.catalog import GIB
from topologies.cluster import Cluster, NodeGroup
from topologies.graph import TierRow, nic_text, tier_summary

__all__ = ["render_topology", "render_presets"]


def _number(value: float) -> str:
    """Three significant figures below 100, whole numbers with separators above."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _group_row(group: NodeGroup) -> list[str]:
    bf16_flops = group.gpu.peak_flops.get("bf16")
    return [group.name, str(group.count), group.gpu.name, str(group.gpus_per_node),
            f"{group.gpu.hbm_bytes / GIB:,.0f} GiB",
            _number(bf16_flops / 1e12) if bf16_flops else "-",
            group.fabric + (f" ({group.nvlink_domain_nodes}-node domain)"
                            if group.nvlink_domain_nodes > 1 else ""),
            nic_text(group) or "-"]


GROUP_COLUMNS = (Col("Group"), Col("Nodes", "right"), Col("GPU"), Col("GPUs/node", "right"),
                 Col("HBM/GPU", "right", drop=1), Col("BF16 TFLOP/s", "right", drop=2),
                 Col("Fabric", fold=True), Col("NICs/node", fold=True))
TIER_COLUMNS = (Col("Tier"), Col("Connects", fold=True), Col("Count", "right"),
                Col("GB/s per GPU", "right"), Col("Latency us", "right"))


def _groups_table(cluster: Cluster) -> FitTable:
    return FitTable(GROUP_COLUMNS, [Row(tuple(_group_row(g))) for g in cluster.node_groups],
                    title="Node groups", title_justify="left")


def _tiers_table(rows: list[TierRow]) -> FitTable:
    return FitTable(TIER_COLUMNS,
                    [Row((row.name, row.connects, f"{row.count:,}",
                          _number(row.bw_per_gpu_GBps), _number(row.latency_us)))
                     for row in rows],
                    title="Tiers (bandwidth: one direction, one GPU's share)",
                    title_justify="left")


def _totals(cluster: Cluster) -> Text:
    hbm_bytes = sum(g.num_gpus * g.gpu.hbm_bytes for g in cluster.node_groups)
    return Text(f"Total: {cluster.num_gpus:,} GPUs on {cluster.num_nodes:,} nodes, "
                f"{hbm_bytes / GIB:,.0f} GiB HBM")


def render_topology(cluster: Cluster) -> RenderableType:
    """The ``topo show`` view: title, node groups, tiers, totals."""
    title = Text(cluster.name, style="bold")
    if cluster.description:
        title.append(f": {cluster.description}", style="")
    return Group(title, _groups_table(cluster), _tiers_table(tier_summary(cluster)),
                 _totals(cluster))


def render_presets(rows: Mapping[str, str], title: str = "Cluster presets") -> Table:
    """A preset list (``topo list``, ``presets``): name and what it is for."""
    table = Table(title=title, title_justify="left")
    table.add_column("Name", style="bold", no_wrap=True)
    table.add_column("Description")
    for name, description in rows.items():
        table.add_row(name, description)
    return table
