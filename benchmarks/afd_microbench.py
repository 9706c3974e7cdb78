"""Two machine measurements ``planner calibrate`` does not make, for the physical-fix
experiments of ``benchmarks/afd_executor_prediction.py`` (not used by ``check-run``):

* **eager forward call**: what one torch call of a no-grad forward costs from Python.
  ``planner calibrate`` fits ``kernel_overhead_s`` to forward + backward of its transformer
  block (:class:`planner.run.reference_job.model.Block`), counted as the cost model counts
  kernels (14 per forward, three times that with the backward). The AFD job runs forwards only,
  without autograd. Here both ranks run the same block's forward under ``torch.no_grad`` at
  the sizes of calibrate's smallest layer case (batch 1, 16 tokens, hidden 32: launch-bound),
  at the same time, and divide its time by the torch calls it makes (counted with a
  ``TorchFunctionMode``, attribute reads and ``numel()`` left out, as the predictor counts).
* **message latency**: rank 0 sends 8 bytes and waits for 8 bytes back, rank 1 echoes,
  ``--reps`` times back to back (``isend`` / ``irecv`` + ``wait``, as the AFD job posts them):
  half the round trip, mean (a step pays the stalls too) and median. Calibrate times
  ``send_recv`` like a collective, after a barrier and a compute burst on both ranks, the
  slowest rank's mean: the receiver's time then includes how much later the sender's burst
  ended; the AFD job's messages mostly find their receiver blocked in ``wait()`` already.

Run: ``python -m torch.distributed.run --standalone --nproc-per-node=2
benchmarks/afd_microbench.py --out FILE``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from planner.run.reference_job.model import Block  # noqa: E402

METADATA = {"__get__", "numel"}


class _Count(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") not in METADATA:
            self.calls += 1
        return func(*args, **(kwargs or {}))


@torch.no_grad()
def eager_call_s(min_time_s: float = 1.0) -> tuple[float, int]:
    """(seconds per torch call of a no-grad Block forward, calls per forward)."""
    torch.manual_seed(0)
    block = Block(32, 4)
    x = torch.randn(1, 16, 32)
    counter = _Count()
    with counter:
        block(x)
    block(x)
    times = []
    start = time.perf_counter()
    while len(times) < 50 or time.perf_counter() - start < min_time_s:
        t0 = time.perf_counter()
        block(x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / counter.calls, counter.calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--reps", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    peer = 1 - rank
    dist.barrier()
    per_call, calls = eager_call_s()  # both ranks at once, as calibrate runs its kernels
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, per_call)
    out, back = torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
    rtts = []
    dist.barrier()
    for _ in range(args.reps + 20):
        if rank == 0:
            t0 = time.perf_counter()
            send = dist.isend(out, dst=peer, tag=1)
            dist.irecv(back, src=peer, tag=2).wait()
            rtts.append(time.perf_counter() - t0)
            send.wait()
        else:
            dist.irecv(back, src=peer, tag=1).wait()
            dist.isend(out, dst=peer, tag=2).wait()
    dist.barrier()
    if rank == 0:
        rtts = rtts[20:]  # warm-up
        doc = {"eager_call_s": statistics.fmean(gathered), "eager_calls_per_forward": calls,
               "one_way_mean_s": statistics.fmean(rtts) / 2,
               "one_way_median_s": statistics.median(rtts) / 2, "reps": len(rtts),
               "torch": torch.__version__}
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
