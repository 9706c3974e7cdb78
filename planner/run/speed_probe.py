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

The link probe (:func:`probe_link_ranks_s`) does the same for the collectives: one all-reduce of
:data:`LINK_PROBE_BYTES` over every rank, after a barrier (no arrival skew in it), the median
of :data:`LINK_PROBE_CALLS`. The compute probe does not see the link: on the 2-vCPU box
(2026-11-28 20:20-20:40 UTC, two pinned gloo ranks, gloo's transport threads idle-priority as
in the jobs) an all-reduce of 8.4 MB took 5.5 ms for tens of seconds, then 3.2 ms, then 5.5
ms again, with nothing else running, while the compute probe moved by under 15%; the same
all-reduce took 3.7 ms in the calibration's table and 7-8 ms in the MoE reference job's
gradient sync. About 30-40 ms on that box.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

__all__ = ["LINK_PROBE_BYTES", "LINK_PROBE_CALLS", "PROBE_CALLS", "PROBE_SHAPE", "machine_probes",
           "probe_block_s", "probe_link_ranks_s", "probe_ranks_s", "probe_record"]

PROBE_SHAPE = (1, 96, 192, 6)  # batch, tokens, hidden, heads
PROBE_CALLS = 12
# a size calibrate's collective tables hold (calibrate_job.FULL.comm_bytes): gradient-bucket
# sized, so the probe times the transport's bandwidth, not its latency or a thread's wake-up.
# On the 2-vCPU box (2026-11-28 21:05 UTC, 12 probes 0.3 s of compute apart, quiet) the median
# of 4 calls of 16 MiB stayed within 1.08x (5.9-6.4 ms), that of 8 calls of 4 MiB within
# 1.35x (1.30-1.75 ms): a small all-reduce's time is mostly scheduling.
LINK_PROBE_BYTES = 16 * 2**20
LINK_PROBE_CALLS = 4


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


def probe_link_ranks_s(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                       sync: Callable[[], None] | None = None, group=None) -> list[float]:
    """Each rank's median seconds, in rank order, of one all-reduce of :data:`LINK_PROBE_BYTES`
    over ``group`` (the world by default): one warm-up, then :data:`LINK_PROBE_CALLS` calls,
    each after a barrier so that no rank waits for a late peer inside the timed call. [] with
    one rank (there is no link). Every rank gets the list."""
    world = dist.get_world_size(group)
    if world < 2:
        return []
    elem = torch.tensor([], dtype=dtype).element_size()
    buf = torch.zeros(LINK_PROBE_BYTES // elem, device=device, dtype=dtype)  # stays 0 summed
    wait = sync or (lambda: None)
    dist.all_reduce(buf, group=group)
    wait()
    times = []
    for _ in range(LINK_PROBE_CALLS):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        dist.all_reduce(buf, group=group)
        wait()
        times.append(time.perf_counter() - t0)
    out: list = [None] * world
    dist.all_gather_object(out, round(statistics.median(times), 7), group=group)
    return [float(v) for v in out]


def machine_probes(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                   sync: Callable[[], None] | None = None, group=None) -> dict[str, list[float]]:
    """The machine now: ``speed`` (:func:`probe_ranks_s`) and ``link``
    (:func:`probe_link_ranks_s`), each rank's seconds in rank order."""
    return {"speed": probe_ranks_s(device, dtype, sync, group),
            "link": probe_link_ranks_s(device, dtype, sync, group)}


def probe_record(before: dict[str, list[float]], after: dict[str, list[float]]) -> dict:
    """What a calibration's ``conditions`` or a run record's ``environment`` keeps of two
    :func:`machine_probes`: ``speed_probe_s`` and ``link_probe_s``, each ``{"before": [...],
    "after": [...]}`` (``planner.run.calibrate.probe_times`` reads them)."""
    return {"speed_probe_s": {"before": before["speed"], "after": after["speed"]},
            "link_probe_s": {"before": before["link"], "after": after["link"]}}
