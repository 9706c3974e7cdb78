"""The largest cluster a spec may describe, each maximum with the reason for it.

Every cluster, from a file, a preset, ``--gpu/--nodes`` options or a plan file, is validated by
:mod:`topologies.spec`, which checks these. ``planner/inputs/limits.py`` lists them with every
other limit of planner's inputs (``docs/limits.md``).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limit", "CLUSTER_GPUS", "CLUSTER_NODES", "GPUS_PER_NODE", "PROCESSES_PER_HOST",
           "NICS_PER_NODE"]


@dataclass(frozen=True)
class Limit:
    """A documented maximum: ``what`` is limited (``"nodes in a cluster"``), in ``unit``s
    (may be empty), and why the maximum is where it is."""

    what: str
    maximum: int
    unit: str
    reason: str
    shown: str = ""  # how the maximum reads, when not as a count ("64 MiB")

    def expected(self) -> str:
        """What a value beyond the limit should have been, phrased to follow 'expected'."""
        amount = self.shown or f"{self.maximum:,}{' ' + self.unit if self.unit else ''}"
        return f"at most {amount} (the limit on {self.what}: {self.reason})"

    def refused(self, value: object) -> str:
        """:meth:`expected`, then the value given (a huge number by its digit count)."""
        return f"{self.expected()}, got {_shown(value)}"

    def exceeded_by(self, value: object) -> bool:
        """Whether ``value`` is a number beyond the maximum (other types are left to the
        validators that check types)."""
        return isinstance(value, (int, float)) and not isinstance(value, bool) \
            and value > self.maximum


def _shown(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        digits = len(str(abs(value))) if value.bit_length() < 200 else \
            round(value.bit_length() * 0.30103)
        return f"{value:,}" if digits <= 30 else f"a number of about {digits} digits"
    return repr(value)


# 2**20 GPUs: the largest clusters built hold some hundreds of thousands of GPUs.
CLUSTER_GPUS = Limit("GPUs in a cluster", 1_048_576, "GPUs",
                     "larger than any cluster built; the largest hold some hundreds of "
                     "thousands of GPUs")
CLUSTER_NODES = Limit("nodes in a cluster", 1_048_576, "nodes",
                      "a node holds at least one GPU, and a cluster at most 1,048,576 GPUs")
# The GPU catalog's largest NVLink domain is GB200/GB300 NVL72 (nvlink_domain_gpus: 72);
# tests/test_limits.py checks that no catalog entry outgrows this limit.
GPUS_PER_NODE = Limit("GPUs per node", 72, "GPUs",
                      "a GB200/GB300 NVL72 rack, the largest NVLink domain in the GPU catalog, "
                      "taken as one node; servers hold 4 to 16")
# A node of fabric host is one CPU machine running one process per core ('planner calibrate').
PROCESSES_PER_HOST = Limit("processes per node of fabric host", 1_024, "processes",
                           "more than the cores of the largest CPU servers, a few hundred; "
                           "'planner calibrate' runs one per core")
NICS_PER_NODE = Limit("NICs per node", 144, "NICs",
                      "two for each GPU of the largest node")
