"""Import the topology files users already have into cluster specs (``planner topo import``).

Four readers, each a pure function from text to an :class:`Imported`: a plain ``dict`` in the
cluster YAML schema (:mod:`topologies.spec`) plus the notes that say what was assumed.

* ``nvidia-smi``: the ``nvidia-smi topo -m`` matrix of one node (GPU/NIC rows and columns of
  ``X``, ``NV#``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``), its CPU/NUMA affinity columns and
  its ``NIC Legend``. Tab- or space-separated, with or without the underline escape codes newer
  drivers print around the header; older outputs name the NICs (``mlx5_0``) in the header.
* ``nccl-xml``: an NCCL topology XML (``NCCL_TOPO_FILE`` / ``NCCL_TOPO_DUMP_FILE``): GPUs
  (``<gpu>`` or PCI class ``0x0302xx``/``0x0300xx``), NICs (``<net>`` or PCI class
  ``0x0207xx``/``0x0200xx``), NVLinks (``<nvlink>``).
* ``slurm``: Slurm's ``topology.yaml`` (tree and block plugins): switches or blocks and their
  nodes (hostlist expressions such as ``node[01-04]``).
* ``astra-sim``: an ASTRA-sim analytical network YAML (``topology``, ``npus_count``,
  ``bandwidth``, ``latency`` per dimension).

What a file does not say (the GPU model, NIC line rate and transport, the node count of a
one-node file) comes from :class:`ImportOptions` or a stated default, and each such choice is
a note. Every malformed input raises :class:`~planner.errors.SpecError` naming the file, the
line when known, and what was expected. Inputs are capped at :data:`MAX_INPUT_BYTES`; XML with
DOCTYPE or ENTITY declarations is refused (no entity expansion).
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import ValidationError

from planner.errors import SpecError
from planner.inputs.clusters import OPTIONS_SOURCE
from planner.inputs.documents import (MAX_NESTING, bad_value_error, check_document,
                                      check_yaml_text, parse_yaml, yaml_loader_for)
from planner.inputs.limits import CLUSTER_NODES, TOPOLOGY_FILE_BYTES, check
from topologies.catalog import UnknownGpuError, get_gpu
from topologies.cluster import TOPO_FILE
from topologies.spec import cluster_from_dict
from topologies.standard import LEAF_GPUS, node_type_for

__all__ = ["FORMATS", "MAX_INPUT_BYTES", "DEFAULT_GPU", "DEFAULT_NIC_GBPS", "DEFAULT_TRANSPORT",
           "ImportOptions", "Imported", "import_topology", "read_topology_text", "detect_format",
           "parse_nvidia_smi", "parse_nccl_xml", "parse_slurm_topology", "parse_astra_sim",
           "expand_hostlist"]

FORMATS = ("nvidia-smi", "nccl-xml", "slurm", "astra-sim")
MAX_INPUT_BYTES = TOPOLOGY_FILE_BYTES.maximum
# A hostlist expanding past this is refused (no runaway expansion).
MAX_HOSTS = CLUSTER_NODES.maximum
HOSTS_EXPECTED = f"at most {MAX_HOSTS:,} host names in all ({CLUSTER_NODES.reason})"
DEFAULT_GPU = "H100"
DEFAULT_NIC_GBPS = 400.0  # NDR InfiniBand / 400GbE, the usual H100-generation compute NIC
DEFAULT_TRANSPORT = "ib"
TRANSPORTS = ("ib", "roce", "tcp")
# NVLinks one GPU of this generation has in all: a pair showing NV# with NV# x (GPUs - 1) above
# this cannot be direct links, so the pairs meet through NVSwitches.
MAX_NVLINKS_PER_GPU = 18
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NV = re.compile(r"NV(\d+)$")
_LINKS = ("X", "SYS", "NODE", "PHB", "PXB", "PIX", "SOC")  # SOC: old drivers' name for SYS
_RAIL_LINKS = ("PIX", "PXB")  # a NIC on the GPU's own PCIe switch (tree): its rail NIC
# PCI device ids NCCL writes in <pci device=...> (vendor 0x10de), as in nvidia-smi -q.
_PCI_GPUS = {"0x2330": "H100-SXM5-80GB", "0x2335": "H200-SXM-141GB",
             "0x20b0": "A100-SXM4-40GB", "0x20b2": "A100-SXM4-80GB"}
# Compute capability (<gpu sm=...>) to a GPU of that generation, when the device id is unknown.
_SM_GPUS = {70: "V100-SXM2-32GB", 80: "A100-SXM4-80GB", 90: "H100-SXM5-80GB", 100: "B200",
            103: "B300"}


@dataclass(frozen=True)
class ImportOptions:
    """What the user adds on the command line; ``None`` lets the file or a default decide."""

    gpu: str | None = None
    nodes: int | None = None
    nic_gbps: float | None = None
    transport: str | None = None
    name: str | None = None
    nccl_topo_file: str | None = None  # where the nodes keep an NCCL topology XML


@dataclass
class Imported:
    """A cluster spec in the YAML schema's shape, and what was assumed to build it."""

    spec: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    format: str = ""
    source: str = ""

    def to_yaml(self) -> str:
        """The spec as a cluster YAML file, its notes as a comment block on top."""
        head = [f"# Imported by 'planner topo import' from {Path(self.source).name} "
                f"({self.format})."]
        head += [f"# - {note}" for note in self.notes]
        body = yaml.safe_dump(self.spec, sort_keys=False, default_flow_style=None, width=100)
        return "\n".join(head) + "\n" + body


# --- entry points ----------------------------------------------------------------------------


def import_topology(path: str | Path, fmt: str = "auto",
                    options: ImportOptions | None = None) -> Imported:
    """Read ``path``, detect or check its format, parse it and validate the cluster it gives."""
    options = options or ImportOptions()
    _check_options(options)
    source = str(path)
    text = read_topology_text(path)
    if fmt == "auto":
        fmt = detect_format(text, source)
    elif fmt not in FORMATS:
        raise SpecError(OPTIONS_SOURCE, "--format", f"one of auto, {', '.join(FORMATS)}", got=fmt)
    parser: Callable[[str, str, ImportOptions], Imported] = _PARSERS[fmt]
    imported = parser(text, source, options)
    imported.format, imported.source = fmt, source
    imported.spec = {"name": options.name or _name_from(source), **imported.spec}
    _topo_file(imported, options)
    _validate(imported.spec, source)
    return imported


def _topo_file(imported: Imported, options: ImportOptions) -> None:
    """Every node group gets ``--nccl-topo-file``; an NCCL XML without it gets a note (NCCL
    reads the XML only where NCCL_TOPO_FILE names it, and only the user knows that path)."""
    if options.nccl_topo_file is not None:
        for group in imported.spec["node_groups"]:
            group["nccl_topo_file"] = options.nccl_topo_file
    elif imported.format == "nccl-xml":
        imported.notes.append("NCCL loads a topology XML only where NCCL_TOPO_FILE names it "
                              "(virtual machines whose PCI tree hides the GPU-NIC layout need "
                              "it): pass --nccl-topo-file /path/on/the/nodes so the launch "
                              "files set it")


def read_topology_text(path: str | Path) -> str:
    """The file's text: an existing, non-empty, UTF-8 text file of at most 16 MiB."""
    path, source = Path(path), str(path)
    if path.is_dir():
        raise SpecError(source, "", "a topology file, not a directory")
    try:
        size = path.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise SpecError(source, "", f"a topology file of {TOPOLOGY_FILE_BYTES.expected()}; "
                            f"it has {size / 2**20:.1f} MiB")
        with path.open("rb") as handle:
            data = handle.read(MAX_INPUT_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(source, "", "an existing topology file (no such file)") from None
    except OSError as err:
        raise SpecError(source, "", f"a readable file ({err.strerror})") from None
    if len(data) > MAX_INPUT_BYTES:
        raise SpecError(source, "", f"a topology file of {TOPOLOGY_FILE_BYTES.expected()}")
    if b"\x00" in data:
        at = data.index(b"\x00")
        raise SpecError(f"{source}:{_line_at(data, at)}", "",
                        f"a text file (found binary data: a NUL byte at offset {at})")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise SpecError(f"{source}:{_line_at(data, err.start)}", "",
                        f"UTF-8 text (undecodable byte at offset {err.start})") from None
    if not text.strip():
        raise SpecError(source, "", "a topology file, got an empty file")
    return text


def _line_at(data: bytes, offset: int) -> int:
    """1-based line of byte ``offset``."""
    return data.count(b"\n", 0, offset) + 1


def detect_format(text: str, source: str) -> str:
    """``nvidia-smi``, ``nccl-xml``, ``slurm`` or ``astra-sim``, read from the content."""
    stripped = text.lstrip()
    if stripped.startswith("<"):
        return "nccl-xml"
    if _find_header(text.splitlines()) is not None:
        return "nvidia-smi"
    try:
        data = parse_yaml(text, source)
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict) and {"npus_count", "topology"} <= set(data):
        return "astra-sim"
    if isinstance(data, list) and data and all(isinstance(t, dict) and "topology" in t
                                               for t in data):
        return "slurm"
    if isinstance(data, dict) and ("topology" in data or "switches" in data or "blocks" in data):
        return "slurm"
    raise SpecError(source, "", "a topology file planner can import: nvidia-smi topo -m text "
                    "(a header line starting with GPU0), an NCCL topology XML (<system>), a "
                    "Slurm topology.yaml or an ASTRA-sim network YAML; or name it with --format")


# --- nvidia-smi topo -m --------------------------------------------------------------------------


def parse_nvidia_smi(text: str, source: str, options: ImportOptions) -> Imported:
    """One node from ``nvidia-smi topo -m``: GPUs, NVLink fabric, rail NICs in GPU order."""
    lines = [_ANSI.sub("", line).rstrip("\r") for line in text.splitlines()]
    header_at = _find_header(lines)
    if header_at is None:
        raise SpecError(source, "", "nvidia-smi topo -m output: a header line of device "
                        "columns starting with GPU0 (GPU0 GPU1 ... NIC0 ... CPU Affinity)")
    devices, extras = _header_columns(lines[header_at])
    rows, affinity, end = _matrix_rows(lines, header_at, devices, extras, source)
    legend = _nic_legend(lines, end, source)
    gpus = [d for d in devices if re.fullmatch(r"GPU\d+", d)]
    nics = [d for d in devices if d not in gpus]
    for label, (_, line) in legend.items():
        if label not in nics:
            raise SpecError(f"{source}:{line}", "", f"NIC Legend entries for the NIC columns of "
                            f"the matrix ({', '.join(nics) or 'none'})", got=label)
    notes: list[str] = []
    gpu = _gpu_choice(options, notes, "nvidia-smi topo -m does not name the GPU model"
                      + _nv_hint(gpus, rows))
    fabric = _smi_fabric(gpus, rows, notes)
    group: dict[str, Any] = {"name": "nodes", "count": 1, "gpu": gpu,
                             "gpus_per_node": len(gpus), "fabric": fabric}
    names = {nic: legend[nic][0] if nic in legend else nic for nic in nics}
    rails = _rail_nics(gpus, nics, rows, names, notes)
    if rails:
        nic: dict[str, Any] = {"count": len(rails)}
        nic.update(_nic_rate(options, notes, "nvidia-smi topo -m does not give NIC speeds"))
        if all(re.fullmatch(r"NIC\d+", n) for n in nics) and not legend:
            notes.append("no NIC Legend: NIC device names unknown, devices left out")
        else:
            nic["devices"] = [names[n] for n in rails]
        group["nics"] = [nic]
    numa = _numa_note(gpus, affinity)
    if numa:
        notes.append(numa)
    return _one_node_cluster(group, options, notes,
                             f"{len(gpus)} GPUs, {len(rails)} rail NICs from nvidia-smi topo -m")


def _find_header(lines: list[str]) -> int | None:
    """Index of the matrix header: the first line whose first cell is GPU0 and second is not X."""
    for i, line in enumerate(lines):
        tokens = _ANSI.sub("", line).split()
        if tokens and tokens[0] == "GPU0" and (len(tokens) == 1 or tokens[1] != "X"):
            return i
    return None


def _header_columns(header: str) -> tuple[list[str], list[str]]:
    """Device columns (GPU0.., NIC0.. or mlx5_0..: names with a digit) and the affinity
    columns after them (CPU Affinity, NUMA Affinity, GPU NUMA ID), in header order."""
    cells = header.split("\t") if "\t" in header else header.split()
    devices: list[str] = []
    for cell in (c.strip() for c in cells if c.strip()):
        if " " in cell or not re.search(r"\d", cell):
            break
        devices.append(cell)
    extras = sorted((name for name in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
                     if name in header), key=header.index)
    return devices, extras


def _matrix_rows(lines: list[str], header_at: int, devices: list[str], extras: list[str],
                 source: str) -> tuple[dict[str, list[str]], dict[str, dict[str, str]], int]:
    """Each device's row of link types, each GPU's affinity cells, and the line after the matrix."""
    rows: dict[str, list[str]] = {}
    affinity: dict[str, dict[str, str]] = {}
    n, i = len(devices), header_at + 1
    while i < len(lines) and len(rows) < n:
        line = lines[i]
        if not line.strip():
            break
        label, cells, rest = _row_cells(line, n)
        expected = devices[len(rows)]
        where = f"{source}:{i + 1}"
        if label != expected:
            raise SpecError(where, "", f"the matrix row for {expected} (rows follow the header "
                            f"order {' '.join(devices)})", got=label)
        if len(cells) < n:
            raise SpecError(where, "", f"{n} link cells in the row for {label} (one per header "
                            f"column), got {len(cells)}")
        for j, cell in enumerate(cells):
            if cell not in _LINKS and not _NV.fullmatch(cell):
                raise SpecError(where, "", f"a link type (X, NV#, PIX, PXB, PHB, NODE, SYS) in "
                                f"column {devices[j]}", got=cell)
            if (cell == "X") != (j == len(rows)):
                raise SpecError(where, "", f"X exactly on the diagonal ({label} to itself), got "
                                f"{cell!r} in column {devices[j]}")
            if j < len(rows) and rows[devices[j]][len(rows)] != cell:
                raise SpecError(where, "", f"a symmetric matrix: {label}-{devices[j]} is {cell} "
                                f"but {devices[j]}-{label} is {rows[devices[j]][len(rows)]}")
        rows[label] = ["SYS" if c == "SOC" else c for c in cells]
        affinity[label] = dict(zip(extras, rest))
        i += 1
    if len(rows) < n:
        missing = devices[len(rows)]
        raise SpecError(f"{source}:{i}", "", f"a complete matrix: the header lists {n} devices "
                        f"but the rows stop before {missing} (truncated output?)")
    return rows, affinity, i


def _row_cells(line: str, n: int) -> tuple[str, list[str], list[str]]:
    """A row's label, its ``n`` link cells and the affinity cells after them."""
    if "\t" in line:
        fields = [f.strip() for f in line.split("\t")]
        return fields[0], fields[1:1 + n], fields[1 + n:]
    tokens = line.split()
    return (tokens[0] if tokens else ""), tokens[1:1 + n], tokens[1 + n:]


def _nic_legend(lines: list[str], start: int, source: str) -> dict[str, tuple[str, int]]:
    """``NICk -> (device name, line)`` from the ``NIC Legend:`` block, if there is one."""
    legend: dict[str, tuple[str, int]] = {}
    inside = False
    for i in range(start, len(lines)):
        line = lines[i].strip()
        if line.startswith("NIC Legend"):
            inside = True
            continue
        if not inside or not line:
            continue
        match = re.fullmatch(r"(NIC\d+)\s*:\s*(\S+)", line)
        if not match:
            raise SpecError(f"{source}:{i + 1}", "", "a NIC Legend line 'NICk: device' "
                            "(e.g. 'NIC0: mlx5_0')", got=line)
        legend[match.group(1)] = (match.group(2), i + 1)
    return legend


def _nv_hint(gpus: list[str], rows: dict[str, list[str]]) -> str:
    """A hint at the GPU model from the NVLinks per GPU pair (NV18 Hopper, NV12 A100, NV8 H800)."""
    if len(gpus) < 2:
        return ""
    match = _NV.fullmatch(rows[gpus[0]][list(rows).index(gpus[1])])
    hint = {18: "H100/H200/H20 or B200/B300", 12: "A100", 8: "H800"}.get(
        int(match.group(1)) if match else -1)
    return f"; NV{match.group(1)} between GPUs suggests {hint}" if hint else ""


def _smi_fabric(gpus: list[str], rows: dict[str, list[str]], notes: list[str]) -> str:
    """nvswitch when every GPU pair shows the same NV# and more links than direct ones allow."""
    n = len(gpus)
    col = {d: j for j, d in enumerate(rows)}
    pairs = [rows[a][col[b]] for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    counts = [int(m.group(1)) for m in map(_NV.fullmatch, pairs) if m]
    if not counts:
        if n > 1:
            notes.append("no NVLink between GPUs (no NV# cells): fabric pcie")
        return "pcie"
    if len(counts) == len(pairs) and len(set(counts)) == 1 and counts[0] * (n - 1) > \
            MAX_NVLINKS_PER_GPU:
        notes.append(f"every GPU pair shows NV{counts[0]}: all-to-all NVLink through NVSwitch "
                     f"(fabric nvswitch)")
        return "nvswitch"
    if len(counts) < len(pairs):
        notes.append(f"only {len(counts)} of {len(pairs)} GPU pairs have NVLink: fabric nvlink "
                     f"prices every pair at the NVLink bandwidth; check the pairs without it")
    else:
        spread = f"NV{min(counts)}" + (f"..NV{max(counts)}" if max(counts) > min(counts) else "")
        notes.append(f"GPU pairs joined by direct NVLinks ({spread}): fabric nvlink")
    return "nvlink"


def _rail_nics(gpus: list[str], nics: list[str], rows: dict[str, list[str]],
               names: dict[str, str], notes: list[str]) -> list[str]:
    """NICs on a GPU's own PCIe tree (PIX/PXB), ordered by the first GPU each serves."""
    if not nics:
        return []
    col = {d: j for j, d in enumerate(rows)}
    first_gpu: dict[str, int] = {}
    for nic in nics:
        near = [g for g, gpu in enumerate(gpus) if rows[nic][col[gpu]] in _RAIL_LINKS]
        if near:
            first_gpu[nic] = min(near)
    if not first_gpu:
        notes.append(f"no NIC sits on a GPU's PCIe switch (PIX/PXB): all {len(nics)} NICs "
                     f"taken as compute NICs, in legend order")
        return list(nics)
    rails = sorted(first_gpu, key=lambda nic: (first_gpu[nic], nics.index(nic)))
    order = ", ".join(f"{gpus[first_gpu[nic]]}->{names[nic]}" for nic in rails)
    notes.append(f"rail NICs (PIX/PXB to a GPU), in GPU order: {order}")
    others = [names[nic] for nic in nics if nic not in first_gpu]
    if others:
        notes.append(f"left out as not on any GPU's PCIe switch (storage/management?): "
                     f"{', '.join(others)}")
    return rails


def _numa_note(gpus: list[str], affinity: dict[str, dict[str, str]]) -> str | None:
    by_node: dict[str, list[str]] = {}
    for gpu in gpus:
        node = affinity.get(gpu, {}).get("NUMA Affinity", "")
        if node and node != "N/A":
            by_node.setdefault(node, []).append(gpu)
    if not by_node:
        return None
    parts = [f"node {node}: {' '.join(g)}" for node, g in by_node.items()]
    return f"NUMA affinity (not part of the spec): {'; '.join(parts)}"


# --- NCCL topology XML ---------------------------------------------------------------------------


def parse_nccl_xml(text: str, source: str, options: ImportOptions) -> Imported:
    """One node from an NCCL topology XML: GPUs, NICs (names, speeds), NVLinks."""
    declaration = re.search(r"<!\s*(DOCTYPE|ENTITY)", text, re.IGNORECASE)
    if declaration:
        line = text.count("\n", 0, declaration.start()) + 1
        raise SpecError(f"{source}:{line}", "", f"an NCCL topology XML without "
                        f"{declaration.group(1).upper()} declarations (refused: entity expansion)")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        line = err.position[0] if getattr(err, "position", None) else None
        message = str(err).split(":")[0]
        raise SpecError(f"{source}:{line}" if line else source, "",
                        f"well-formed XML ({message})") from None
    if root.tag != "system":
        raise SpecError(source, "", "an NCCL topology XML whose root element is <system>",
                        got=f"<{root.tag}>")
    pcis = list(root.iter("pci"))
    gpu_pcis = [p for p in pcis if p.get("class", "").lower().startswith(("0x0302", "0x0300"))]
    gpu_elems = list(root.iter("gpu"))
    n_gpus = max(len(gpu_pcis), len(gpu_elems))
    if n_gpus == 0:
        raise SpecError(source, "", "GPUs in the NCCL topology: <gpu> elements or <pci> "
                        "elements of class 0x0302xx (3D controller)")
    notes: list[str] = []
    gpu = _catalog_name(options.gpu) if options.gpu else _xml_gpu(gpu_pcis, gpu_elems, notes)
    group: dict[str, Any] = {"name": "nodes", "count": 1, "gpu": gpu, "gpus_per_node": n_gpus,
                             "fabric": _xml_fabric(gpu_elems, gpu, n_gpus, notes)}
    nics = _xml_nics(root, pcis, options, notes)
    if nics:
        group["nics"] = nics
    return _one_node_cluster(group, options, notes, f"{n_gpus} GPUs from an NCCL topology XML")


def _xml_gpu(gpu_pcis: list[ET.Element], gpu_elems: list[ET.Element], notes: list[str]) -> str:
    for pci in gpu_pcis:
        name = _PCI_GPUS.get(pci.get("device", "").lower())
        if name:
            notes.append(f"GPU {name} from the PCI device id {pci.get('device')}; --gpu overrides")
            return name
    for elem in gpu_elems:
        sm = elem.get("sm", "")
        if sm.isdigit() and int(sm) in _SM_GPUS:
            name = _SM_GPUS[int(sm)]
            notes.append(f"GPU {name} assumed from compute capability sm {sm} (the XML does not "
                         f"name the model); --gpu overrides")
            return name
    notes.append(f"GPU model assumed {get_gpu(DEFAULT_GPU).name} (the XML does not name it); "
                 f"pass --gpu")
    return get_gpu(DEFAULT_GPU).name


def _xml_fabric(gpu_elems: list[ET.Element], gpu: str, n_gpus: int, notes: list[str]) -> str:
    links = [link for elem in gpu_elems for link in elem.iter("nvlink")]
    if links:
        to_switch = [link for link in links if link.get("tclass", "").lower() == "0x068000"]
        per_gpu = max(sum(int(c) if (c := link.get("count", "1")).isdigit() else 1
                          for link in elem.iter("nvlink")) for elem in gpu_elems)
        if to_switch:
            notes.append(f"<nvlink> to NVSwitches (tclass 0x068000, up to {per_gpu} links per "
                         f"GPU): fabric nvswitch")
            return "nvswitch"
        notes.append(f"<nvlink> between GPUs ({len(links)} links): fabric nvlink")
        return "nvlink"
    if n_gpus == 1:
        return "pcie"
    usual = node_type_for(get_gpu(gpu)).fabric
    notes.append(f"the XML has no <nvlink> elements (a PCI-only skeleton, or NCCL finds NVLinks "
                 f"at run time): fabric {usual}, the usual one for {gpu}; edit it if wrong")
    return usual


def _xml_nics(root: ET.Element, pcis: list[ET.Element], options: ImportOptions,
              notes: list[str]) -> list[dict[str, Any]]:
    parent = {child: p for p in root.iter() for child in p}
    nets = list(root.iter("net"))
    if nets:
        by_rate: dict[tuple[float, str], list[str]] = {}
        names: list[str] = []
        for net in nets:
            name = net.get("name") or f"net{len(names)}"
            if name in names:
                name = f"{name}:{net.get('port', len(names))}"
            names.append(name)
            pci = _ancestor(net, parent, "pci")
            transport = options.transport or _pci_transport(pci)
            speed = net.get("speed", "")
            if options.nic_gbps:
                gbps = options.nic_gbps
            elif speed.replace(".", "", 1).isdigit() and float(speed) > 0:
                gbps = float(speed) / 1000  # NCCL writes Mbit/s
            else:
                gbps = DEFAULT_NIC_GBPS
                notes.append(f"{name}: no speed attribute, assumed {gbps:g} Gbit/s")
            by_rate.setdefault((gbps, transport), []).append(name)
        notes.append(f"NICs from <net>: {', '.join(names)} (speed Mbit/s -> Gbit/s)")
        if not options.transport:
            notes.append("transport from each NIC's PCI class (0x0207 InfiniBand -> ib, "
                         "0x0200 Ethernet -> roce); --transport overrides")
        return [{"count": len(devs), "gbps": gbps, "transport": transport, "devices": devs}
                for (gbps, transport), devs in by_rate.items()]
    nic_pcis = [p for p in pcis if p.get("class", "").lower().startswith(("0x0207", "0x0200"))]
    if not nic_pcis:
        return []
    ib = sum(p.get("class", "").lower().startswith("0x0207") for p in nic_pcis)
    notes.append(f"{len(nic_pcis)} NICs from <pci> classes ({ib} InfiniBand 0x0207xx, "
                 f"{len(nic_pcis) - ib} Ethernet 0x0200xx); the XML names no devices")
    nic: dict[str, Any] = {"count": len(nic_pcis)}
    default_transport = "ib" if ib == len(nic_pcis) else "roce"
    nic.update(_nic_rate(options, notes, "the XML gives no NIC speed", default_transport))
    return [nic]


def _ancestor(elem: ET.Element, parent: dict[ET.Element, ET.Element],
              tag: str) -> ET.Element | None:
    while elem in parent:
        elem = parent[elem]
        if elem.tag == tag:
            return elem
    return None


def _pci_transport(pci: ET.Element | None) -> str:
    if pci is not None and pci.get("class", "").lower().startswith("0x0200"):
        return "roce"
    return "ib"


# --- Slurm topology.yaml -------------------------------------------------------------------------


def parse_slurm_topology(text: str, source: str, options: ImportOptions) -> Imported:
    """Nodes and switching tiers from Slurm's topology.yaml (tree or block topology)."""
    data, lines = _load_yaml(text, source)
    entries = data if isinstance(data, list) else [data]
    if not entries or not all(isinstance(e, dict) for e in entries):
        raise SpecError(source, "", "a Slurm topology.yaml: a list of topologies, each a mapping "
                        "with topology and one of tree, block or flat")
    usable = [i for i, e in enumerate(entries) if "tree" in e or "block" in e]
    if not usable:
        raise SpecError(source, "", "a tree or block topology that lists nodes (flat "
                        "topologies name no nodes)")
    default = [i for i in usable if entries[i].get("cluster_default")]
    index = (default or usable)[0]
    entry = entries[index]
    notes: list[str] = []
    label = entry.get("topology", f"#{index}")
    others = [str(e.get("topology", f"#{i}")) for i, e in enumerate(entries) if i != index]
    notes.append(f"topology '{label}' ({'cluster default' if default else 'first with nodes'})"
                 + (f"; also in the file: {', '.join(others)}" if others else ""))
    prefix = (index,) if isinstance(data, list) else ()
    if "tree" in entry:
        hosts, tiers = _slurm_tree(entry["tree"], prefix + ("tree",), source, lines, notes)
    else:
        hosts, tiers = _slurm_block(entry["block"], prefix + ("block",), source, lines, notes)
    if options.nodes is not None and options.nodes != len(hosts):
        raise SpecError(OPTIONS_SOURCE, "--nodes", f"no --nodes, or {len(hosts)}: the Slurm "
                        f"topology lists {len(hosts)} nodes", got=options.nodes)
    gpu = _gpu_choice(options, notes, "topology.yaml does not say which GPUs the nodes hold")
    node = node_type_for(get_gpu(gpu))
    notes.append(f"each node taken as a {node.label}: {node.gpus_per_node} GPUs, fabric "
                 f"{node.fabric}, {node.nic_count} NICs")
    domain = max(1, node.nvlink_domain_gpus // node.gpus_per_node)
    nic: dict[str, Any] = {"count": node.nic_count}
    nic.update(_nic_rate(options, notes, "topology.yaml gives no NIC speeds",
                         node.transport, node.nic_gbps))
    group: dict[str, Any] = {"name": "nodes", "count": len(hosts), "gpu": gpu,
                             "gpus_per_node": node.gpus_per_node, "fabric": node.fabric}
    if domain > 1:
        group["nvlink_domain_nodes"] = min(domain, len(hosts))
    group.update({"nics": [nic], "hosts": hosts})
    spec = {"description": f"{len(hosts)} nodes from Slurm topology '{label}'",
            "node_groups": [group], "network": {"rail_optimized": False, "tiers": tiers}}
    notes.append("rail_optimized false: topology.yaml places nodes, not each NIC, under a switch")
    return Imported(spec, notes)


def _slurm_tree(tree: Any, at: tuple, source: str, lines: Callable[[tuple], int | None],
                notes: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    switches = tree.get("switches") if isinstance(tree, dict) else None
    if not isinstance(switches, list) or not switches:
        raise SpecError(_at(source, lines(at)), "tree", "a list of switches (tree: switches: "
                        "[{switch: name, nodes: hostlist} or {switch: name, children: hostlist}])")
    nodes_of: dict[str, list[str]] = {}
    children_of: dict[str, list[str]] = {}
    budget = [MAX_HOSTS]
    for k, sw in enumerate(switches):
        where = at + ("switches", k)
        if not isinstance(sw, dict) or not isinstance(sw.get("switch"), str) or not sw["switch"]:
            raise SpecError(_at(source, lines(where)), f"tree.switches.{k}.switch",
                            "a switch name")
        name = sw["switch"]
        if name in nodes_of:
            raise SpecError(_at(source, lines(where)), f"tree.switches.{k}.switch",
                            "a distinct name per switch", got=name)
        if "nodes" not in sw and "children" not in sw:
            raise SpecError(_at(source, lines(where)), f"tree.switches.{k}",
                            f"nodes or children for switch {name}")
        nodes_of[name] = _hosts_field(sw, "nodes", where, source, lines, budget)
        children_of[name] = _hosts_field(sw, "children", where, source, lines, budget)
    parent: dict[str, str] = {}
    for k, (name, children) in enumerate(children_of.items()):
        where = _at(source, lines(at + ("switches", k, "children")))
        for child in children:
            if child not in nodes_of:
                raise SpecError(where, f"tree.switches.{k}.children",
                                "names of switches listed in the tree", got=child)
            if child in parent or child == name:
                raise SpecError(where, f"tree.switches.{k}.children", f"each switch below one "
                                f"other switch ({child} is also below {parent.get(child, name)})")
            parent[child] = name
    # Levels (leaf 0) and nodes below each switch, leaves first: a switch is ready once all
    # its children are done; switches never ready sit on a cycle.
    waiting = {name: len(children) for name, children in children_of.items()}
    ready = [name for name, count in waiting.items() if count == 0]
    level: dict[str, int] = {}
    below: dict[str, int] = {}
    while ready:
        name = ready.pop()
        kids = children_of[name]
        level[name] = 1 + max(level[c] for c in kids) if kids else 0
        below[name] = len(nodes_of[name]) + sum(below[c] for c in kids)
        if name in parent:
            waiting[parent[name]] -= 1
            if waiting[parent[name]] == 0:
                ready.append(parent[name])
    if len(level) < len(nodes_of):
        cycle = [name for name in nodes_of if name not in level]
        raise SpecError(source, "tree.switches", f"a tree without cycles (switches "
                        f"{', '.join(cycle[:5])} are below themselves)")
    hosts: list[str] = []
    seen: dict[str, str] = {}
    for name, own in nodes_of.items():
        for host in own:
            if host in seen:
                k = list(nodes_of).index(name)
                raise SpecError(_at(source, lines(at + ("switches", k, "nodes"))),
                                f"tree.switches.{k}.nodes", f"each node under one leaf switch "
                                f"({host} is also under {seen[host]})")
            seen[host] = name
            hosts.append(host)
    if not hosts:
        raise SpecError(_at(source, lines(at)), "tree", "switches with nodes")
    reach = [0] * (max(level.values()) + 1)
    for name, lv in level.items():
        reach[lv] = max(reach[lv], below[name])
    for lv in range(1, len(reach)):
        reach[lv] = max(reach[lv], reach[lv - 1])
    roots = [s for s in nodes_of if s not in parent]
    if len(roots) > 1 or reach[-1] < len(hosts):
        notes.append(f"the tree has {len(roots)} top switches ({', '.join(roots)}); a top tier "
                     f"joining all {len(hosts)} nodes was added")
        reach.append(len(hosts))
    tiers = [{"name": _tier_name(lv, len(reach)), "nodes_per_switch": r}
             for lv, r in enumerate(reach)]
    notes.append("tiers from switch levels (nodes below the widest switch of each level); "
                 "oversubscription 1 and latency 1 us assumed")
    return hosts, tiers


def _slurm_block(block: Any, at: tuple, source: str, lines: Callable[[tuple], int | None],
                 notes: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    blocks = block.get("blocks") if isinstance(block, dict) else None
    if not isinstance(blocks, list) or not blocks:
        raise SpecError(_at(source, lines(at)), "block", "a list of blocks (block: blocks: "
                        "[{block: name, nodes: hostlist}])")
    hosts: list[str] = []
    seen: set[str] = set()
    widest = 0
    budget = [MAX_HOSTS]
    for k, b in enumerate(blocks):
        where = at + ("blocks", k)
        if not isinstance(b, dict) or "nodes" not in b:
            raise SpecError(_at(source, lines(where)), f"block.blocks.{k}",
                            "a block with a name and nodes")
        own = _hosts_field(b, "nodes", where, source, lines, budget)
        dup = next((h for h in own if h in seen), None)
        if dup:
            raise SpecError(_at(source, lines(where + ("nodes",))), f"block.blocks.{k}.nodes",
                            "each node in one block", got=dup)
        hosts += own
        seen.update(own)
        widest = max(widest, len(own))
    sizes = block.get("block_sizes") or []
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s > 0 for s in sizes):
        raise SpecError(_at(source, lines(at + ("block_sizes",))), "block.block_sizes",
                        "a list of whole numbers of nodes > 0", got=sizes)
    reach = sorted({widest, *(s for s in sizes if s > widest)})
    names = ["block"] + [f"block{r}" for r in reach[1:]]
    if reach[-1] < len(hosts):
        reach.append(len(hosts))
        names.append("cluster")
    tiers = [{"name": name, "nodes_per_switch": r} for name, r in zip(names, reach)]
    notes.append(f"tiers: a block of {widest} nodes, then block_sizes {sizes} and the whole "
                 f"cluster; if blocks are NVLink domains (NVL72 racks) set nvlink_domain_nodes")
    return hosts, tiers


def _tier_name(level: int, levels: int) -> str:
    names = ("leaf", "spine", "core")
    return names[level] if levels <= 3 else f"tier{level + 1}"


def _hosts_field(entry: dict, key: str, where: tuple, source: str,
                 lines: Callable[[tuple], int | None], budget: list[int]) -> list[str]:
    """The names a switch's or block's ``nodes``/``children`` hostlist expands to; ``budget``
    holds how many more names the whole file may expand to."""
    value = entry.get(key)
    if value is None:
        return []
    line = lines(where + (key,))
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        if not isinstance(item, (str, int)) or isinstance(item, bool):
            raise SpecError(_at(source, line), key, "a hostlist expression such as node[01-04]",
                            got=item)
        names = expand_hostlist(str(item), _at(source, line), limit=budget[0])
        budget[0] -= len(names)
        out += names
    return out


def expand_hostlist(expr: str, where: str = "hostlist", limit: int = MAX_HOSTS) -> list[str]:
    """Slurm hostlist: ``node[01-03,07],gpu5`` -> node01 node02 node03 node07 gpu5.

    Zero padding follows the range's lower bound; several bracket groups multiply
    (``r[1-2]n[1-2]``). Raises ``SpecError`` at ``where`` for a malformed expression or one of
    more than ``limit`` names.
    """
    names: list[str] = []
    for part in _split_top(expr.strip(), where, expr):
        if not part:
            raise SpecError(where, "", "a hostlist without empty names (check the commas)",
                            got=expr)
        expanded = [""]
        for match in re.finditer(r"([^\[\]]*)(\[([^\[\]]*)\])?", part):
            expanded = [e + match.group(1) for e in expanded]
            if match.group(2) is not None:
                choices = _expand_ranges(match.group(3), where, expr, limit)
                if len(expanded) * len(choices) > limit:
                    raise SpecError(where, "", HOSTS_EXPECTED, got=expr)
                expanded = [e + c for e in expanded for c in choices]
            if len(expanded) > limit:
                raise SpecError(where, "", HOSTS_EXPECTED, got=expr)
        names += expanded
        if len(names) > limit:
            raise SpecError(where, "", HOSTS_EXPECTED, got=expr)
    return names


def _split_top(expr: str, where: str, original: str) -> list[str]:
    """Split on commas outside brackets; brackets must pair and not nest."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise SpecError(where, "", "a hostlist without nested brackets", got=original)
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise SpecError(where, "", "a hostlist whose brackets pair up ('[' before ']')",
                                got=original)
        elif ch == "," and depth == 0:
            parts.append(expr[start:i].strip())
            start = i + 1
    if depth:
        raise SpecError(where, "", "a hostlist whose brackets pair up (a '[' is not closed)",
                        got=original)
    parts.append(expr[start:].strip())
    return parts


def _expand_ranges(ranges: str, where: str, original: str, limit: int) -> list[str]:
    out: list[str] = []
    for item in ranges.split(","):
        item = item.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not match:
            raise SpecError(where, "", "bracket ranges of numbers such as [01-04,07]",
                            got=original)
        lo_text, hi_text = match.group(1), match.group(2) or match.group(1)
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise SpecError(where, "", f"ranges from low to high ({item} runs backwards)",
                            got=original)
        if hi - lo + 1 + len(out) > limit:
            raise SpecError(where, "", HOSTS_EXPECTED, got=original)
        width = len(lo_text) if lo_text.startswith("0") else 0
        out += [str(v).zfill(width) for v in range(lo, hi + 1)]
    return out


# --- ASTRA-sim network YAML ----------------------------------------------------------------------


def parse_astra_sim(text: str, source: str, options: ImportOptions) -> Imported:
    """An ASTRA-sim analytical network: dimension 0 inside a node, the others scale-out tiers."""
    data, lines = _load_yaml(text, source)
    if not isinstance(data, dict):
        raise SpecError(source, "", "an ASTRA-sim network YAML mapping (topology, npus_count, "
                        "bandwidth, latency)")
    dims: dict[str, list] = {}
    for key in ("topology", "npus_count", "bandwidth", "latency"):
        value = data.get(key)
        if not isinstance(value, list) or not value:
            raise SpecError(_at(source, lines((key,))), key, "a list with one entry per "
                            "dimension", got=value)
        dims[key] = value
    n = len(dims["topology"])
    for key, value in dims.items():
        if len(value) != n:
            raise SpecError(_at(source, lines((key,))), key, f"{n} entries, one per dimension "
                            f"of topology", got=value)
        if key != "topology" and not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                         and v > 0 for v in value):
            raise SpecError(_at(source, lines((key,))), key, "positive numbers", got=value)
    kinds = {"Switch": "nvswitch", "FullyConnected": "nvlink", "Ring": "nvlink"}
    for kind in dims["topology"]:
        if kind not in kinds:
            raise SpecError(_at(source, lines(("topology",))), "topology",
                            "Ring, FullyConnected or Switch per dimension", got=kind)
    if not all(isinstance(v, int) for v in dims["npus_count"]):
        raise SpecError(_at(source, lines(("npus_count",))), "npus_count", "whole numbers",
                        got=dims["npus_count"])
    notes: list[str] = []
    gpu = _gpu_choice(options, notes, "ASTRA-sim networks name no GPU")
    per_node = dims["npus_count"][0]
    nodes = prod(dims["npus_count"][1:])
    group: dict[str, Any] = {
        "name": "nodes", "count": nodes, "gpu": gpu, "gpus_per_node": per_node,
        "fabric": kinds[dims["topology"][0]] if per_node > 1 else "pcie",
        "intra_bw_GBps": float(dims["bandwidth"][0]),
        "intra_latency_us": dims["latency"][0] / 1000}
    notes.append(f"dimension 0 ({dims['topology'][0]} of {per_node}) is the node: its bandwidth "
                 f"{dims['bandwidth'][0]:g} GB/s and latency {dims['latency'][0]:g} ns taken as "
                 f"per-GPU intra-node figures")
    spec: dict[str, Any] = {"description": f"{nodes} x {per_node} NPUs from an ASTRA-sim network",
                            "node_groups": [group]}
    if n > 1:
        gbps = float(dims["bandwidth"][1]) * 8
        nic: dict[str, Any] = {"count": per_node, "gbps": options.nic_gbps or gbps,
                               "transport": options.transport or DEFAULT_TRANSPORT}
        group["nics"] = [nic]
        notes.append(f"one NIC per GPU at dimension 1's {dims['bandwidth'][1]:g} GB/s "
                     f"(= {gbps:g} Gbit/s), transport {nic['transport']}")
        reach = [prod(dims["npus_count"][1:k + 1]) for k in range(1, n)]
        spec["network"] = {"rail_optimized": True, "tiers": [
            {"name": _tier_name(k, n - 1), "nodes_per_switch": r,
             "latency_us": dims["latency"][k + 1] / 1000} for k, r in enumerate(reach)]}
    if options.nodes is not None and options.nodes != nodes:
        raise SpecError(OPTIONS_SOURCE, "--nodes", f"no --nodes, or {nodes}: the ASTRA-sim "
                        f"network has {nodes} nodes", got=options.nodes)
    return Imported(spec, notes)


# --- shared pieces -------------------------------------------------------------------------------


_PARSERS: dict[str, Callable[[str, str, ImportOptions], Imported]] = {
    "nvidia-smi": parse_nvidia_smi, "nccl-xml": parse_nccl_xml,
    "slurm": parse_slurm_topology, "astra-sim": parse_astra_sim}


def _check_options(options: ImportOptions) -> None:
    if options.gpu is not None:
        _catalog_name(options.gpu)
    if options.nodes is not None and options.nodes < 1:
        raise SpecError(OPTIONS_SOURCE, "--nodes", "a whole number of nodes >= 1",
                        got=options.nodes)
    check(options.nodes, CLUSTER_NODES, OPTIONS_SOURCE, "--nodes")
    if options.nic_gbps is not None and not options.nic_gbps > 0:
        raise SpecError(OPTIONS_SOURCE, "--nic-gbps", "a NIC line rate > 0 Gbit/s",
                        got=options.nic_gbps)
    if options.transport is not None and options.transport not in TRANSPORTS:
        raise SpecError(OPTIONS_SOURCE, "--transport", f"one of {', '.join(TRANSPORTS)}",
                        got=options.transport)
    if options.nccl_topo_file is not None and not TOPO_FILE.fullmatch(options.nccl_topo_file):
        raise SpecError(OPTIONS_SOURCE, "--nccl-topo-file", "an absolute path of letters, "
                        "digits and _ . - / only (at most 255)", got=options.nccl_topo_file)


def _catalog_name(gpu: str) -> str:
    try:
        return get_gpu(gpu).name
    except UnknownGpuError as err:
        raise SpecError(OPTIONS_SOURCE, "--gpu", f"a GPU from the catalog ({err})") from None


def _gpu_choice(options: ImportOptions, notes: list[str], why: str) -> str:
    if options.gpu:
        return _catalog_name(options.gpu)
    name = get_gpu(DEFAULT_GPU).name
    notes.append(f"GPU model assumed {name} ({why}); pass --gpu")
    return name


def _nic_rate(options: ImportOptions, notes: list[str], why: str,
              transport: str = DEFAULT_TRANSPORT, gbps: float = DEFAULT_NIC_GBPS
              ) -> dict[str, Any]:
    assumed = []
    if options.nic_gbps is None:
        assumed.append(f"{gbps:g} Gbit/s")
    if options.transport is None:
        assumed.append(f"transport {transport}")
    if assumed:
        notes.append(f"NIC {' and '.join(assumed)} assumed ({why}); pass --nic-gbps/--transport")
    return {"gbps": options.nic_gbps or gbps, "transport": options.transport or transport}


def _one_node_cluster(group: dict[str, Any], options: ImportOptions, notes: list[str],
                      description: str) -> Imported:
    """A one-node file's cluster: ``--nodes`` copies of the node under a leaf/spine network."""
    nodes = options.nodes or 1
    group["count"] = nodes
    spec: dict[str, Any] = {"description": description + (f", x {nodes} nodes"
                                                           if nodes > 1 else ""),
                            "node_groups": [group]}
    if nodes > 1:
        leaf = max(1, LEAF_GPUS // group["gpus_per_node"])
        spec["network"] = {"rail_optimized": True, "tiers": [
            {"name": "leaf", "nodes_per_switch": leaf},
            {"name": "spine", "nodes_per_switch": max(nodes, leaf)}]}
        notes.append(f"{nodes} identical nodes (--nodes) under a non-blocking rail-optimised "
                     f"leaf/spine, {leaf} nodes per leaf (assumed)")
    else:
        notes.append("one node (the file describes one); pass --nodes N for a cluster of N")
    return Imported(spec, notes)


def _load_yaml(text: str, source: str) -> tuple[Any, Callable[[tuple], int | None]]:
    """Parsed YAML and a function from a key path to its 1-based line."""
    check_yaml_text(text, source)
    try:
        loader = yaml_loader_for(text)
        root = yaml.compose(text, Loader=loader)
        data = loader("").construct_document(root) if root is not None else None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(f"{source}:{mark.line + 1}" if mark else source, "",
                        f"valid YAML ({problem})") from None
    except RecursionError:
        raise SpecError(source, "", f"a document nested at most {MAX_NESTING} levels deep") from None
    except ValueError as err:  # a 5,000-digit integer, a timestamp of February 30th
        raise bad_value_error(err, source) from None
    check_document(data, source)

    def line_of(path: tuple) -> int | None:
        node, line = root, None
        if node is None:
            return None
        line = node.start_mark.line + 1
        for part in path:
            if isinstance(node, yaml.MappingNode):
                pair = next(((k, v) for k, v in node.value if k.value == str(part)), None)
                if pair is None:
                    break
                line, node = pair[0].start_mark.line + 1, pair[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) \
                    and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                break
        return line

    return data, line_of


def _at(source: str, line: int | None) -> str:
    return f"{source}:{line}" if line else source


def _name_from(source: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(source).stem).strip("-")
    return stem or "imported"


def _validate(spec: dict[str, Any], source: str) -> None:
    """The spec must load as a cluster file would; a problem names the file and field."""
    try:
        cluster_from_dict(spec)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        message = first["msg"]
        for prefix in ("Value error, ", "Input should be "):
            if message.startswith(prefix):
                message = message[len(prefix):]
        raise SpecError(source, loc, f"{message} (in the imported spec; adjust --gpu, "
                        f"--nodes, --nic-gbps or --transport)") from None
    except ValueError as err:
        raise SpecError(source, "", f"a consistent cluster ({err})") from None
