"""Search parallel configurations: enumerate consistent choices, prune, estimate, rank.

The space (``cost_models.space``) is walked degree tuple by degree tuple (tp, cp, pp, dp,
ep, etp), in order of a step-time floor (``tuple_floor_s``: the compute of the most loaded
stage times the micro-batches, for the best micro-batch size and layer split; communication,
recompute and the bubble only add to it). Once ``top_k`` tuples are ranked, a tuple whose floor
is slower than the k-th best found is skipped unseen: it cannot enter the top k. For each tuple
that is visited:

1. *Memory lower bound.* The tuple with its most frugal options (micro-batch 1, full
   recompute, ZeRO-3, and SlimPipe's most slices where it is searched) is checked first; if
   even that does not fit, every option of the tuple is pruned unseen.
2. *Views.* The group views per stage (``cost_models.groups.stage_views``) are computed once
   and shared by all options of the tuple.
3. *Options.* For each micro-batch size, interleaving depth and schedule (1F1B, interleaved,
   ZB-H1, and from 16K-token sequences SlimPipe with 2-16 slices), the least activation
   recomputation that fits is taken (none, selective, then full
   recompute of the fewest layers per stage that fit) for each ZeRO stage (1, the distributed
   optimizer, 2 and 3), keeping a higher stage only when it needs strictly less recompute:
   less recompute is never slower in the cost model, nor is a lower ZeRO stage at equal
   recompute, so these few options contain the fastest of their kind. Each is estimated; the
   fastest that fits is the tuple's representative. (``tests/test_search.py`` checks this
   against exhaustive enumeration.)

Tuples are ranked by predicted step time (objective ``throughput``). The result keeps the
counts the speed benchmark reports (tuples seen, pruned by memory and by the step-time bound,
options estimated, options pruned).
"""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from cost_models.groups import ViewsMemo, stage_views
from cost_models.model_spec import ModelSpec
from cost_models.parallel import Degrees
from cost_models.training.config import RECOMPUTE_MODES, TrainingConfig, Workload
from cost_models.profile import Profile
from cost_models.training.step import (Estimate, compute_floor_s, estimate, estimate_memory,
                                       memory_fits)
from planner.errors import InfeasibleError
from planner.training.shares import refine_shares
from planner.training.slicing import refine_partition
from cost_models.space import (SpaceLimits, degree_tuples, micro_batch_sizes,
                                  vpp_sizes)
from topologies.cluster import Cluster, first_nodes

MAX_TP_GPUS = 16  # TP beyond 16 GPUs is never competitive in the cost model's regime
SLIMPIPE_MIN_SEQ = 16384  # sequence slicing is tried from this sequence length up (long context)
SEQ_SLICES = (2, 4, 8, 16)
ZERO_STAGES = (1, 2, 3)

Progress = Callable[[int, int], None]  # (tuples done, tuples total)


@dataclass(frozen=True)
class SearchSpace:
    """Optional restrictions from the command line; ``None`` leaves a choice free."""

    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None
    micro_batch: int | None = None
    schedules: tuple[str, ...] = ("1f1b", "interleaved-1f1b", "zb-h1", "slimpipe")
    moe_dispatcher: str = "alltoall"  # the MoE token dispatcher every option uses
    attention: str = "flash"  # the attention kernels every option runs
    cuda_graphs: str = "none"  # what CUDA graphs capture in every option

    def admits(self, d: Degrees) -> bool:
        return all(want is None or want == got for want, got in
                   ((self.tp, d.tp), (self.pp, d.pp), (self.cp, d.cp), (self.ep, d.ep)))


@dataclass(frozen=True)
class SearchStats:
    """What the search did: for the speed benchmark and the report footer."""

    degree_tuples: int
    tuples_pruned_memory: int
    options_estimated: int
    options_pruned_memory: int
    seconds: float
    tuples_pruned_bound: int = 0  # their compute floor was slower than the k-th best found


@dataclass(frozen=True)
class SearchResult:
    ranked: tuple[Estimate, ...]  # best option of each degree tuple, fastest first
    stats: SearchStats


def space_limits(model: ModelSpec, cluster: Cluster, workload: Workload) -> SpaceLimits:
    """The bounds of the search space for this model, cluster and workload."""
    domain = min(g.gpus_per_node * g.nvlink_domain_nodes for g in cluster.node_groups)
    return SpaceLimits(
        num_gpus=cluster.num_gpus, num_heads=model.num_heads, num_kv_heads=model.num_kv_heads,
        num_layers=model.num_layers, num_experts=model.moe.num_experts if model.moe else 0,
        global_batch=workload.global_batch, seq_len=workload.seq_len,
        max_tp=min(domain, MAX_TP_GPUS), mla=model.mla is not None)


def base_config(d: Degrees, micro_batch: int = 1, seq_len: int | None = None,
                moe_dispatcher: str = "alltoall", attention: str = "flash",
                cuda_graphs: str = "none") -> TrainingConfig:
    """The planner's defaults for a degree tuple: sequence parallelism with TP (when each CP
    rank's tokens split evenly over the TP ranks), the distributed optimizer, overlapped
    gradient reduce and parameter gather, ``attention`` (default: the GPU's native fused
    kernel), ``moe_dispatcher`` and ``cuda_graphs``."""
    sp = d.tp > 1 and (seq_len is None or (seq_len // d.cp) % d.tp == 0)
    return TrainingConfig(degrees=d, micro_batch=micro_batch, sequence_parallel=sp, zero=1,
                          moe_dispatcher=moe_dispatcher, attention=attention,
                          cuda_graphs=cuda_graphs)


def _recompute_option(cfg: TrainingConfig, layers_per_chunk: int, i: int) -> TrainingConfig:
    """The ``i``-th recompute choice, least recomputation first: none, selective, then full
    recompute of 1, 2, ... layers per chunk, then of all of them (``layers_per_chunk + 2``
    choices in all; built on demand, the bisection below looks at few of them)."""
    if i == 0:
        return replace(cfg, recompute="none")
    if i == 1:
        return replace(cfg, recompute="selective")
    n = i - 1
    return replace(cfg, recompute="full", recompute_layers=n if n < layers_per_chunk else None)


def _least_fitting(count: int, option: Callable[[int], TrainingConfig],
                   fits: Callable[[TrainingConfig], bool]) -> tuple[TrainingConfig | None, int, int]:
    """The first of ``count`` options that fits (option, index; None, count if none does) and
    how many were checked. The first two (none, selective) are checked in turn; among the
    full-recompute ones memory falls as more layers are recomputed, so they are bisected."""
    tried = 0
    for i in range(min(2, count)):
        tried += 1
        candidate = option(i)
        if fits(candidate):
            return candidate, i, tried
    lo, hi, found = 2, count - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        tried += 1
        candidate = option(mid)
        if fits(candidate):
            found, hi = (candidate, mid), mid - 1
        else:
            lo = mid + 1
    return (found[0], found[1], tried) if found else (None, count, tried)


def _fitting_options(model: ModelSpec, cluster: Cluster, workload: Workload,
                     cfg: TrainingConfig, prof: Profile) -> tuple[list[TrainingConfig], int]:
    """For each ZeRO stage, the least recompute that fits, kept only if it recomputes less than
    every lower stage's option (higher ZeRO stages are never faster at equal recompute, and
    ZeRO 0 is never faster than 1: all-reduce moves more than reduce-scatter + all-gather and
    the optimizer steps the unsharded states); on GPUs of different memory sizes also the
    options of :func:`_memory_split_options`. Returns the options and how many were tried."""
    layers_per_chunk = -(-model.num_layers // (cfg.degrees.pp * cfg.vpp))
    tried, limit, found = 0, layers_per_chunk + 2, []
    levels: dict[int, int] = {}  # ZeRO stage looked at -> levels below it do not fit evenly
    for zero in ZERO_STAGES:
        staged = replace(cfg, zero=zero)
        option, level, checked = _least_fitting(
            limit, lambda i: _recompute_option(staged, layers_per_chunk, i),
            lambda c: memory_fits(model, cluster, workload, c, prof))
        tried += checked
        levels[zero] = level
        if option is not None:
            found.append(option)
            limit = level  # a higher stage must recompute strictly less to be worth it
        if limit == 0:
            break
    extra, checked = _memory_split_options(model, cluster, workload, cfg, prof, levels,
                                           layers_per_chunk, bool(found))
    return found + extra, tried + checked


def _memory_split_options(model: ModelSpec, cluster: Cluster, workload: Workload,
                          cfg: TrainingConfig, prof: Profile, levels: dict[int, int],
                          layers_per_chunk: int, any_fits: bool
                          ) -> tuple[list[TrainingConfig], int]:
    """On GPUs of different memory sizes, the options that fit only with a layer split by each
    stage's memory (:func:`memory_split`): per ZeRO stage the search looked at (``levels``:
    stage -> the recompute levels below it do not fit evenly), no and selective recompute
    where the even split needs more; when nothing fits evenly (not ``any_fits``), the least
    recompute that fits so with the most frugal ZeRO stage. They are extra candidates, judged
    by their full estimate (a memory-led split may be slower than more recompute with the even
    split)."""
    if not _split_may_help(cluster, cfg):
        return [], 0
    out, tried = [], 0
    for zero, level in levels.items():
        for i in range(min(2, level)):
            tried += 1
            split = memory_split(model, cluster, workload, _recompute_option(
                replace(cfg, zero=zero), layers_per_chunk, i), prof)
            if split is not None:
                out.append(split)
                break
    if not any_fits and not out:
        frugal, splits = replace(cfg, zero=ZERO_STAGES[-1]), {}

        def fits(option: TrainingConfig) -> bool:
            splits[option] = memory_split(model, cluster, workload, option, prof)
            return splits[option] is not None

        option, _, checked = _least_fitting(
            layers_per_chunk + 2, lambda i: _recompute_option(frugal, layers_per_chunk, i), fits)
        tried += checked
        if option is not None:
            out.append(splits[option])
    return out, tried


def _split_may_help(cluster: Cluster, cfg: TrainingConfig) -> bool:
    """GPUs of different memory sizes and a schedule whose stages the partition DP reshapes."""
    return (len({g.gpu.hbm_bytes for g in cluster.node_groups}) > 1 and cfg.degrees.pp > 1
            and cfg.vpp == 1 and cfg.seq_slices == 1 and cfg.stage_layer_counts is None)


def memory_split(model: ModelSpec, cluster: Cluster, workload: Workload, cfg: TrainingConfig,
                 prof: Profile) -> TrainingConfig | None:
    """``cfg`` with the partition DP's layer split (listing order) when that split fits on each
    stage's own GPUs, for options whose even split does not fit on the smallest GPU; None
    when it does not fit, and whenever the GPUs' memory sizes are all equal or the schedule
    has one stage, several chunks per stage or sequence slices (the DP's 1F1B model)."""
    if not _split_may_help(cluster, cfg):
        return None
    refined = refine_partition(model, cluster, workload, estimate(model, cluster, workload, cfg,
                                                                  prof), prof)
    return refined.config if refined.memory.fits else None


def _schedule_variants(model: ModelSpec, cfg: TrainingConfig, workload: Workload,
                       space: SearchSpace) -> Iterable[TrainingConfig]:
    m = cfg.micro_batches(workload)
    for v in vpp_sizes(model.num_layers, cfg.degrees.pp, m):
        if v == 1 and "1f1b" in space.schedules:
            yield cfg
        if v > 1 and "interleaved-1f1b" in space.schedules:
            yield replace(cfg, vpp=v)
    if cfg.degrees.pp > 1 and "zb-h1" in space.schedules:
        yield replace(cfg, zero_bubble=True)
    if cfg.degrees.pp > 1 and "slimpipe" in space.schedules:
        yield from (replace(cfg, seq_slices=k) for k in seq_slice_counts(cfg, workload))


def seq_slice_counts(cfg: TrainingConfig, workload: Workload) -> list[int]:
    """SlimPipe slice counts worth trying: long sequences only, each slice a whole number of
    tokens per context-parallel rank and, with sequence parallelism, per TP rank."""
    if workload.seq_len < SLIMPIPE_MIN_SEQ:
        return []
    per_rank = cfg.degrees.cp * (cfg.degrees.tp if cfg.sequence_parallel else 1)
    return [k for k in SEQ_SLICES if workload.seq_len % (per_rank * k) == 0]


def _frugal(d: Degrees, workload: Workload, space: SearchSpace) -> TrainingConfig:
    """The least memory any option of ``d`` needs: micro-batch 1, full recompute, ZeRO-3 and,
    where SlimPipe is searched, its most slices (activations in flight fall with the slices)."""
    cfg = replace(base_config(d), recompute="full", zero=3)
    if d.pp > 1 and "slimpipe" in space.schedules:
        cfg = replace(cfg, seq_slices=max(seq_slice_counts(cfg, workload), default=1))
    return cfg


def search(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
           space: SearchSpace = SearchSpace(), top_k: int = 10,
           progress: Progress | None = None,
           keep: Callable[[Degrees], bool] | None = None,
           batch_shares: bool = True) -> SearchResult:
    """The ``top_k`` fastest degree tuples, each with its fastest fitting options; ``keep``
    (when given) admits only the tuples it accepts; on a mixed cluster each tuple's best
    option with its DP batch shares (``planner.training.shares``) when they are predicted
    faster, unless ``batch_shares`` is False."""
    start = time.perf_counter()
    tuples = [d for d in degree_tuples(space_limits(model, cluster, workload))
              if space.admits(d) and (keep is None or keep(d))]
    floors = {d: tuple_floor_s(model, cluster, workload, prof, d, space) for d in tuples}
    best: list[Estimate] = []
    kth: list[float] = []  # max-heap (negated) of the top_k step times found so far
    views_memo: ViewsMemo = {}  # group views by layout, shared by the tuples (listing order)
    pruned_tuples = pruned_bound = estimated = pruned_options = 0
    for i, d in enumerate(sorted(tuples, key=lambda d: (floors[d], d.sort_key()))):
        if progress:
            progress(i, len(tuples))
        if len(kth) >= top_k and floors[d] > -kth[0]:
            pruned_bound += 1
            continue
        outcome = best_for_degrees(model, cluster, workload, prof, d, space, views_memo,
                                   batch_shares)
        if outcome is None:
            pruned_tuples += 1
            continue
        est, n_estimated, n_pruned = outcome
        estimated += n_estimated
        pruned_options += n_pruned
        if est is not None:
            best.append(est)
            heapq.heappush(kth, -est.step_time_s)
            if len(kth) > top_k:
                heapq.heappop(kth)
    if progress:
        progress(len(tuples), len(tuples))
    ranked = tuple(sorted(best, key=rank_key)[:top_k])
    stats = SearchStats(len(tuples), pruned_tuples, estimated, pruned_options,
                        time.perf_counter() - start, pruned_bound)
    if not ranked and tuples and estimated + pruned_options == 0 and pruned_tuples < len(tuples):
        raise InfeasibleError(
            f"no configuration of {model.name} on {cluster.num_gpus} GPUs can use the allowed "
            f"schedules {', '.join(space.schedules)} (interleaved 1F1B and ZB-H1 need pipeline "
            f"parallelism, slimpipe also sequences of at least {SLIMPIPE_MIN_SEQ:,} tokens; "
            f"1f1b covers pp = 1)")
    if not ranked:
        raise InfeasibleError(infeasible_reason(model, cluster, workload, prof, tuples, space))
    return SearchResult(ranked, stats)


def tuple_floor_s(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
                  d: Degrees, space: SearchSpace = SearchSpace()) -> float:
    """A lower bound on the step time of every option of ``d``: the least compute floor
    (``cost_models.training.step.compute_floor_s``) over its micro-batch sizes and layer splits."""
    limits = space_limits(model, cluster, workload)
    floors = []
    for mb in micro_batch_sizes(limits, d.dp):
        if space.micro_batch is not None and mb != space.micro_batch:
            continue
        base = base_config(d, mb, workload.seq_len, space.moe_dispatcher, space.attention,
                           space.cuda_graphs)
        for v in vpp_sizes(model.num_layers, d.pp, base.micro_batches(workload)):
            floors.append(compute_floor_s(model, cluster, workload, replace(base, vpp=v), prof))
    return min(floors, default=0.0)


def best_for_degrees(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
                     d: Degrees, space: SearchSpace = SearchSpace(),
                     views_memo: ViewsMemo | None = None, batch_shares: bool = True
                     ) -> tuple[Estimate | None, int, int] | None:
    """The fastest fitting option of one degree tuple (with DP batch shares by replica speed
    when ``batch_shares`` and they are predicted faster), with the counts of options estimated
    and pruned by memory; None when the tuple's memory lower bound already does not fit (even
    with :func:`memory_split`'s layer split)."""
    frugal = _frugal(d, workload, space)
    if (not memory_fits(model, cluster, workload, frugal, prof)
            and memory_split(model, cluster, workload, frugal, prof) is None):
        return None
    limits = space_limits(model, cluster, workload)
    views = None
    candidates: list[Estimate] = []
    pruned = 0
    for mb in micro_batch_sizes(limits, d.dp):
        if space.micro_batch is not None and mb != space.micro_batch:
            continue
        memo: dict[TrainingConfig, list[TrainingConfig]] = {}
        base = base_config(d, mb, workload.seq_len, space.moe_dispatcher, space.attention,
                           space.cuda_graphs)
        for variant in _schedule_variants(model, base, workload, space):
            plain = replace(variant, zero_bubble=False)  # ZB-H1 holds 1F1B's activations
            if plain not in memo:
                memo[plain], tried = _fitting_options(model, cluster, workload, plain, prof)
                pruned += tried - len(memo[plain])
            fitting = [replace(o, zero_bubble=variant.zero_bubble) for o in memo[plain]]
            for option in fitting:
                if views is None:
                    views = stage_views(cluster, option.degrees, memo=views_memo)
                candidates.append(estimate(model, cluster, workload, option, prof, views=views))
    best = min(candidates, key=rank_key) if candidates else None
    if best is not None and best.config.stage_layer_counts is not None:
        # a memory-led split (already partitioned) meets the best even-split option with its
        # own partition, which placement would give it anyway
        even = [c for c in candidates if c.config.stage_layer_counts is None]
        if even:
            rival = refine_partition(model, cluster, workload, min(even, key=rank_key), prof)
            best = min((best, rival), key=rank_key)
    if best is not None and batch_shares:  # the step's floor bounds shares too (compute_floor_s)
        best = refine_shares(model, cluster, workload, best, prof)
    return best, len(candidates), pruned


def rank_key(e: Estimate) -> tuple:
    """Fastest first; ties go to the simpler plan (less parallelism, less recompute)."""
    c, d = e.config, e.config.degrees
    return (round(e.step_time_s, 9), d.tp * d.cp * d.pp, c.vpp, c.zero_bubble, c.seq_slices,
            RECOMPUTE_MODES.index(c.recompute), c.zero, d.tp, d.pp, d.cp, d.ep,
            d.expert_tp, c.micro_batch)


def _consistent(model: ModelSpec, cluster: Cluster, workload: Workload) -> bool:
    return next(iter(degree_tuples(space_limits(model, cluster, workload))), None) is not None


NEAREST_SCAN_NODES = 2048  # node counts tried one by one below the cluster's (about 0.2 s)


def _fewer_nodes(num_nodes: int) -> list[int]:
    """Node counts to try, most first: every count down to ``NEAREST_SCAN_NODES`` below the
    cluster's, then the largest multiples of 2**k under that and the powers of two (on huge
    clusters a full scan takes minutes)."""
    exact = list(range(num_nodes - 1, max(num_nodes - 1 - NEAREST_SCAN_NODES, 0), -1))
    floor = exact[-1] if exact else 1
    bits = range(floor.bit_length())
    coarse = sorted(({(floor >> k) << k for k in bits} | {1 << k for k in bits}) - {0}
                    - set(exact), reverse=True)
    return exact + [n for n in coarse if n < floor]


def _nearest_consistent(model: ModelSpec, cluster: Cluster, workload: Workload) -> str:
    """What would make the degrees consistent: the most nodes of the cluster's first ones that
    work at this batch, and the smallest larger batch that works on all the GPUs (a multiple
    of a divisor of the GPU count; the data-parallel degree divides both)."""
    hints = []
    for nodes in _fewer_nodes(cluster.num_nodes):
        sub = first_nodes(cluster, nodes)
        if _consistent(model, sub, workload):
            hints.append(f"{nodes:,} nodes ({sub.num_gpus:,} GPUs) at this batch")
            break
    n, batch = cluster.num_gpus, workload.global_batch
    divisors = [q for q in range(1, math.isqrt(n) + 1) if n % q == 0]
    candidates = sorted({-(-batch // q) * q for q in divisors + [n // q for q in divisors]})
    for b in candidates:
        if b > batch and _consistent(model, cluster, replace(workload, global_batch=b)):
            hints.append(f"a global batch of {b:,} on all {n:,} GPUs")
            break
    return "; nearest that work: " + ", or ".join(hints) if hints else ""


def infeasible_reason(model: ModelSpec, cluster: Cluster, workload: Workload, prof: Profile,
                      tuples: list[Degrees], space: SearchSpace = SearchSpace()) -> str:
    """Which constraint binds when nothing fits: the least memory any configuration needs."""
    gib = 2**30
    if not tuples:
        return (f"no consistent parallel configuration of {model.name} on {cluster.num_gpus:,} "
                f"GPUs with global batch {workload.global_batch:,} and sequence "
                f"{workload.seq_len:,}: the data-parallel degree must divide the batch and TP "
                f"the {model.num_heads} heads{_nearest_consistent(model, cluster, workload)}")
    frugal = [_frugal(d, workload, space) for d in tuples]
    mem, cfg = min(((estimate_memory(model, cluster, workload, f, prof), f) for f in frugal),
                   key=lambda pair: pair[0].peak_bytes)
    d = cfg.degrees
    slices = f", {cfg.seq_slices} SlimPipe slices" if cfg.seq_slices > 1 else ""
    total_states = (mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes) * cluster.num_gpus
    return (f"{model.name} does not fit on {cluster.num_gpus} x {cluster.slowest_gpu.name}: the "
            f"most frugal configuration (tp={d.tp}, pp={d.pp}, cp={d.cp}, ep={d.ep}, full "
            f"recompute, ZeRO-3, micro-batch 1{slices}) needs {mem.peak_bytes / gib:.1f} GiB "
            "per GPU, "
            f"a GPU has {mem.capacity_bytes / gib:.1f} GiB (model states alone "
            f"{total_states / 2**40:.2f} TiB over the cluster's "
            f"{cluster.num_gpus * mem.capacity_bytes / 2**40:.2f} TiB)")
