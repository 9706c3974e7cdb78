"""The AFD decode job on one rank: check the world, build this rank's side of the model,
prefill and decode, and (rank 0) write the run record.

Attention ranks (:func:`attention_step`) and FFN ranks (:func:`ffn_step`) run the same
sequence of rounds: per MoE layer, micro-batches ``0 .. m-1`` in order (the ping-pong of
MegaScale-Infer, Zhu et al. 2025, sec. 4; :mod:`planner.run.afd_job.link` has the messages).
The prompts go through the same pools first (the prefill: it fills the KV caches and yields
each sequence's first token; the plan's prefill pool is not run, it would hand these caches
over); its times are kept apart from the decode steps'.
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from planner.files import write_atomic
from planner.run.afd_job.link import AttentionLink, FfnLink, Groups, unpack_tokens
from planner.run.afd_job.model import (AttentionSide, ExpertBank, KVCache, prompts,
                                       run_experts)
from planner.run.afd_job.shape import AfdShape, afd_shape
from planner.run.afd_job.timers import AfdTimers, busy_idle
from planner.run.affinity import Pinning, pin_rank_for
from planner.run.speed_probe import machine_probes, probe_record
from planner.run.transport_threads import idle_transport_threads
from planner.run.runtime import (AfdRole, WorldMismatch, afd_expert_homes, afd_role, afd_world,
                                 node_backend)

__all__ = ["RECORD_SCHEMA", "attention_step", "ffn_step", "job_experts", "run"]

RECORD_SCHEMA = "planner.afd-run-record/v1"

# What this job runs, whatever the plan says.
IMPLEMENTATION: Mapping[str, Any] = {
    "precision": "fp32", "wire": "fp32 (the plan prices fp8 dispatch, bf16 combine)",
    "attention": "sdpa over a KV cache, no positional embedding", "attention_tp": 1,
    "expert_placement": "contiguous blocks (planner.run.runtime.afd_expert_homes)",
    "prefill": "the prompts through the decode pools (the plan's prefill pool is not run)"}

# How an FFN rank receives the tokens (planner.run.afd_job.link's docstring); records before
# this key posted them after the count.
TOKEN_RECEIVES = {True: "pre-posted, header row", False: "after the count"}


def job_experts(shape: AfdShape, role: AfdRole) -> dict[int, tuple[int, ...]]:
    """The job model's experts an FFN rank holds, per MoE layer: the one-replica contiguous
    split of the job's (capped) expert count over its unit's FFN ranks; with the plan's
    expert count this is the plan's placement (:func:`afd_role`'s ``experts``)."""
    if role.role != "ffn":
        return {}
    homes = afd_expert_homes(shape.num_experts, len(role.ffn_ranks))
    mine = role.ffn_ranks.index(role.rank)
    return {i: tuple(e for e, h in enumerate(homes) if h == mine) for i in shape.moe_layer_ids}


@torch.no_grad()
def attention_step(side: AttentionSide, cache: KVCache, tokens: torch.Tensor, pos: int,
                   shape: AfdShape, link: AttentionLink, timers: AfdTimers) -> torch.Tensor:
    """One forward pass of this attention rank's batch (``tokens`` ``[batch, s]`` at
    positions ``pos ..``): each micro-batch runs up to its next MoE layer's router, posts its
    dispatch and yields to the next micro-batch; rounds take the micro-batches' results in
    order. Returns the next-token logits ``[batch, vocab]``."""
    bounds = shape.micro_batch_rows()
    inflight: dict[int, tuple] = {}
    logits: list[torch.Tensor | None] = [None] * len(bounds)

    def advance(j: int, x: torch.Tensor, first: int) -> None:
        start, stop = bounds[j]
        with timers.timed("attention"):
            for i in range(first, len(side.layers)):
                layer = side.layers[i]
                x = layer.attend(x, cache.rows(i, start, stop), pos)
                if layer.moe:
                    flat, idx, gates, shared = layer.route(x)
                    break
                x = layer.dense(x)
            else:
                logits[j] = side.logits(x)
                return
        inflight[j] = (i, x, shared, link.dispatch(flat, idx, gates))

    for j, (start, stop) in enumerate(bounds):
        with timers.timed("attention"):
            x = side.embed(tokens[start:stop])
        advance(j, x, 0)
    for _ in shape.moe_layer_ids:
        for j in range(len(bounds)):
            i, x, shared, pending = inflight.pop(j)
            routed = link.combine(pending, shape.hidden)
            with timers.timed("attention"):
                x = side.layers[i].combine(x, shared, routed)
            advance(j, x, i + 1)
    link.finish()
    with timers.timed("attention"):
        return torch.cat(logits)


@torch.no_grad()
def ffn_step(bank: ExpertBank, shape: AfdShape, link: FfnLink, timers: AfdTimers,
             tokens_per_sequence: int = 1) -> None:
    """This FFN rank's part of one forward pass (``tokens_per_sequence``: the prompt length
    in the prefill, 1 in a decode step): per round (MoE layer) and micro-batch, the tokens of
    every attention rank of its unit together through its experts, the results back. The
    next micro-batch's receives are posted before this one's tokens are waited for."""
    bounds = shape.micro_batch_rows()
    rounds = [(layer, j) for layer in shape.moe_layer_ids for j in range(shape.micro_batches)]

    def capacity(n: int) -> int:  # the most tokens one attention rank sends in round n
        start, stop = bounds[rounds[n][1]]
        return (stop - start) * tokens_per_sequence

    posted = link.post_next(capacity(0))
    for n, (layer, _) in enumerate(rounds):
        following: list = []

        def post_next() -> None:
            if n + 1 < len(rounds):
                following.append(link.post_next(capacity(n + 1)))

        bufs = link.receive(posted, post_next)
        with timers.timed("experts"):
            x, ids, gates = unpack_tokens(torch.cat(bufs), shape.top_k)
            out = run_experts(bank.of_layer(layer), x, ids, gates)
            results = out.split([b.shape[0] for b in bufs])
        link.reply(list(results))
        posted = following[0] if following else []
    link.finish()


def _world(plan, env: Mapping[str, str]) -> tuple[int, int]:
    """This process's rank and the world size; :class:`WorldMismatch` unless the world is
    the plan's attention + FFN GPUs."""
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    except (KeyError, ValueError):
        raise WorldMismatch("RANK / WORLD_SIZE are not set: run under torchrun "
                            "('planner launch PLAN' starts it)") from None
    A, F = afd_world(plan)
    if world != A + F:
        raise WorldMismatch(f"the plan's AFD decode world is {A} attention + {F} FFN GPUs = "
                            f"{A + F} processes, this job has WORLD_SIZE={world}")
    return rank, world


def run(plan_path: str, overrides: Mapping[str, Any], out: str | None,
        keep_logits: bool = False, backend: str | None = None) -> list[list[int]] | None:
    """Run the job on this rank (module docstring); rank 0 returns the generated ids of every
    sequence (others ``None``) and writes the run record to ``out``."""
    from planner.plan.file import load_plan

    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    plan = load_plan(Path(plan_path))
    shape = afd_shape(plan, overrides)  # refused here, before torch.distributed starts
    rank, world = _world(plan, os.environ)
    role = afd_role(plan, rank)
    chosen = node_backend(backend, os.environ)
    device = torch.device("cpu")
    if chosen == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    # gloo ranks on cores of their own where they fit, else one shared core each, round-robin
    # (planner.run.affinity)
    pinning = pin_rank_for(chosen, share=True)
    dist.init_process_group(backend=chosen, rank=rank, world_size=world)
    groups = Groups(dist.new_group(list(range(world))), dist.new_group(list(range(world))))
    idle = idle_transport_threads() if chosen == "gloo" else 0  # planner.run.transport_threads
    timers = AfdTimers(torch.cuda.synchronize if device.type == "cuda" else None)
    preposted = chosen == "gloo"  # pre-posted token receives (link.py's docstring)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    # compute and link speed before and after the steps, for check-run (speed_probe)
    before = machine_probes(device, torch.float32, sync)
    mine = _run_rank(shape, role, groups, timers, device, keep_logits, preposted)
    probes = probe_record(before, machine_probes(device, torch.float32, sync))
    mine["idle_transport_threads"] = idle
    mine["pinned"] = bool(pinning.pinned)
    mine["pinned_cores"] = list(pinning.pinned)
    gathered: list = [None] * world
    dist.all_gather_object(gathered, mine)
    result = None
    if rank == 0:
        ranks = sorted(gathered, key=lambda r: r["rank"])
        result = [seq for r in ranks if r["role"] == "attention" for seq in r["tokens"]]
        if out is not None:
            _write_record(Path(out), plan, shape, ranks, chosen, keep_logits, preposted, pinning,
                          probes)
    dist.barrier()
    dist.destroy_process_group()
    return result


def _run_rank(shape: AfdShape, role: AfdRole, groups: Groups, timers: AfdTimers,
              device: torch.device, keep_logits: bool, preposted: bool) -> dict[str, Any]:
    """Prefill and ``shape.steps`` decode steps on this rank; its gathered object."""
    held = job_experts(shape, role)
    mine: dict[str, Any] = {"rank": role.rank, "role": role.role, "index": role.index,
                            "unit": role.unit, "experts": {str(k): list(v) for k, v in held.items()},
                            "threads": torch.get_num_threads()}
    if role.role == "attention":
        side = AttentionSide(shape).to(device)
        cache = KVCache(shape, shape.batch, device)
        homes = torch.tensor(afd_expert_homes(shape.num_experts, len(role.ffn_ranks)),
                             device=device)
        link = AttentionLink(role.ffn_ranks, homes, groups, timers, preposted)
        a = role.index
        tokens = prompts(shape)[a * shape.batch:(a + 1) * shape.batch].to(device)
        pos, generated, logits = 0, [], None
    else:
        bank = ExpertBank(shape, held).to(device)
        flink = FfnLink(role.attention_ranks, shape.hidden, shape.top_k, groups, timers, device,
                        preposted)
    for step in range(shape.steps + 1):  # the prefill, then the decode steps
        start = time.perf_counter()
        if role.role == "attention":
            logits = attention_step(side, cache, tokens, pos, shape, link, timers)
            with timers.timed("attention"):
                pos += tokens.shape[1]
                tokens = logits.argmax(-1, keepdim=True)
                generated.append(tokens[:, 0].cpu())
        else:
            ffn_step(bank, shape, flink, timers, shape.context if step == 0 else 1)
        elapsed = time.perf_counter() - start
        if step == 0:
            mine["prefill"] = {**timers.discard_step(), "step": elapsed}
        else:
            timers.end_step(elapsed)
    mine["steps"] = timers.steps
    if role.role == "attention":
        mine["empty_dispatches"] = link.empty_dispatches
        mine["tokens"] = torch.stack(generated, 1).tolist()
        if keep_logits:
            mine["final_logits"] = logits.cpu().tolist()
    return mine


def _write_record(out: Path, plan, shape: AfdShape, ranks: list[dict], backend: str,
                  keep_logits: bool, preposted: bool, pinning: Pinning,
                  probes: dict[str, dict]) -> None:
    """Rank 0's run record (``planner.afd-run-record/v1``): the plan, the shape, every
    sequence's generated ids, the step times and every rank's busy/idle split; ``pinning``
    is rank 0's (the machine's cores before it, whether the ranks were pinned); ``probes``
    each rank's speed and link probes before and after the steps
    (:func:`planner.run.speed_probe.probe_record`)."""
    import json
    import platform

    from planner.plan.document import plan_to_dict

    A, F = afd_world(plan)
    attention = [r for r in ranks if r["role"] == "attention"]
    steps = len(ranks[0]["steps"])
    kept = ("rank", "role", "index", "unit", "experts", "threads", "prefill", "steps",
            "empty_dispatches", "idle_transport_threads", "pinned", "pinned_cores")
    timings = [{**{k: r[k] for k in kept if k in r},
                "busy_idle": busy_idle(r["steps"])} for r in ranks]
    record = {
        "schema": RECORD_SCHEMA, "plan_inputs_hash": plan.inputs_hash, "world_size": A + F,
        "config": {"attention_gpus": A, "ffn_gpus": F, "micro_batches": shape.micro_batches,
                   "units": len({r["unit"] for r in ranks})},
        "plan": plan_to_dict(plan), "shape": shape.as_dict(),
        "tokens": [seq for r in attention for seq in r["tokens"]],
        "prefill_s": max(r["prefill"]["step"] for r in ranks),
        "step_times_s": [s["step"] for s in ranks[0]["steps"]],
        "step_times_max_s": [max(r["steps"][i]["step"] for r in ranks) for i in range(steps)],
        "rank_timings": timings,
        "implementation": {**IMPLEMENTATION, "token_receives": TOKEN_RECEIVES[preposted]},
        "environment": {"python": platform.python_version(), "host": platform.node(),
                        "torch": torch.__version__, "backend": backend,
                        "threads": torch.get_num_threads(),
                        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                        "processes": len(ranks), **pinning.record(),
                        **probes}}
    if keep_logits:
        record["final_logits"] = [row for r in attention for row in r["final_logits"]]
    write_atomic(out, json.dumps(record, indent=1, sort_keys=True) + "\n")
