"""The reference job on one rank: check the world, build this rank's stage, train, and (rank
0) write the run record.

The training loop owns the rank's :class:`~planner.run.reference_job.timers.Timers` and hands
it to everything that times a section (the TP operators, the expert dispatch, the step).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from planner.errors import PlannerError
from planner.run.reference_job.device import JobDevice
from planner.run.reference_job.dp import attach_grad_bucket, dense_params
from planner.run.reference_job.ep import ExpertDispatch
from planner.run.reference_job.model import Stage
from planner.run.reference_job.params import global_params
from planner.run.reference_job.pipeline import StageContext, run_step
from planner.run.reference_job.shape import IMPLEMENTATION, JobShape, plan_shares
from planner.run.reference_job.timers import Timers
from planner.run.reference_job.tp import shard_block, shard_vocab
from planner.run.runtime import degrees_of, expert_maps, init
from planner.run.speed_probe import machine_probes, probe_record
from planner.run.affinity import Pinning, pin_rank_for
from planner.run.transport_threads import idle_transport_threads

__all__ = ["build_stage", "train"]


def _job_shape(rt, shape_overrides: dict) -> JobShape:
    """The JobShape of this plan (layers, MoE layers, experts) with ``shape_overrides``;
    :class:`PlannerError` for a plan the job cannot run."""
    deg, vpp = degrees_of(rt.plan), rt.plan.config["vpp"]
    model_spec = rt.plan.model_spec()
    moe = model_spec.moe
    if max(deg["cp"], vpp) > 1 or (deg["tp"] > 1 and moe is not None):
        raise PlannerError(f"the reference job runs DP x TP x PP (dense) and DP x PP x EP (MoE) "
                           f"with one model chunk per stage; this plan has tp={deg['tp']} "
                           f"cp={deg['cp']} vpp={vpp}{' on an MoE model' if moe else ''} "
                           "(plan with --schedule 1f1b)")
    return JobShape(num_layers=model_spec.num_layers, dp=deg["dp"],
                    moe_layers=tuple(model_spec.moe_layers) if moe else (),
                    num_experts=moe.num_experts if moe else 0, top_k=moe.top_k if moe else 0,
                    shares=plan_shares(rt.plan), **shape_overrides)


def train(plan_path: str, shape_overrides: dict, out: str | None,
          dump_params: str | None = None, grad_error: float = 0.0,
          device: JobDevice = JobDevice()) -> list[float]:
    """Run the job on this rank (see :mod:`planner.run.reference_job`); the per-step losses.
    ``dump_params``: after the first step each rank saves its parameters by their place in
    the whole model (:func:`~planner.run.reference_job.params.global_params`) to
    ``<dump_params>.rank<R>.pt``. ``grad_error`` (for tests of the checks): every gradient is
    scaled by ``1 + grad_error`` before each optimizer step. ``device``: where the tensors live
    and in which precision (:mod:`planner.run.reference_job.device`; the CPU in fp32 with gloo
    by default). The model is built on the CPU in fp32 from its seeds, split, then moved."""
    if os.environ.get("OMP_NUM_THREADS"):  # torchrun sets 1 for nproc > 1; torch usually obeys
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    # a gloo rank gets cores of its own (planner.run.affinity), before gloo's threads start
    pinning = pin_rank_for(device.backend)
    rt = init(plan_path, backend=device.backend)
    if not device.cuda:
        idle_transport_threads()  # every group exists now (planner.run.transport_threads)
    view = rt.view
    shape = _job_shape(rt, shape_overrides)
    timers, log = Timers(device.sync if device.cuda else None), []
    model = build_stage(rt, shape, log, timers).to(device=device.device, dtype=device.dtype)
    opt = torch.optim.SGD(model.parameters(), lr=shape.lr)
    if grad_error:
        opt.register_step_pre_hook(lambda o, _args, _kw: _scale_grads(o, 1.0 + grad_error))
    ep = degrees_of(rt.plan)["ep"]
    bucket = (attach_grad_bucket(dense_params(model, ep))
              if rt.groups.get("dp") is not None else None)
    ctx = StageContext(shape, view.stage, view.coords["dp"], view.coords["tp"],
                       tuple(next(g for g in rt.plan.groups["pp"] if view.rank in g)),
                       rt.groups.get("dp"), ep, timers, device)
    losses, times, forwards = [], [], []
    # compute and link speed before and after the steps, for check-run (speed_probe)
    before = machine_probes(device.device, device.dtype, device.sync)
    for step in range(shape.steps):
        device.sync()
        start = time.perf_counter()
        loss, ran = run_step(ctx, model, opt, step, bucket)
        forwards.append(ran)
        device.sync()
        times.append(time.perf_counter() - start)
        timers.end_step(times[-1])
        losses.append(loss)
        if step == 0 and dump_params is not None:
            torch.save(global_params(model, tuple(view.layers)),
                       f"{dump_params}.rank{view.rank}.pt")
    probes = probe_record(before, machine_probes(device.device, device.dtype, device.sync))
    ranks = [None] * view.world_size
    dist.all_gather_object(ranks, {"rank": view.rank, "ep": view.coords["ep"], "stage": view.stage,
                                   "events": log, "coords": dict(view.coords),
                                   "threads": torch.get_num_threads(), "steps": timers.steps,
                                   "micro_batches": forwards, "pinned": bool(pinning.pinned)})
    if out is not None and view.rank == 0:
        _write_record(out, rt, shape, losses, times, ranks, pinning, device, probes)
    dist.barrier()
    dist.destroy_process_group()
    return losses


def _scale_grads(opt: torch.optim.Optimizer, factor: float) -> None:
    with torch.no_grad():
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(factor)


def build_stage(rt, shape: JobShape, log: list, timers: Timers) -> Stage:
    """This rank's stage of runtime ``rt``: with TP its shards of every block; with EP only
    its slots' experts, dispatched by :class:`ExpertDispatch` (events appended to ``log``).
    Communication is timed on ``timers``."""
    deg, view = degrees_of(rt.plan), rt.view
    first, last = view.stage == 0, view.stage == deg["pp"] - 1
    if deg["ep"] == 1 or not shape.moe_layers:
        model = Stage(shape, view.layers, first, last)
        if deg["tp"] > 1:
            for block in model.blocks:
                shard_block(block, view.coords["tp"], deg["tp"], rt.groups["tp"], timers)
            if first or last:
                shard_vocab(model, view.coords["tp"], deg["tp"], rt.groups["tp"], timers)
        return model
    maps, S = expert_maps(rt.plan)
    ep_group = next(g for g in rt.plan.groups["ep"] if view.rank in g)
    me = sorted(ep_group).index(view.rank)
    if me != view.coords["ep"]:
        raise PlannerError(f"rank {view.rank}: EP coordinate {view.coords['ep']} but position {me} "
                           "in its EP group")
    model = Stage(shape, view.layers, first, last, view.experts)
    for i, block in zip(view.layers, model.blocks):
        if block.moe is not None:
            block.moe_forward = ExpertDispatch(block.moe, i, np.array(maps[i]), S, me, deg["ep"],
                                               rt.groups["ep"], log, timers)
    return model


def _write_record(out: str, rt, shape: JobShape, losses: list[float], times: list[float],
                  ranks: list[dict], pinning: Pinning, device: JobDevice,
                  probes: dict[str, dict]) -> None:
    """``ranks``: every rank's gathered object (expert events, coordinates, threads, timings);
    ``pinning``: rank 0's (the machine's cores before it, whether the ranks were pinned);
    ``device``: the job's, whose precision the record's ``implementation`` states; ``probes``:
    each rank's speed and link probes before and after the steps
    (:func:`planner.run.speed_probe.probe_record`)."""
    from planner.run.launch import write_run_record

    ranks = sorted(ranks, key=lambda r: r["rank"])
    events = [{k: r[k] for k in ("rank", "ep", "stage", "events")} for r in ranks]
    timings = [{k: r[k] for k in ("rank", "stage", "coords", "threads", "steps", "micro_batches",
                                  "pinned")}
               for r in ranks]
    step_max = [max(r["steps"][i]["step"] for r in ranks) for i in range(len(times))]
    write_run_record(Path(out), rt.plan,
                     {"shape": {**shape.__dict__, "global_batch": shape.global_batch,
                                "replica_micro_batches": [shape.replica_micro_batches(r)
                                                          for r in range(shape.dp)]},
                      "losses": losses, "step_times_s": times,
                      "step_times_max_s": step_max, "rank_timings": timings,
                      "expert_events": events,
                      "implementation": {**IMPLEMENTATION, "precision": device.precision}},
                     {"torch": torch.__version__, "backend": dist.get_backend(),
                      "threads": torch.get_num_threads(),
                      "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                      "processes": dist.get_world_size(), **pinning.record(),
                      **device.describe(), **probes})
