"""torchrun worker for tests/test_runtime.py: build the plan's groups with gloo, check them
with collectives, write this rank's view as JSON. Usage: runtime_worker.py PLAN OUT_DIR"""
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from planner.run.runtime import init

rt = init(sys.argv[1], backend="gloo")
out = {"view": {**rt.view.__dict__, "layers": list(rt.view.layers),
                "experts": {str(k): list(v) for k, v in rt.view.experts.items()}}, "sums": {}}
for kind, group in rt.groups.items():
    if group is None:
        continue
    value = torch.tensor([float(rt.view.rank)])
    dist.all_reduce(value, group=group)  # sum of the member ranks: proves who is in the group
    out["sums"][kind] = value.item()
Path(sys.argv[2], f"rank{rt.view.rank}.json").write_text(json.dumps(out))
dist.barrier()
dist.destroy_process_group()
