"""Contiguous layer-to-stage partition that minimises the slowest pipeline stage.

The problem
-----------
``L`` layers, in order, are cut into ``S`` contiguous blocks, block ``s`` running on pipeline
stage ``s``. Stage ``s`` covering layers ``[a, b)`` takes::

    time_s(s, a, b)  = (sum(layer_time_s[a:b]) + first_extra_s [s == 0]
                                               + last_extra_s  [s == S - 1]) * slowdown[s]
                       + stage_link_s[s]
    bytes(s, a, b)   = sum(layer_state_bytes[a:b]) + in_flight[s] * sum(layer_activation_bytes[a:b])
                       + first_extra_bytes [s == 0] + last_extra_bytes [s == S - 1]

and must satisfy ``bytes(s, a, b) <= stage_memory_limit_bytes[s]`` (when limits are given)
and ``b - a >= min_layers_per_stage``. The objective is ``min max_s time_s``: in steady
state a synchronous pipeline advances at the pace of its slowest stage (Narayanan et al.
2019, "PipeDream: Generalized Pipeline Parallelism for DNN Training" §3.1, whose planner
solves the same min-max by dynamic programming; Megatron-LM's 1F1B keeps ``p - s``
micro-batches of activations on stage ``s``, Narayanan et al. 2021, "Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM" §2.2.1, hence the default
``in_flight[s] = S - s``). ``slowdown`` models heterogeneous stages (a stage on slower GPUs
takes proportionally longer, Metis, Um et al. ATC'24). ``stage_link_s[s]`` is what stage
``s`` spends per micro-batch on its own pipeline send/recv, whatever layers it holds: in 1F1B
steady state each stage's period is its compute plus its transfers (Narayanan et al. 2021
§2.2), so a slow link (sockets between RDMA islands) is cheapest next to a stage with slack.
Missing byte and link arrays count as zero.

The dynamic program (:func:`partition_layers`)
----------------------------------------------
``best[s][a]`` = the smallest achievable bottleneck of stages ``s..S-1`` covering layers
``a..L-1``: ``best[S][L] = 0`` and
``best[s][a] = min_b max(time_s(s, a, b), best[s + 1][b])`` over feasible ``b``. Segment
sums come from an exactly rounded table (``math.fsum`` of each slice), so the DP, the
public :func:`stage_time_s` / :func:`stage_bytes` and the brute force see bit-identical
floats. ``O(S * L^2)`` work, vectorised over ``(a, b)`` with numpy.

Tie-break (identical in :func:`partition_layers` and :func:`brute_force_partition`)
----------------------------------------------------------------------------------
Let ``T`` be the optimum and ``T+ = T * (1 + 1e-9)``. Among the partitions whose bottleneck
is ``<= T+``, return the lexicographically smallest ``layers_per_stage``. The DP builds it
front to back: stage ``s`` takes the smallest count whose own time is ``<= T+`` and whose
suffix can still finish within ``T+`` (``best[s + 1][b] <= T+``, ``best`` being exact).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

TIE_RELATIVE = 1e-9
BRUTE_FORCE_MAX_PARTITIONS = 2_000_000


class InfeasiblePartition(ValueError):
    """No partition satisfies the layer-count and memory constraints (message says which)."""


@dataclass(frozen=True)
class PartitionProblem:
    layer_time_s: tuple[float, ...]
    num_stages: int
    first_extra_s: float = 0.0
    last_extra_s: float = 0.0
    stage_slowdown: tuple[float, ...] | None = None
    layer_state_bytes: tuple[float, ...] | None = None
    layer_activation_bytes: tuple[float, ...] | None = None
    in_flight: tuple[int, ...] | None = None  # default 1F1B: S - s
    first_extra_bytes: float = 0.0
    last_extra_bytes: float = 0.0
    stage_memory_limit_bytes: tuple[float, ...] | None = None
    min_layers_per_stage: int = 1
    stage_link_s: tuple[float, ...] | None = None  # per stage, independent of its layers

    def __post_init__(self) -> None:
        for name in ("layer_time_s", "stage_slowdown", "layer_state_bytes",
                     "layer_activation_bytes", "in_flight", "stage_memory_limit_bytes",
                     "stage_link_s"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        validate(self)

    @property
    def num_layers(self) -> int:
        return len(self.layer_time_s)


@dataclass(frozen=True)
class Partition:
    layers_per_stage: tuple[int, ...]
    stage_time_s: tuple[float, ...]
    bottleneck_s: float


# ---------------------------------------------------------------------------------------
# Validation and the per-stage quantities
# ---------------------------------------------------------------------------------------

def _check_values(name: str, values: Sequence[float], positive: bool = False) -> None:
    for i, x in enumerate(values):
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
            raise ValueError(f"{name}[{i}] is not a number: {x!r}")
        if not math.isfinite(x) or x < 0 or (positive and x <= 0):
            bound = "> 0" if positive else ">= 0"
            raise ValueError(f"{name}[{i}] must be finite and {bound}, got {x!r}")


def validate(problem: PartitionProblem) -> None:
    """Raise ValueError on malformed input (lengths, signs, counts)."""
    num_stages = problem.num_stages
    if isinstance(num_stages, bool) or int(num_stages) != num_stages or num_stages < 1:
        raise ValueError(f"num_stages must be an integer >= 1, got {num_stages!r}")
    min_layers = problem.min_layers_per_stage
    if isinstance(min_layers, bool) or int(min_layers) != min_layers or min_layers < 0:
        raise ValueError(f"min_layers_per_stage must be an integer >= 0, got {min_layers!r}")
    if not problem.layer_time_s:
        raise ValueError("layer_time_s is empty: there must be at least one layer")
    _check_values("layer_time_s", problem.layer_time_s)
    _check_values("first_extra_s/last_extra_s", (problem.first_extra_s, problem.last_extra_s))
    _check_values("first_extra_bytes/last_extra_bytes",
                  (problem.first_extra_bytes, problem.last_extra_bytes))
    num_layers = len(problem.layer_time_s)
    per_layer = ("layer_state_bytes", "layer_activation_bytes")
    per_stage_arrays = ("stage_slowdown", "in_flight", "stage_memory_limit_bytes",
                        "stage_link_s")
    for name in per_layer + per_stage_arrays:
        values = getattr(problem, name)
        if values is None:
            continue
        expected = num_layers if name in per_layer else num_stages
        unit = "layers" if name in per_layer else "stages"
        if len(values) != expected:
            raise ValueError(f"{name} has {len(values)} entries for {expected} {unit}")
        _check_values(name, values, positive=(name == "stage_slowdown"))
    if problem.in_flight is not None:
        if any(int(x) != x for x in problem.in_flight):
            raise ValueError(f"in_flight must hold integers: {problem.in_flight}")


def slowdown(problem: PartitionProblem, s: int) -> float:
    return 1.0 if problem.stage_slowdown is None else float(problem.stage_slowdown[s])


def in_flight(problem: PartitionProblem, s: int) -> int:
    """Micro-batches of activations stage ``s`` holds (default 1F1B: ``S - s``)."""
    return problem.num_stages - s if problem.in_flight is None else int(problem.in_flight[s])


def _fsum(values: Sequence[float] | None, start: int, stop: int) -> float:
    return 0.0 if values is None else math.fsum(values[start:stop])


def _time_from_sum(problem: PartitionProblem, s: int, layer_sum_s):
    """Stage time from its exactly rounded layer sum (scalar or numpy array, same rounding)."""
    t = layer_sum_s
    if s == 0:
        t = t + float(problem.first_extra_s)
    if s == problem.num_stages - 1:
        t = t + float(problem.last_extra_s)
    t = t * slowdown(problem, s)
    if problem.stage_link_s is not None:
        t = t + float(problem.stage_link_s[s])
    return t


def _bytes_from_sums(problem: PartitionProblem, s: int, state_sum, act_sum):
    total = state_sum + float(in_flight(problem, s)) * act_sum
    if s == 0:
        total = total + float(problem.first_extra_bytes)
    if s == problem.num_stages - 1:
        total = total + float(problem.last_extra_bytes)
    return total


def stage_time_s(problem: PartitionProblem, s: int, start: int, stop: int) -> float:
    """Time of stage ``s`` running layers ``[start, stop)`` (module docstring)."""
    return float(_time_from_sum(problem, s, _fsum(problem.layer_time_s, start, stop)))


def stage_bytes(problem: PartitionProblem, s: int, start: int, stop: int) -> float:
    """Memory of stage ``s`` holding layers ``[start, stop)`` (module docstring)."""
    return float(_bytes_from_sums(problem, s,
                                  _fsum(problem.layer_state_bytes, start, stop),
                                  _fsum(problem.layer_activation_bytes, start, stop)))


def stage_fits(problem: PartitionProblem, s: int, start: int, stop: int) -> bool:
    if problem.stage_memory_limit_bytes is None:
        return True
    return stage_bytes(problem, s, start, stop) <= float(problem.stage_memory_limit_bytes[s])


def evaluate(problem: PartitionProblem, layers_per_stage: Sequence[int]) -> Partition:
    """Stage times and bottleneck of a given partition (no feasibility check)."""
    times = []
    start = 0
    for s, count in enumerate(layers_per_stage):
        times.append(stage_time_s(problem, s, start, start + count))
        start += count
    return Partition(tuple(int(c) for c in layers_per_stage), tuple(times), max(times))


def is_feasible(problem: PartitionProblem, layers_per_stage: Sequence[int]) -> bool:
    if len(layers_per_stage) != problem.num_stages or sum(layers_per_stage) != problem.num_layers:
        return False
    start = 0
    for s, count in enumerate(layers_per_stage):
        if count < problem.min_layers_per_stage or not stage_fits(problem, s, start, start + count):
            return False
        start += count
    return True


# ---------------------------------------------------------------------------------------
# Infeasibility diagnosis
# ---------------------------------------------------------------------------------------

def _format_bytes(x: float) -> str:
    return f"{x / 1e9:.1f} GB" if abs(x) >= 1e8 else f"{x:.6g} bytes"


def _segment_table(values: Sequence[float] | None, num_layers: int) -> np.ndarray:
    """``table[a, b] = fsum(values[a:b])`` for ``a <= b`` (zeros below the diagonal)."""
    table = np.zeros((num_layers + 1, num_layers + 1))
    if values is None:
        return table
    for a in range(num_layers):
        table[a, a + 1:] = [math.fsum(values[a:b]) for b in range(a + 1, num_layers + 1)]
    return table


def _diagnose(problem: PartitionProblem, fits: list[np.ndarray]) -> str:
    """Say which memory constraint binds; called only when no partition is feasible."""
    L, S, k = problem.num_layers, problem.num_stages, problem.min_layers_per_stage
    limits = problem.stage_memory_limit_bytes
    # Alone: the smallest block a stage can ever get (bytes grow with the block).
    for s in range(S):
        if S == 1:
            blocks = [(0, L)]
        elif s == 0:
            blocks = [(0, k)]
        elif s == S - 1:
            blocks = [(L - k, L)]
        else:
            blocks = [(a, a + k) for a in range(s * k, L - (S - s) * k + 1)]
        need = min(stage_bytes(problem, s, a, b) for a, b in blocks)
        if limits is not None and need > limits[s]:
            return (f"stage {s} needs at least {_format_bytes(need)} for its smallest "
                    f"layer block, limit {_format_bytes(limits[s])}")
    # Together: how far can the stages get from the front?
    reach = np.zeros(L + 1, dtype=bool)
    reach[0] = True
    for s in range(S):
        nxt = (reach[:, None] & fits[s]).any(axis=0)
        if not nxt.any():
            last = int(np.flatnonzero(reach).max())
            return (f"stages 0..{s - 1} can cover at most layers 0..{last - 1} and stage {s} "
                    f"cannot hold any block that follows within its limit "
                    f"{_format_bytes(limits[s])}")
        reach = nxt
    covered = int(np.flatnonzero(reach).max())
    return (f"the memory limits let the {S} stages cover at most {covered} of {L} layers "
            f"(total limit {_format_bytes(sum(limits))})")


# ---------------------------------------------------------------------------------------
# Exact DP and brute force
# ---------------------------------------------------------------------------------------

def _check_counts(problem: PartitionProblem) -> None:
    L, S, k = problem.num_layers, problem.num_stages, problem.min_layers_per_stage
    if S * k > L:
        raise InfeasiblePartition(f"{L} layers cannot give {S} stages at least {k} "
                                  f"layer{'s' if k != 1 else ''} each")


def _stage_tables(problem: PartitionProblem) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per stage: time[a, b] (inf where b - a < min layers) and fits[a, b] (bool)."""
    L, S, k = problem.num_layers, problem.num_stages, problem.min_layers_per_stage
    time_sum = _segment_table(problem.layer_time_s, L)
    a_idx, b_idx = np.indices((L + 1, L + 1))
    allowed = (b_idx - a_idx) >= k
    memory_limited = problem.stage_memory_limit_bytes is not None
    if memory_limited:
        state_sum = _segment_table(problem.layer_state_bytes, L)
        act_sum = _segment_table(problem.layer_activation_bytes, L)
    times, fits = [], []
    for s in range(S):
        fit = allowed.copy()
        if memory_limited:
            total = _bytes_from_sums(problem, s, state_sum, act_sum)
            fit &= total <= float(problem.stage_memory_limit_bytes[s])
        times.append(np.where(allowed, _time_from_sum(problem, s, time_sum), np.inf))
        fits.append(fit)
    return times, fits


def _suffix_best(times: list[np.ndarray], fits: list[np.ndarray], num_layers: int) -> np.ndarray:
    """``best[s, a]``: min bottleneck of stages s.. covering layers a.. (inf if impossible)."""
    S, L = len(times), num_layers
    best = np.full((S + 1, L + 1), np.inf)
    best[S, L] = 0.0
    for s in range(S - 1, -1, -1):
        cand = np.maximum(times[s], best[s + 1][None, :])
        cand = np.where(fits[s], cand, np.inf)
        best[s] = cand.min(axis=1)
    return best


def partition_layers(problem: PartitionProblem) -> Partition:
    """Exact min-max partition with the lexicographic tie-break (module docstring)."""
    _check_counts(problem)
    L, S = problem.num_layers, problem.num_stages
    times, fits = _stage_tables(problem)
    best = _suffix_best(times, fits, L)
    optimum = float(best[0, 0])
    if not math.isfinite(optimum):
        raise InfeasiblePartition(_diagnose(problem, fits))
    threshold = optimum * (1.0 + TIE_RELATIVE)
    counts: list[int] = []
    a = 0
    for s in range(S):
        for b in range(a, L + 1):
            if fits[s][a, b] and times[s][a, b] <= threshold and best[s + 1][b] <= threshold:
                counts.append(b - a)
                a = b
                break
        else:  # unreachable: best[s][a] <= threshold guarantees a choice
            raise AssertionError("reconstruction failed")
    return evaluate(problem, counts)


def compositions(total: int, parts: int, minimum: int):
    """All tuples of ``parts`` integers >= ``minimum`` summing to ``total``, lexicographic."""
    spare = total - parts * minimum
    if spare < 0:
        return
    for cuts in itertools.combinations(range(spare + parts - 1), parts - 1):
        edges = (-1,) + cuts + (spare + parts - 1,)
        yield tuple(edges[i + 1] - edges[i] - 1 + minimum for i in range(parts))


def brute_force_partition(problem: PartitionProblem) -> Partition:
    """Enumerate every composition (small L only); same optimum and tie-break as the DP."""
    _check_counts(problem)
    L, S, k = problem.num_layers, problem.num_stages, problem.min_layers_per_stage
    if math.comb(L - S * k + S - 1, S - 1) > BRUTE_FORCE_MAX_PARTITIONS:
        raise ValueError(f"too many partitions of {L} layers into {S} stages for brute force")
    feasible = [evaluate(problem, c) for c in compositions(L, S, k) if is_feasible(problem, c)]
    if not feasible:
        _, fits = _stage_tables(problem)
        raise InfeasiblePartition(_diagnose(problem, fits))
    optimum = min(p.bottleneck_s for p in feasible)
    threshold = optimum * (1.0 + TIE_RELATIVE)
    return min((p for p in feasible if p.bottleneck_s <= threshold),
               key=lambda p: p.layers_per_stage)
