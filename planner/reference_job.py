"""Reference job: a tiny GPT trained for a few steps under a plan's DP x PP layout (plain torch).

Run under torchrun (``python -m torch.distributed.run --nproc-per-node N -m
planner.reference_job PLAN --out RUN.json``). Every rank checks the world against the plan
(:func:`planner.runtime.init`, before any collective), builds the plan's process groups and
trains only the layers of its pipeline stage; data parallel ranks split the global batch and
average gradients with an all-reduce over their DP group; pipeline stages exchange activations
and gradients with point-to-point sends in the 1F1B order (Narayanan et al., SC'21, sec. 2.2:
``p - s - 1`` warm-up forwards on stage ``s``, then one forward / one backward, then the
remaining backwards).

The model keeps the plan's layer count and layer-to-stage split but is tiny (``--hidden``,
``--heads``, ``--vocab``), so it runs on CPU. Every parameter is initialised from a seed derived
from its layer index, so any split of the layers builds the same model, and
:func:`reference_losses` (one process, whole batch) gives the losses the parallel run must
reproduce. Tensor, context and expert parallelism and interleaved stages (``vpp > 1``) are
not implemented here yet: such a plan is refused with a clear message. ZB-H1 and SlimPipe plans
run in plain 1F1B order (the same arithmetic, another order).

Rank 0 writes a run record: the plan's inputs hash, the environment, per-step times and losses.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from planner.errors import PlannerError


@dataclass(frozen=True)
class JobShape:
    """The tiny model and batch: ``micro_batches`` per DP rank of ``micro_batch`` sequences."""

    num_layers: int
    hidden: int = 32
    heads: int = 4
    vocab: int = 128
    seq_len: int = 16
    micro_batch: int = 1
    micro_batches: int = 4
    dp: int = 1
    steps: int = 3
    lr: float = 0.05
    seed: int = 0

    @property
    def global_batch(self) -> int:
        return self.dp * self.micro_batches * self.micro_batch


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a GELU MLP."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def _seeded(seed: int, build):
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return build()
    finally:
        torch.random.set_rng_state(state)


class Stage(nn.Module):
    """The layers of one pipeline stage (plus the embedding on the first, the head on the last)."""

    def __init__(self, shape: JobShape, layers: tuple[int, ...], first: bool, last: bool) -> None:
        super().__init__()
        s = shape.seed
        self.embed = _seeded(s + 10_000, lambda: nn.Embedding(shape.vocab, shape.hidden)) if first else None
        self.blocks = nn.ModuleList(_seeded(s + i, lambda: Block(shape.hidden, shape.heads)) for i in layers)
        self.head = _seeded(s + 20_000, lambda: nn.Sequential(
            nn.LayerNorm(shape.hidden), nn.Linear(shape.hidden, shape.vocab))) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x) if self.head is not None else x


def batch(shape: JobShape, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch ``[global_batch, seq_len]`` of inputs and next-token targets, seeded by step."""
    g = torch.Generator().manual_seed(shape.seed * 1_000_003 + step)
    tokens = torch.randint(0, shape.vocab, (shape.global_batch, shape.seq_len + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def _loss(logits: torch.Tensor, targets: torch.Tensor, total_tokens: int) -> torch.Tensor:
    """Sum of token cross-entropies over ``total_tokens``: micro-batch losses add up to the mean."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           reduction="sum") / total_tokens


def reference_losses(shape: JobShape) -> list[float]:
    """One process, whole model, whole batch: the losses the parallel run must reproduce."""
    model = Stage(shape, tuple(range(shape.num_layers)), True, True)
    opt = torch.optim.SGD(model.parameters(), lr=shape.lr)
    out = []
    for step in range(shape.steps):
        x, y = batch(shape, step)
        loss = _loss(model(x), y, y.numel())
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def _one_f_one_b(stage: int, stages: int, micro: int) -> list[tuple[str, int]]:
    """1F1B order of stage ``stage``: ("F", i) and ("B", i) events."""
    warmup = min(stages - stage - 1, micro)
    order = [("F", i) for i in range(warmup)]
    for i in range(micro - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(micro - warmup, micro)]


def train(plan_path: str, shape_overrides: dict, out: str | None) -> list[float]:
    """Run the job on this rank (see the module docstring); returns the per-step losses."""
    from planner.runtime import init

    rt = init(plan_path, backend="gloo")
    cfg, view = rt.plan.config, rt.view
    if max(cfg["tp"], cfg["cp"], cfg["ep"], cfg["vpp"]) > 1:
        raise PlannerError(f"the reference job runs DP x PP with one model chunk per stage only; "
                           f"this plan has tp={cfg['tp']} cp={cfg['cp']} ep={cfg['ep']} "
                           f"vpp={cfg['vpp']} (plan with --schedule 1f1b and --tp 1 --ep 1)")
    pp, dp = cfg["pp"], cfg["dp"]
    shape = JobShape(num_layers=rt.plan.model_spec().num_layers, dp=dp, **shape_overrides)
    s = view.stage
    model = Stage(shape, view.layers, s == 0, s == pp - 1)
    opt = torch.optim.SGD(model.parameters(), lr=shape.lr)
    pp_ranks = next(g for g in rt.plan.groups["pp"] if view.rank in g)
    losses, times = [], []
    for step in range(shape.steps):
        start = time.perf_counter()
        loss = _step(shape, model, opt, rt, pp_ranks, step)
        times.append(time.perf_counter() - start)
        losses.append(loss)
    if out is not None and view.rank == 0:
        _write_record(out, rt, shape, losses, times)
    dist.barrier()
    dist.destroy_process_group()
    return losses


def _step(shape: JobShape, model: Stage, opt, rt, pp_ranks: list[int], step: int) -> float:
    view, pp = rt.view, len(pp_ranks)
    s, d = view.stage, view.coords["dp"]
    x_all, y_all = batch(shape, step)
    per_rank = shape.micro_batches * shape.micro_batch
    x_mine, y_mine = x_all[d * per_rank:(d + 1) * per_rank], y_all[d * per_rank:(d + 1) * per_rank]
    total = y_all.numel()
    act_shape = (shape.micro_batch, shape.seq_len, shape.hidden)
    saved, sends, loss_sum = {}, [], torch.zeros(())
    opt.zero_grad()
    for kind, i in _one_f_one_b(s, pp, shape.micro_batches):
        rows = slice(i * shape.micro_batch, (i + 1) * shape.micro_batch)
        if kind == "F":
            if s == 0:
                inp = x_mine[rows]
            else:
                inp = torch.empty(act_shape)
                dist.recv(inp, src=pp_ranks[s - 1])
                inp.requires_grad_(True)
            outp = model(inp)
            if s == pp - 1:
                outp = _loss(outp, y_mine[rows], total)
                loss_sum = loss_sum + outp.detach()
            else:
                sends.append(dist.isend(outp.detach().contiguous(), dst=pp_ranks[s + 1]))
            saved[i] = (inp, outp)
        else:
            inp, outp = saved.pop(i)
            if s == pp - 1:
                outp.backward()
            else:
                grad = torch.empty(act_shape)
                dist.recv(grad, src=pp_ranks[s + 1])
                outp.backward(grad)
            if s > 0:
                sends.append(dist.isend(inp.grad.contiguous(), dst=pp_ranks[s - 1]))
    for work in sends:
        work.wait()
    if rt.groups.get("dp") is not None:
        for p in model.parameters():
            dist.all_reduce(p.grad, group=rt.groups["dp"])  # losses are already / global tokens
    opt.step()
    # The loss lives on the last stages (each holds its DP share of the global mean): the sum
    # over the world is the global mean loss, and every rank learns it.
    loss = loss_sum.reshape(1) if s == pp - 1 else torch.zeros(1)
    dist.all_reduce(loss)
    return loss.item()


def _write_record(out: str, rt, shape: JobShape, losses: list[float], times: list[float]) -> None:
    from planner.files import write_atomic

    record = {"schema": "planner.run-record/v1", "plan_inputs_hash": rt.plan.inputs_hash,
              "world_size": rt.view.world_size, "config": {k: rt.plan.config[k] for k in ("tp", "pp", "dp", "cp", "ep")},
              "shape": shape.__dict__, "losses": losses, "step_times_s": times,
              "environment": {"torch": torch.__version__, "python": platform.python_version(),
                              "host": platform.node(), "backend": dist.get_backend(),
                              "threads": torch.get_num_threads(),
                              "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}}
    write_atomic(Path(out), json.dumps(record, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="planner.reference_job", description=__doc__.split("\n")[0])
    parser.add_argument("plan")
    parser.add_argument("--out", default=None, help="run record JSON (written by rank 0)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=16)
    args = parser.parse_args(argv)
    losses = train(args.plan, {"steps": args.steps, "micro_batches": args.micro_batches,
                               "hidden": args.hidden, "seq_len": args.seq_len}, args.out)
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
