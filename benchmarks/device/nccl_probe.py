"""Two NCCL ranks on one GPU: does NCCL run them? (Recorded by ``benchmarks/device/run.sh``.)

Each rank takes GPU ``LOCAL_RANK % device_count`` and all-reduces one tensor. On a one-GPU
machine both ranks share GPU 0; NCCL refuses that ("Duplicate GPU detected"), which is why
the multi-rank NCCL jobs (reference job, AFD job, collectives) need one GPU per rank."""
import os

import torch
import torch.distributed as dist

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local % torch.cuda.device_count())
dist.init_process_group("nccl")
x = torch.ones(1024, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
print(f"rank {dist.get_rank()}: all_reduce ok, value {float(x[0])}", flush=True)
dist.destroy_process_group()
