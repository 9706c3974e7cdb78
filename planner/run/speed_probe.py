"""The machine's speed at one moment, by one fixed piece of work: ``planner calibrate`` times it
at its start and end, the reference job before and after its steps, so that ``planner
check-run`` can tell a machine that computed slower (or faster) than when it was calibrated
from a cost model that is wrong (:func:`planner.run.check_run.speed_ratio`).

A shared VM's speed drifts between minutes (``docs/runtime.md``: four runs of the same TP2
compute, one after the other, took 139, 165, 161 and 160 ms a step on the 2-vCPU box); a
prediction priced at the calibration's speed then misses by the drift, whatever the model.

The work: forward + backward of one reference-job block (:class:`~planner.run.reference_job.
model.Block`, 96 tokens of hidden 192, 6 heads: a point of calibrate's layer grid,
``calibrate_job.FULL``, and none of the benchmark jobs' shapes) on the run's device and dtype,
:data:`PROBE_CALLS` times after one warm-up; the median call. Every rank runs it at the same
moment (after a barrier), as the ranks compute together in a job; each rank's median is kept.
About 60 ms on the 2-vCPU box.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

__all__ = ["PROBE_CALLS", "PROBE_SHAPE", "probe_block_s", "probe_ranks_s"]

PROBE_SHAPE = (1, 96, 192, 6)  # batch, tokens, hidden, heads
PROBE_CALLS = 12


def probe_block_s(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                  sync: Callable[[], None] | None = None) -> float:
    """Median seconds of one forward + backward of the probe block (:data:`PROBE_SHAPE`) on
    ``device`` in ``dtype``; ``sync`` waits for the device's queued work (a GPU's)."""
    from planner.run.reference_job.model import Block

    b, s, h, heads = PROBE_SHAPE
    with torch.random.fork_rng(devices=[]):  # the caller's random stream stays as it was
        torch.manual_seed(0)
        block = Block(h, heads).to(device=device, dtype=dtype)
        x = torch.randn(b, s, h).to(device=device, dtype=dtype).requires_grad_(True)
    wait = sync or (lambda: None)

    def call() -> None:
        block(x).sum().backward()

    call()
    wait()
    times = []
    for _ in range(PROBE_CALLS):
        t0 = time.perf_counter()
        call()
        wait()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def probe_ranks_s(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                  sync: Callable[[], None] | None = None, group=None) -> list[float]:
    """:func:`probe_block_s` on every rank of ``group`` (the world by default) at once, after
    a barrier: each rank's median seconds, in rank order (every rank gets the list)."""
    dist.barrier(group=group)
    mine = probe_block_s(device, dtype, sync)
    out: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, round(mine, 7), group=group)
    return [float(v) for v in out]
