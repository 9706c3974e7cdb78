"""Apply a Plan inside a torch.distributed job: ``from planner.run.runtime import init``.

::

    rt = init("plan.json")            # under torchrun; nccl with a GPU per process, else gloo
    rt.groups["tp"]                   # this rank's TP process group (None if the group is 1)
    rt.view.stage, rt.view.layers     # this rank's pipeline stage and its model layers
    rt.view.experts[layer]            # logical experts this rank holds (MoE models)

    role = afd_role(plan, rank)       # an AFD serving plan: attention or FFN, peers, experts

Order of work (each step is a function of its own):

1. :func:`rank_view` reads the plan and the torchrun environment (``RANK``, ``WORLD_SIZE``,
   ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``) and refuses - with
   :class:`WorldMismatch`, before any collective - a world that is not the plan's: another
   world size, another number of GPUs on this node, or a rank that the plan places on another
   node rank or local GPU.
2. :func:`choose_backend` picks the torch.distributed backend: the caller's, else NCCL when
   every process on the node has a GPU of its own, else gloo (:func:`node_backend` asks torch
   and torchrun's environment for those counts). With NCCL each process uses the GPU
   ``LOCAL_RANK``.
3. :func:`build_groups` creates every process group of every kind the plan lists, kinds in
   name order and each kind's groups as listed: torch requires every rank to call
   ``new_group`` for every group in the same order, members or not.

An AFD serving plan (``planner serve --mode afd``) runs no training mesh: :func:`afd_role`
tells a rank of its decode world (attention GPUs, then FFN GPUs) its role, its unit's peers,
the experts it holds and the micro-batch count, as plain data, for a serving script (and for
:mod:`planner.run.afd_job`).

The group kinds come from the plan itself (``plan.groups``), so this module reads Plans only
and imports no cost model.

torch is imported only inside the functions that need it (it is the optional ``planner[torch]``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from planner.errors import PlannerError
from planner.plan.document import Plan
from planner.plan.file import load_plan
from planner.plan.ranks import RANK_COLUMNS


__all__ = ["AFD_ROLES", "BACKENDS", "AfdRole", "Runtime", "RankView", "WorldMismatch", "afd_expert_homes",
           "afd_role", "afd_world", "build_groups", "choose_backend", "degrees_of", "expert_maps",
           "init", "local_processes", "node_backend", "rank_view", "replica_micro_batches"]

BACKENDS = ("gloo", "nccl")

class WorldMismatch(PlannerError):
    """The running job is not the world the plan was made for."""


@dataclass(frozen=True)
class RankView:
    """This rank's part of a plan (pure data: no torch)."""

    rank: int
    world_size: int
    node_rank: int
    local_rank: int
    coords: dict[str, int]
    stage: int
    layers: tuple[int, ...]
    experts: dict[int, tuple[int, ...]] = field(default_factory=dict)


def _env_int(env: Mapping[str, str], name: str) -> int:
    value = env.get(name)
    if value is None:
        raise WorldMismatch(f"environment variable {name} is not set: run under torchrun "
                            "(or set RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK)")
    try:
        return int(value)
    except ValueError:
        raise WorldMismatch(f"environment variable {name}={value!r} is not an integer") from None


def rank_view(plan: Plan, env: Mapping[str, str] | None = None) -> RankView:
    """This rank's coordinates, stage, layers and experts; :class:`WorldMismatch` if the
    torchrun world differs from the plan's (checked before any collective)."""
    env = os.environ if env is None else env
    rank, world = _env_int(env, "RANK"), _env_int(env, "WORLD_SIZE")
    local, local_world = _env_int(env, "LOCAL_RANK"), _env_int(env, "LOCAL_WORLD_SIZE")
    node_rank = int(env.get("GROUP_RANK", env.get("NODE_RANK", rank // max(local_world, 1))))
    if world != plan.num_gpus:
        raise WorldMismatch(f"the plan is for {plan.num_gpus} processes, this job has "
                            f"WORLD_SIZE={world}")
    if not 0 <= rank < world:
        raise WorldMismatch(f"RANK={rank} is outside the plan's {world} processes")
    row = plan.pool().rank_row(rank)
    node = plan.nodes[row["node_rank"]]
    if local_world != node["gpus"]:
        raise WorldMismatch(f"the plan puts {node['gpus']} processes on node rank "
                            f"{row['node_rank']}, this node runs LOCAL_WORLD_SIZE={local_world}")
    if (node_rank, local) != (row["node_rank"], row["local"]):
        raise WorldMismatch(f"the plan places rank {rank} on node rank {row['node_rank']} GPU "
                            f"{row['local']}, it runs on node rank {node_rank} GPU {local}")
    coords = {k: row[k] for k in RANK_COLUMNS[3:]}  # the axes, after rank/node/local
    stage = plan.stages[coords["pp"]]
    return RankView(rank, world, node_rank, local, coords, coords["pp"], tuple(stage["layers"]),
                    _experts(plan, coords["ep"]))


def replica_micro_batches(plan: Plan, rank: int) -> int:
    """Micro-batches per step that ``rank``'s data-parallel replica runs: the plan's share for
    it when replicas on faster GPUs take more (``Plan.replica_micro_batches``), else the
    plan's ``micro_batches``. A loop with unequal shares should weight each replica's loss by
    its tokens, so the synchronised gradient is the global batch's mean."""
    return plan.replica_micro_batches()[plan.pool().rank_row(rank)["dp"]]


def degrees_of(plan: Plan) -> dict[str, int]:
    """The size of each group kind of the plan (``tp``, ``cp``, ``dp``, ``pp``, ``ep``,
    ``dp_cp``, ``edp``), read off its groups (all groups of one kind have one size)."""
    return {kind: len(groups[0]) for kind, groups in plan.groups.items()}


def expert_maps(plan: Plan) -> tuple[dict[int, tuple[int, ...]], int]:
    """The EP group's ``physical_to_logical`` per model MoE layer, and the slots per GPU.

    From the plan's expert placement when it has one (the model's MoE layers map onto the
    placement's rows in order); otherwise one replica per expert, split evenly over the
    ``ep`` GPUs. Empty for a dense model.
    """
    model = plan.model_spec()
    if model.moe is None:
        return {}, 0
    moe_layers = [i for i, is_moe in enumerate(model.moe_layers) if is_moe]
    doc = plan.experts
    if doc is not None:
        rows = doc["physical_to_logical"]
        return {i: tuple(row) for i, row in zip(moe_layers, rows)}, doc["slots_per_gpu"]
    experts = model.moe.num_experts
    return ({i: tuple(range(experts)) for i in moe_layers},
            experts // degrees_of(plan)["ep"])


def _experts(plan: Plan, ep_rank: int) -> dict[int, tuple[int, ...]]:
    """Logical experts in this rank's slots per model MoE layer; the rank's GPU in the EP
    group is its ``ep`` coordinate (see :func:`expert_maps`)."""
    maps, S = expert_maps(plan)
    return {layer: row[ep_rank * S:(ep_rank + 1) * S] for layer, row in maps.items()}


def build_groups(plan: Plan, rank: int) -> dict[str, Any]:
    """Create every group of the plan on every rank, in one order (kinds sorted by name, each
    kind's groups as the plan lists them); return this rank's group of each kind (``None``
    where its group has one member: use no collective there)."""
    import torch.distributed as dist

    mine: dict[str, Any] = {}
    for kind in sorted(plan.groups):
        for ranks in plan.groups[kind]:
            handle = dist.new_group(ranks=list(ranks)) if len(ranks) > 1 else None
            if rank in ranks:
                mine[kind] = handle
    return mine


@dataclass(frozen=True)
class Runtime:
    plan: Plan
    view: RankView
    groups: dict[str, Any]


def choose_backend(requested: str | None, cuda_available: bool, gpus: int | None = None,
                   local_processes: int = 1) -> str:
    """The torch.distributed backend: ``requested`` when given (``gloo`` or ``nccl``), else
    ``nccl`` when every process on this node has a GPU of its own, else ``gloo``.

    ``gpus``: the CUDA devices torch sees (``None``: one per process when CUDA is available);
    ``local_processes``: this node's processes (torchrun's ``LOCAL_WORLD_SIZE``). NCCL refuses
    two ranks on one GPU at init ("Duplicate GPU detected"), so fewer GPUs than processes picks
    gloo, and a request for NCCL there is refused here, before any process group starts."""
    if gpus is None:
        gpus = local_processes if cuda_available else 0
    enough = cuda_available and gpus >= local_processes
    if requested is None:
        return "nccl" if enough else "gloo"
    if requested not in BACKENDS:
        raise PlannerError(f"backend {requested!r}: expected one of {', '.join(BACKENDS)}")
    if requested == "nccl" and not cuda_available:
        raise PlannerError("backend 'nccl' needs CUDA, and torch sees no CUDA device here "
                           "(use backend='gloo', or leave it unset to choose automatically)")
    if requested == "nccl" and not enough:
        raise PlannerError(f"backend 'nccl' needs a GPU per process: {local_processes} "
                           f"processes on this node, {gpus} GPU(s) (NCCL refuses two ranks on "
                           "one GPU; use backend='gloo', or leave it unset)")
    return requested


def node_backend(requested: str | None, env: Mapping[str, str]) -> str:
    """:func:`choose_backend` for this process: the CUDA devices torch sees and this node's
    processes from torchrun's ``env``."""
    import torch

    cuda = torch.cuda.is_available()
    return choose_backend(requested, cuda, torch.cuda.device_count() if cuda else 0,
                          local_processes(env))


def local_processes(env: Mapping[str, str]) -> int:
    """This node's process count as torchrun sets it (1 outside torchrun)."""
    try:
        return max(1, int(env.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def init(plan: Plan | str | Path | None = None, backend: str | None = None,
         env: Mapping[str, str] | None = None) -> Runtime:
    """Check the world, initialise torch.distributed (if needed) and build the plan's groups.

    ``plan`` defaults to the file named by ``PLANNER_PLAN`` (set by ``planner launch`` and by
    the launch files of ``planner emit``). ``backend``: see :func:`choose_backend` (``None``:
    NCCL with a GPU per process, gloo otherwise); with NCCL this process's GPU becomes
    ``LOCAL_RANK``."""
    import torch
    import torch.distributed as dist

    if plan is None:
        plan = (os.environ if env is None else env).get("PLANNER_PLAN")
        if plan is None:
            raise WorldMismatch("no plan: pass one to planner.run.runtime.init or set PLANNER_PLAN")
    if not isinstance(plan, Plan):
        plan = load_plan(Path(plan))
    view = rank_view(plan, env)
    if not dist.is_initialized():
        chosen = node_backend(backend, os.environ if env is None else env)
        if chosen == "nccl":
            torch.cuda.set_device(view.local_rank)
        dist.init_process_group(backend=chosen, rank=view.rank, world_size=view.world_size)
    return Runtime(plan, view, build_groups(plan, view.rank))


# --- Attention/FFN disaggregated (AFD) decode: a rank's part of a serving plan -----------------

AFD_ROLES = ("attention", "ffn")


@dataclass(frozen=True)
class AfdRole:
    """One rank of an AFD serving plan's decode world (pure data: no torch).

    The decode world is the plan's attention GPUs then its FFN GPUs: ranks
    ``0 .. A-1`` are the attention pool's ranks in its rank order, ``A .. A+F-1`` the FFN
    pool's (the prefill pool is not part of it). ``index`` is the rank's position in its pool,
    ``unit`` its AFD unit (attention instances are shared evenly by the FFN pool's units);
    ``attention_ranks`` / ``ffn_ranks`` are the world ranks of that unit, the FFN ranks in
    expert-parallel order (``ffn_ranks[i]`` holds expert block ``i``). ``experts``: the logical
    experts an FFN rank holds in every MoE layer (empty on attention ranks), see
    :func:`afd_expert_homes`. ``host`` / ``local_gpu``: where the plan puts the rank."""

    rank: int
    role: str
    index: int
    unit: int
    attention_ranks: tuple[int, ...]
    ffn_ranks: tuple[int, ...]
    experts: tuple[int, ...]
    micro_batches: int
    attention_tp: int
    world_size: int
    host: str
    local_gpu: int

    @property
    def peers(self) -> tuple[int, ...]:
        """The ranks this rank exchanges tokens with: its unit's FFN ranks (attention) or
        attention ranks (FFN)."""
        return self.ffn_ranks if self.role == "attention" else self.attention_ranks


def _afd_pools(plan: Plan) -> tuple[Any, Any, dict, dict]:
    """The attention and FFN pools of an AFD serving plan and their ``serving.pools`` layouts;
    :class:`PlannerError` for any other plan."""
    serving = plan.serving or {}
    if plan.kind != "serving" or serving.get("mode") != "afd":
        mode = serving.get("mode")
        raise PlannerError(f"not an AFD serving plan (kind {plan.kind!r}"
                           f"{f', mode {mode!r}' if mode else ''}): plan one with "
                           "'planner serve --mode afd'")
    layouts = {p["role"]: p for p in serving["pools"]}
    return plan.pool("attention"), plan.pool("ffn"), layouts["attention"], layouts["ffn"]


def afd_world(plan: Plan) -> tuple[int, int]:
    """GPUs of an AFD plan's attention pool and FFN pool: the decode world is their sum."""
    att, ffn, _, _ = _afd_pools(plan)
    return att.num_gpus, ffn.num_gpus


def afd_expert_homes(num_experts: int, ffn_gpus: int) -> tuple[int, ...]:
    """FFN rank (position in its unit) of each logical expert: contiguous equal blocks,
    expert ``e`` on ``e * F // E`` (the one-replica split of :func:`expert_maps`; SGLang's and
    vLLM's expert parallelism place experts the same way). An AFD plan's expert GPU count
    divides the expert count, so every FFN rank holds ``E / F`` experts."""
    if num_experts < 1 or ffn_gpus < 1:
        raise PlannerError(f"expert homes need experts and FFN GPUs >= 1, got {num_experts} "
                           f"and {ffn_gpus}")
    return tuple(e * ffn_gpus // num_experts for e in range(num_experts))


def afd_role(plan: Plan, rank: int) -> AfdRole:
    """Rank ``rank`` of the decode world of AFD serving plan ``plan`` (see :class:`AfdRole`);
    :class:`PlannerError` for a plan that is not AFD or a rank outside its world."""
    att, ffn, att_layout, ffn_layout = _afd_pools(plan)
    A, F = att.num_gpus, ffn.num_gpus
    if not 0 <= rank < A + F:
        raise PlannerError(f"rank {rank} is outside the AFD decode world of {A} attention + "
                           f"{F} FFN GPUs")
    units, ep = ffn_layout["workers"], ffn_layout["ep"]
    per_unit = att_layout["workers"] // units  # attention instances of a unit
    att_rows, ffn_rows = att.rank_rows(), ffn.rank_rows()
    # instance i owns data ranks i*dp .. (i+1)*dp - 1 (planner.serving.build), FFN unit u the
    # data ranks u*ep .. (u+1)*ep - 1
    att_unit = {r["rank"]: r["dp"] // att_layout.get("dp", 1) // per_unit for r in att_rows}
    ffn_unit = {r["rank"]: r["dp"] // ep for r in ffn_rows}
    if rank < A:
        role, index, pool, unit = "attention", rank, att, att_unit[rank]
    else:
        role, index, pool, unit = "ffn", rank - A, ffn, ffn_unit[rank - A]
    row = pool.rank_rows()[index]
    host = {n["node_rank"]: n["host"] for n in pool.nodes}[row["node_rank"]]
    attention_ranks = tuple(sorted(r for r, u in att_unit.items() if u == unit))
    mine = sorted((r for r in ffn_rows if ffn_unit[r["rank"]] == unit), key=lambda r: r["ep"])
    ffn_ranks = tuple(A + r["rank"] for r in mine)
    experts: tuple[int, ...] = ()
    moe = plan.model_spec().moe
    if role == "ffn" and moe is not None:
        homes = afd_expert_homes(moe.num_experts, len(ffn_ranks))
        experts = tuple(e for e, h in enumerate(homes) if h == ffn_ranks.index(rank))
    return AfdRole(rank, role, index, unit, attention_ranks, ffn_ranks, experts,
                   int(plan.serving.get("micro_batches", 1)), att_layout["tp"], A + F, host,
                   row["local"])
