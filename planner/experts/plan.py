"""Expert placement: loads -> ``solvers.experts`` -> a validated placement document.

``plan_experts`` plans every MoE layer of a loads file for one expert-parallel group *under the
dispatch rule the runtime applies* (``ExpertOptions.dispatch``, :mod:`solvers.experts.dispatch`):
``even`` (vLLM; SGLang ``--ep-dispatch-algorithm dynamic``) and ``sglang`` (SGLang's static
per-rank dispatch) are planned by :func:`solvers.experts.plan_even`, which never returns worse
than the EPLB-style baseline's placement under the same rule; ``static`` (planned split ratios)
and ``realtime`` (quotas re-planned every step, :func:`realtime_quotas`) by
:func:`solvers.experts.plan_layer`. Every layer is measured under that same rule before (the
current placement, or one replica per expert with no redundancy), for the EPLB-style baseline
(``solvers.experts.eplb_baseline``; with ``groups > 1`` hierarchical when the groups divide over
the nodes, as EPLB itself chooses, else global; under ``static`` it keeps EPLB's even split)
and after. The document
(``placement_document``) is what ``planner experts plan --out`` writes and what a Plan's
``experts`` section holds; ``sglang_location`` and ``vllm_eplb_config`` export it.

Runtimes call :func:`realtime_quotas` (a thin wrapper over
:func:`solvers.experts.quota.solve_quotas`) every step with the exact per-expert loads of a
micro-batch to split each expert's tokens over its replicas.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from planner.errors import InfeasibleError, SpecError
from planner.inputs.expert_loads import ExpertLoads
from solvers.experts import (DISPATCH_MODES, ExpertLayout, LayerPlacement, QuotaSolution, cross_node_tokens,
                             dispatch_split, drift_scenarios, even_split, lp_lower_bound, plan_even, plan_layer,
                             rebalance_experts, relabel_to_current, solve_quotas, static_gpu_loads)

__all__ = ["SCHEMA", "ExpertOptions", "ExpertPlacement", "LayerReport", "current_from_document",
           "logical_to_physical", "placement_document", "plan_experts", "realtime_quotas", "sglang_location",
           "trivial_placement", "vllm_eplb_config", "with_expert_placement"]

SCHEMA = "planner.expert-placement/v1"
# How cross-node tokens are counted (cross_node_fraction_*; solvers.experts.cross_node_tokens).
LOCALITY_MODEL = ("tokens of every expert originate evenly on every node (data-parallel attention, "
                  "no co-routing statistics); a (token, expert) pair stays on its node while the "
                  "node's replicas have quota left; pairs are counted once per expert, not "
                  "deduplicated per destination node")


@dataclass(frozen=True)
class ExpertOptions:
    """What to plan: the EP group's shape and the objective's secondary terms."""

    num_gpus: int
    gpus_per_node: int
    slots_per_gpu: int
    robust: bool = False
    dispatch: str = "even"  # how the runtime splits tokens: one of solvers.experts.DISPATCH_MODES
    drift_sigma: float = 0.15
    scenarios: int = 16
    robust_quotas: str = "realtime"
    locality_slack: float | None = None
    migration_weight: float = 0.0
    expert_bytes: float = 0.0
    migration_gbps: float = 400.0
    groups: int = 1  # expert groups of the baseline's hierarchical mode (DeepSeek-V3: 8)

    def __post_init__(self) -> None:
        if self.dispatch not in DISPATCH_MODES:
            raise ValueError(f"dispatch must be one of {DISPATCH_MODES}, got {self.dispatch!r}")

    def layout(self, num_experts: int) -> ExpertLayout:
        try:
            return ExpertLayout(num_experts, self.num_gpus, self.slots_per_gpu,
                                min(self.gpus_per_node, self.num_gpus))
        except ValueError as err:
            raise InfeasibleError(f"expert placement: {err} (raise --slots-per-gpu or "
                                  "--gpus)") from None


@dataclass(frozen=True)
class LayerReport:
    """Busiest/mean of one layer before, for the EPLB-style baseline, and after planning."""

    layer: int
    before: float
    eplb: float
    after: float
    lower_bound: float
    cross_node_after: float
    cross_node_eplb: float
    moved: int


@dataclass(frozen=True)
class ExpertPlacement:
    """A planned placement: ``phy2log`` and ``split`` are ``[moe layers, G*S]``."""

    options: ExpertOptions
    layout: ExpertLayout
    num_layers: int
    moe_layers: tuple[int, ...]
    phy2log: np.ndarray
    split: np.ndarray
    reports: tuple[LayerReport, ...]
    before_gpu_load: np.ndarray
    after_gpu_load: np.ndarray
    source: str
    elapsed_s: float

    @property
    def locality_model(self) -> str:
        """How the cross-node figures count tokens (:data:`LOCALITY_MODEL`)."""
        return LOCALITY_MODEL


def trivial_placement(layout: ExpertLayout) -> np.ndarray:
    """SGLang's "trivial" location: physical slot ``p`` holds logical expert ``p % E``."""
    return np.arange(layout.num_slots) % layout.num_experts


def plan_experts(loads: ExpertLoads, options: ExpertOptions, current: np.ndarray | None = None,
                 progress: Callable[[], None] | None = None,
                 current_source: str = "--current") -> ExpertPlacement:
    """Plan every MoE layer of ``loads`` (see the module docstring)."""
    layout = options.layout(loads.num_experts)
    layers = loads.moe_layers
    total = loads.total
    if current is not None:
        _check_current(current, layout, layers, total.shape[0], current_source)
    start = time.perf_counter()
    eplb = _eplb(total[list(layers)], layout, options.groups)
    hierarchical = _eplb_groups(layout, options.groups) > 1  # else EPLB picks its global policy
    starts = np.stack([eplb, _eplb(total[list(layers)], layout, 1)], 1) if hierarchical else eplb
    planned = []
    for i, layer in enumerate(layers):
        seeds = (starts[i],) if starts.ndim == 2 else tuple(starts[i])
        planned.append(_plan_one(loads, layer, layout, options, current, seeds))
        if progress is not None:
            progress()
    elapsed = time.perf_counter() - start
    phy2log = np.stack([p.phy2log for p, _ in planned])
    split = np.stack([p.split for p, _ in planned])
    before = np.stack([_before(total[layer], layout, current, layer, options.dispatch) for layer in layers])
    after = np.stack([static_gpu_loads(total[layer], phy2log[i], split[i], layout.num_gpus)
                      for i, layer in enumerate(layers)])
    reports = tuple(_report(total[layer], layer, layout, before[i], after[i], eplb[i], planned[i],
                            options.dispatch) for i, layer in enumerate(layers))
    return ExpertPlacement(options, layout, total.shape[0], layers, phy2log, split, reports,
                           before, after, loads.source, elapsed)


def _check_current(current: np.ndarray, layout: ExpertLayout, layers, num_layers: int,
                   source: str) -> None:
    if current.shape != (num_layers, layout.num_slots):
        raise SpecError(source, "physical_to_logical_map",
                        f"{num_layers} layers x {layout.num_slots} slots, this run's shape (the "
                        f"loads' layers; --gpus {layout.num_gpus} x {layout.slots_per_gpu} slots "
                        "per GPU)", f"shape {list(current.shape)}")
    if current.max() >= layout.num_experts:
        raise SpecError(source, "physical_to_logical_map",
                        f"expert ids 0..{layout.num_experts - 1}", int(current.max()))
    for layer in layers:
        missing = np.setdiff1d(np.arange(layout.num_experts), current[layer])
        if missing.size:
            raise SpecError(source, f"physical_to_logical_map[{layer}]",
                            "a replica of every expert", f"no replica of {missing[:5].tolist()}")


def _engine_split(w: np.ndarray, phy: np.ndarray, layout: ExpertLayout, dispatch: str) -> np.ndarray:
    """The split a placement gets at run time: the dispatch rule's, EPLB's even split under
    ``static`` (a placement not planned with ratios), the exact quotas under ``realtime``."""
    if dispatch == "static":
        return even_split(phy, layout.num_experts)
    return dispatch_split(phy, layout, dispatch, loads=w)


def _ratio_of(w: np.ndarray, phy: np.ndarray, split: np.ndarray, layout: ExpertLayout) -> float:
    mean = w.sum() / layout.num_gpus
    return float(static_gpu_loads(w, phy, split, layout.num_gpus).max() / mean) if mean > 0 else 1.0


def _plan_one(loads: ExpertLoads, layer: int, layout: ExpertLayout, options: ExpertOptions,
              current: np.ndarray | None, starts: tuple[np.ndarray, ...]) -> tuple[LayerPlacement, int]:
    w = loads.total[layer]
    scen = w[None]
    if options.robust:
        series = loads.series[:, layer]
        scen = series if series.shape[0] > 1 else drift_scenarios(w, options.drift_sigma,
                                                                   options.scenarios, seed=layer)
    if options.dispatch in ("even", "sglang"):
        phy, score = plan_even(scen, layout, dispatch=options.dispatch, starts=starts, nominal=w)
        mean = max(w.sum() / layout.num_gpus, 1e-300)
        bound = lp_lower_bound(w, layout) / mean if w.sum() > 0 else 1.0
        placed = LayerPlacement(phy, dispatch_split(phy, layout, options.dispatch), score, min(bound, score))
    elif options.robust:
        placed = plan_layer(scen, layout, robust_quotas=options.robust_quotas, nominal=w)
    else:
        placed = plan_layer(scen, layout, locality_slack=options.locality_slack)
    if current is None:
        return placed, 0
    return _with_migration(w, layout, options, placed, current[layer])


def _with_migration(w, layout: ExpertLayout, options: ExpertOptions, placed: LayerPlacement,
                    current: np.ndarray) -> tuple[LayerPlacement, int]:
    """Relabel GPUs to keep current replicas; keep the current placement (its run-time split
    only) when the gain is below ``migration_weight`` per fraction of slots moved. Under
    ``sglang`` dispatch GPU labels change the split, so the relabelled placement is scored
    again and kept only when no worse."""
    relabelled, moved = relabel_to_current(placed.phy2log, current, layout.num_gpus)
    if options.dispatch in ("even", "sglang"):
        split = dispatch_split(relabelled, layout, options.dispatch)
        planned_ratio = _ratio_of(w, placed.phy2log, placed.split, layout)
        if _ratio_of(w, relabelled, split, layout) > planned_ratio * (1 + 1e-12):
            relabelled, split = placed.phy2log, placed.split  # SGLang: the labels were part of the plan
            moved = int(np.sum(relabelled != current))
    else:
        split = _relabel_split(placed, relabelled, layout)
    ratio = placed.ratio
    # Kept as it is, the current placement gets fresh quotas under the planner's own runtime.
    keep_rule = "realtime" if options.dispatch in ("static", "realtime") else options.dispatch
    keep_split = dispatch_split(current, layout, keep_rule, loads=w)
    keep_ratio = _ratio_of(w, current, keep_split, layout)
    if keep_ratio <= ratio + options.migration_weight * moved / layout.num_slots:
        return LayerPlacement(current.copy(), keep_split, keep_ratio, placed.lower_bound_ratio), 0
    return LayerPlacement(relabelled, split, ratio, placed.lower_bound_ratio), moved


def _relabel_split(placed: LayerPlacement, relabelled: np.ndarray, layout: ExpertLayout) -> np.ndarray:
    """Carry the split fractions over to the relabelled slots (same expert on the same GPU
    content, so match each new GPU to its old one by the multiset of experts)."""
    S = layout.slots_per_gpu
    old = {tuple(sorted(placed.phy2log[g * S:(g + 1) * S])): g for g in range(layout.num_gpus)}
    split = np.empty_like(placed.split)
    for g in range(layout.num_gpus):
        experts = relabelled[g * S:(g + 1) * S]
        src = old.pop(tuple(sorted(experts)))
        src_experts = list(placed.phy2log[src * S:(src + 1) * S])
        for i, e in enumerate(experts):
            j = src_experts.index(e)
            split[g * S + i] = placed.split[src * S + j]
            src_experts[j] = -1
    return split


def _before(w, layout: ExpertLayout, current: np.ndarray | None, layer: int, dispatch: str) -> np.ndarray:
    phy = trivial_placement(layout) if current is None else current[layer]
    return static_gpu_loads(w, phy, _engine_split(w, phy, layout, dispatch), layout.num_gpus)


def _eplb_groups(layout: ExpertLayout, groups: int) -> int:
    """The expert groups EPLB's hierarchical policy would use, or 1 when it picks the global
    policy (the groups must divide the experts and spread evenly over the nodes)."""
    nodes = max(1, layout.num_gpus // layout.gpus_per_node)
    return groups if layout.num_experts % groups == 0 and groups % nodes == 0 else 1


def _eplb(total: np.ndarray, layout: ExpertLayout, groups: int) -> np.ndarray:
    nodes = max(1, layout.num_gpus // layout.gpus_per_node)
    groups = _eplb_groups(layout, groups)
    result = rebalance_experts(total, layout.num_slots, groups, nodes if groups > 1 else 1, layout.num_gpus)
    return result.phy2log


def _report(w, layer: int, layout: ExpertLayout, before: np.ndarray, after: np.ndarray,
            eplb_phy: np.ndarray, planned: tuple[LayerPlacement, int], dispatch: str) -> LayerReport:
    placed, moved = planned
    mean = w.sum() / layout.num_gpus
    eplb_split = _engine_split(w, eplb_phy, layout, dispatch)
    eplb_load = static_gpu_loads(w, eplb_phy, eplb_split, layout.num_gpus)
    node_of_slot = layout.node_of_gpu[layout.gpu_of_slot]
    nodes = int(layout.node_of_gpu.max()) + 1

    def cross(phy, split) -> float:
        return cross_node_tokens(w, phy, w[phy] * split, node_of_slot, nodes) / max(w.sum(), 1e-300)

    return LayerReport(layer, float(before.max() / mean), float(eplb_load.max() / mean),
                       float(after.max() / mean), placed.lower_bound_ratio,
                       cross(placed.phy2log, placed.split), cross(eplb_phy, eplb_split), moved)


def realtime_quotas(layer_loads: np.ndarray, phy2log: np.ndarray, layout: ExpertLayout) -> QuotaSolution:
    """Tokens per physical slot for one micro-batch's exact loads (min busiest GPU)."""
    return solve_quotas(layer_loads, phy2log, layout.gpu_of_slot, layout.num_gpus)


# ----------------------------------------------------------------------------------------
# Documents and exports
# ----------------------------------------------------------------------------------------


def logical_to_physical(phy2log: np.ndarray, num_experts: int) -> list[list[int]]:
    """Physical slots of each logical expert, ascending."""
    out: list[list[int]] = [[] for _ in range(num_experts)]
    for p, e in enumerate(phy2log.tolist()):
        out[e].append(p)
    return out


SPLIT_DIGITS = 9  # decimals of a split fraction in placement files


def rounded_split(split: np.ndarray, phy2log: np.ndarray, digits: int = SPLIT_DIGITS
                  ) -> list[float]:
    """One layer's per-slot split fractions rounded to ``digits`` decimals so that each
    expert's fractions still add up to what they did (1), to the last decimal: largest
    remainder rounding per expert, as rounding each fraction alone errs by up to half a unit per
    replica (3,400 replicas of one expert missed 1 by 1.7e-6)."""
    units = 10 ** digits
    scaled = np.asarray(split, dtype=float) * units
    experts = np.asarray(phy2log, dtype=np.int64)
    base = np.floor(scaled)
    count = int(experts.max()) + 1 if experts.size else 0
    short = (np.rint(np.bincount(experts, scaled, count))
             - np.bincount(experts, base, count)).astype(np.int64)
    order = np.lexsort((-(scaled - base), experts))  # per expert, largest remainder first
    first = np.searchsorted(experts[order], experts[order])
    bump = np.zeros(len(base))
    bump[order] = (np.arange(len(order)) - first) < short[experts[order]]
    return ((base + bump) / units).tolist()


def placement_document(result: ExpertPlacement) -> dict[str, Any]:
    """The JSON object of a placement (schema ``planner.expert-placement/v1``)."""
    lay = result.layout
    reports = [r.__dict__ for r in result.reports]
    mean = lambda key: float(np.mean([getattr(r, key) for r in result.reports]))  # noqa: E731
    return {
        "schema": SCHEMA,
        "source": result.source,
        "num_experts": lay.num_experts,
        "num_gpus": lay.num_gpus,
        "gpus_per_node": lay.gpus_per_node,
        "slots_per_gpu": lay.slots_per_gpu,
        "num_layers": result.num_layers,
        "moe_layers": list(result.moe_layers),
        "mode": "robust" if result.options.robust else "nominal",
        "dispatch": result.options.dispatch,
        "locality_model": LOCALITY_MODEL,
        "physical_to_logical": result.phy2log.tolist(),
        "logical_to_physical": [logical_to_physical(p, lay.num_experts) for p in result.phy2log],
        "replica_counts": [np.bincount(p, minlength=lay.num_experts).tolist() for p in result.phy2log],
        "split": [rounded_split(s, p) for s, p in zip(result.split, result.phy2log)],
        "summary": {
            "mean_ratio_before": mean("before"), "mean_ratio_eplb": mean("eplb"),
            "mean_ratio_after": mean("after"), "mean_lower_bound": mean("lower_bound"),
            "cross_node_fraction_after": mean("cross_node_after"),
            "cross_node_fraction_eplb": mean("cross_node_eplb"),
            "replicas_moved": int(sum(r.moved for r in result.reports)),
            "bytes_moved": float(sum(r.moved for r in result.reports) * result.options.expert_bytes),
        },
        "layers": reports,
    }


def sglang_location(doc: dict[str, Any]) -> dict[str, Any]:
    """SGLang ``--init-expert-location`` file: ``physical_to_logical_map`` for *every* hidden
    layer (dense layers get the trivial map). SGLang derives the other maps itself and rejects
    extra keys (``ExpertLocationMetadata.init_by_mapping``)."""
    slots = doc["num_gpus"] * doc["slots_per_gpu"]
    trivial = [p % doc["num_experts"] for p in range(slots)]
    by_layer = dict(zip(doc["moe_layers"], doc["physical_to_logical"]))
    return {"physical_to_logical_map": [by_layer.get(i, trivial) for i in range(doc["num_layers"])]}


def vllm_eplb_config(doc: dict[str, Any]) -> dict[str, Any]:
    """vLLM ``--eplb-config`` (``EPLBConfig``): redundancy and balancedness logging. Upstream
    vLLM takes no explicit initial placement; the map stays in the placement file."""
    redundant = doc["num_gpus"] * doc["slots_per_gpu"] - doc["num_experts"]
    return {"num_redundant_experts": redundant, "window_size": 1000, "step_interval": 3000,
            "log_balancedness": True}


def current_from_document(data: Any, source: str) -> np.ndarray:
    """A current placement ``[layers, slots]`` from our document or SGLang's mapping file."""
    if isinstance(data, dict) and "physical_to_logical_map" in data:
        return _int_array(data["physical_to_logical_map"], source, "physical_to_logical_map")
    if isinstance(data, dict) and data.get("schema") == SCHEMA:
        rows = _int_array(data["physical_to_logical"], source, "physical_to_logical")
        slots = data["num_gpus"] * data["slots_per_gpu"]
        full = np.tile(np.arange(slots) % data["num_experts"], (data["num_layers"], 1))
        full[data["moe_layers"]] = rows
        return full
    raise SpecError(source, "", f"a placement file ({SCHEMA}) or SGLang's "
                    "{\"physical_to_logical_map\": [layers][slots]}")


def _int_array(rows: Any, source: str, field: str) -> np.ndarray:
    try:
        arr = np.array(rows, dtype=np.int64)
    except (ValueError, TypeError):
        raise SpecError(source, field, "a rectangular array of integers") from None
    if arr.ndim != 2 or np.any(arr < 0):
        raise SpecError(source, field, "[layers][slots] of non-negative expert ids")
    return arr


def with_expert_placement(plan, loads: ExpertLoads, redundant_per_gpu: int = 1,
                          cache: dict | None = None):
    """``plan`` with an ``experts`` section for its pool's EP group (MoE plans, ``ep > 1``).

    The loads' MoE layers map in order onto the model's MoE layers; the EP group is ``ep``
    GPUs with ``experts / ep + redundant_per_gpu`` slots each, planned for real-time quotas
    (what planner's runtime applies). Plans without expert
    parallelism come back unchanged. ``cache`` shares placements between plans of one EP size.
    """
    from dataclasses import replace

    model, ep = plan.model_spec(), plan.pool().degrees["ep"]
    if model.moe is None:
        raise SpecError(loads.source, "", f"an MoE model for --expert-loads ({model.name} is dense)")
    if loads.num_experts != model.moe.num_experts:
        raise SpecError(loads.source, "experts", f"{model.moe.num_experts} experts per layer "
                        f"for {model.name}", loads.num_experts)
    if len(loads.moe_layers) != sum(model.moe_layers):
        raise SpecError(loads.source, "layers", f"{sum(model.moe_layers)} MoE layers with "
                        f"non-zero loads for {model.name}", len(loads.moe_layers))
    if ep <= 1:
        return plan
    cache = {} if cache is None else cache
    if ep not in cache:
        gpn = min(ep, min(g.gpus_per_node for g in plan.cluster().node_groups))
        # planner's runtime re-plans real-time quotas every step (planner/run/kernels.py).
        options = ExpertOptions(ep, gpn, model.moe.num_experts // ep + redundant_per_gpu,
                                dispatch="realtime")
        doc = placement_document(plan_experts(loads, options))
        doc["ep_size"] = ep
        cache[ep] = doc
    return replace(plan, experts=cache[ep])
