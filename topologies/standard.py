"""Standard clusters by GPU name: a vendor's usual node per GPU and :func:`homogeneous_cluster`.

``planner solve --gpu H100 --nodes 4`` and the tests need a cluster without a file: this
module picks the usual node for the GPU (GPUs, fabric, compute NICs), puts the nodes under a
non-blocking rail-optimised leaf/spine and validates the result as a cluster file would be
(:func:`topologies.spec.cluster_from_dict`).
"""
from __future__ import annotations

from dataclasses import dataclass

from topologies.catalog import GpuSpec, get_gpu
from topologies.cluster import Cluster
from topologies.spec import cluster_from_dict

__all__ = ["NodeType", "NODE_TYPES", "GPU_NODE_TYPES", "LEAF_GPUS", "node_type_for",
           "homogeneous_cluster"]


@dataclass(frozen=True)
class NodeType:
    """A vendor's usual node for one GPU: GPUs, fabric and compute NICs (storage NICs left out)."""

    label: str
    gpus_per_node: int
    fabric: str
    nic_count: int
    nic_gbps: float
    transport: str
    nvlink_domain_gpus: int = 0  # rack-scale NVLink domain (GB200 NVL72: 72); 0 = one node


# Node types: shared/data/gpu_specs.json "node_types" (DGX A100/H100/B200/B300, HGX H800 per
# the DeepSeek-V3 report, GB200 NVL72); DGX-1/DGX-2 from NVIDIA's system guides; the PCIe,
# H20 and MI300X servers are typical configurations (estimates).
NODE_TYPES: dict[str, NodeType] = {
    "dgx-1": NodeType("DGX-1 (V100)", 8, "nvlink", 4, 100, "ib"),
    "dgx-2": NodeType("DGX-2", 16, "nvswitch", 8, 100, "ib"),
    "dgx-a100": NodeType("DGX A100", 8, "nvswitch", 8, 200, "ib"),
    "dgx-h100": NodeType("DGX H100", 8, "nvswitch", 8, 400, "ib"),
    "hgx-h800": NodeType("HGX H800", 8, "nvswitch", 8, 400, "ib"),
    "hgx-h20": NodeType("HGX H20", 8, "nvswitch", 4, 400, "roce"),
    "dgx-b200": NodeType("DGX B200", 8, "nvswitch", 8, 400, "ib"),
    "dgx-b300": NodeType("DGX B300", 8, "nvswitch", 8, 800, "roce"),
    "gb200-nvl72": NodeType("GB200 NVL72 tray", 4, "nvswitch", 4, 400, "ib", 72),
    "gb300-nvl72": NodeType("GB300 NVL72 tray", 4, "nvswitch", 4, 800, "ib", 72),
    "pcie-gen4": NodeType("PCIe Gen4 server", 8, "pcie", 4, 200, "roce"),
    "pcie-gen5": NodeType("PCIe Gen5 server", 8, "pcie", 4, 400, "roce"),
    "l40s-pcie": NodeType("L40S PCIe server", 8, "pcie", 2, 200, "roce"),
    "mi300x": NodeType("MI300X platform", 8, "xgmi", 8, 400, "roce"),
}

# DGX-1 carries V100-SXM2 (hybrid cube-mesh NVLink); DGX-2 carries the SXM3 part.
GPU_NODE_TYPES: dict[str, str] = {
    "V100-SXM2-32GB": "dgx-1", "V100-SXM3-32GB": "dgx-2",
    "A100-SXM4-40GB": "dgx-a100", "A100-SXM4-80GB": "dgx-a100", "A100-PCIe-80GB": "pcie-gen4",
    "H100-SXM5-80GB": "dgx-h100", "H100-SXM5-96GB-HBM2e-500W": "dgx-h100",
    "H100-PCIe-80GB": "pcie-gen5", "H100-NVL-94GB": "pcie-gen5", "H200-SXM-141GB": "dgx-h100",
    "H800-SXM5-80GB": "hgx-h800", "H20-96GB": "hgx-h20", "B200": "dgx-b200", "B300": "dgx-b300",
    "GB200": "gb200-nvl72", "GB300": "gb300-nvl72", "L40S": "l40s-pcie",
    "MI300X": "mi300x", "MI325X": "mi300x",
}

LEAF_GPUS = 256  # GPUs below one rail leaf: a DGX SuperPOD scalable unit is 32 x 8 GPUs


def node_type_for(gpu: GpuSpec) -> NodeType:
    """The usual node for ``gpu``; GPUs new to the catalog get an 8-GPU IB node."""
    if gpu.name in GPU_NODE_TYPES:
        return NODE_TYPES[GPU_NODE_TYPES[gpu.name]]
    fabric = "nvswitch" if gpu.nvlink_bw_bytes_per_s > 0 else "pcie"
    return NodeType(f"8-GPU {fabric} server", 8, fabric, 8, 400, "ib")


def homogeneous_cluster(gpu_name: str, nodes: int, gpus_per_node: int | None = None,
                        domain_gpus: int | None = None) -> Cluster:
    """``nodes`` of ``gpu_name``'s usual node under a non-blocking rail-optimised leaf/spine.

    For rack-scale parts (GB200, GB300) a node is one compute tray of 4 GPUs and 18 trays share
    an NVLink domain. ``gpus_per_node`` overrides the node size; NICs scale with it;
    ``domain_gpus`` overrides the GPUs used per NVLink domain (a job on 16 of a rack's 18 trays:
    64). Raises
    ``UnknownGpuError`` for a GPU not in the catalog, ``ValueError`` for counts below 1.
    """
    gpu = get_gpu(gpu_name)
    if nodes < 1 or (gpus_per_node is not None and gpus_per_node < 1):
        raise ValueError(f"nodes ({nodes}) and gpus_per_node ({gpus_per_node}) must be >= 1")
    node = node_type_for(gpu)
    per_node = gpus_per_node or node.gpus_per_node
    domain_nodes = max(1, (domain_gpus or node.nvlink_domain_gpus) // per_node)
    leaf_nodes = max(domain_nodes, LEAF_GPUS // per_node // domain_nodes * domain_nodes)
    group = {
        "name": "nodes", "count": nodes, "gpu": gpu.name, "gpus_per_node": per_node,
        "fabric": node.fabric, "nvlink_domain_nodes": min(domain_nodes, nodes),
        "nics": [{"count": max(1, round(node.nic_count * per_node / node.gpus_per_node)),
                  "gbps": node.nic_gbps, "transport": node.transport}],
    }
    tiers = [{"name": "leaf", "nodes_per_switch": leaf_nodes},
             {"name": "spine", "nodes_per_switch": max(nodes, leaf_nodes)}]
    return cluster_from_dict({
        "name": f"{gpu.name}-x{nodes * per_node}",
        "description": f"{nodes} x {node.label} ({nodes * per_node} {gpu.name}), non-blocking "
                       f"rail-optimised leaf/spine",
        "node_groups": [group], "network": {"rail_optimized": True, "tiers": tiers},
    })