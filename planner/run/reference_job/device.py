"""Where the reference job's tensors live and in which precision (:class:`JobDevice`).

* ``cpu``: gloo, fp32 (the job's default without a GPU per process; what CI runs and what
  the parallel-vs-single-process checks compare bit-near);
* ``cuda``: NCCL, this rank's GPU (``cuda:LOCAL_RANK``), bf16 parameters, activations and
  gradients (what ``planner calibrate --backend nccl`` measures: its GEMM, attention and layer
  benchmarks run in bf16). ``auto`` picks ``cuda`` when every process of the node has a GPU
  of its own (:func:`planner.run.runtime.choose_backend`) and the plan's devices are GPUs,
  else ``cpu``: a plan solved on a ``planner calibrate`` gloo calibration's cluster (devices
  of arch ``cpu``) runs on the CPU wherever it is launched, as it was calibrated.

CUDA kernels run asynchronously, so on a GPU the job's timers synchronise the device at
each section's start and end (:meth:`JobDevice.sync`): a section's time is then its kernels'
time, at the price of one host round trip per section (a few microseconds).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from planner.errors import PlannerError

__all__ = ["DEVICES", "DTYPES", "JobDevice", "job_device", "planned_on_cpus"]

DEVICES = ("auto", "cpu", "cuda")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class JobDevice:
    """The job's device (``"cpu"`` or ``"cuda:<local rank>"``) and precision (a key of
    :data:`DTYPES`)."""

    device: str = "cpu"
    precision: str = "fp32"

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def backend(self) -> str:
        return "nccl" if self.cuda else "gloo"

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.precision]

    def sync(self) -> None:
        """Wait for this rank's queued kernels (nothing to wait for on the CPU)."""
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def describe(self) -> dict:
        """The run record's ``environment`` fields."""
        name = torch.cuda.get_device_name(self.device) if self.cuda else "cpu"
        return {"device": self.device, "device_name": name, "precision": self.precision}


def job_device(device: str, precision: str | None, env: Mapping[str, str],
               planned_on_cpus: bool = False) -> JobDevice:
    """The job's :class:`JobDevice` for ``--device`` (``auto``, ``cpu`` or ``cuda``) and
    ``--precision`` (``None``: fp32 on the CPU, bf16 on a GPU), with torchrun's ``env``;
    ``planned_on_cpus``: the plan's devices are CPU processes (``auto`` is then ``cpu``).
    :class:`PlannerError` for ``cuda`` without a GPU per process."""
    from planner.run.runtime import node_backend

    if device not in DEVICES:
        raise PlannerError(f"--device {device!r}: expected one of {', '.join(DEVICES)}")
    if precision is not None and precision not in DTYPES:
        raise PlannerError(f"--precision {precision!r}: expected one of {', '.join(DTYPES)}")
    if device == "auto":
        device = "cuda" if not planned_on_cpus and node_backend(None, env) == "nccl" else "cpu"
    elif device == "cuda":
        try:
            node_backend("nccl", env)  # refuses a node with fewer GPUs than processes
        except PlannerError as err:
            raise PlannerError(f"--device cuda: {err}") from None
    if device == "cpu":
        return JobDevice("cpu", precision or "fp32")
    return JobDevice(f"cuda:{int(env.get('LOCAL_RANK', '0'))}", precision or "bf16")


def planned_on_cpus(plan) -> bool:
    """Whether ``plan``'s devices are CPU processes (the cluster ``planner calibrate`` writes
    for gloo names its devices' arch ``cpu``)."""
    return all(g.gpu.arch == "cpu" for g in plan.cluster().node_groups)
