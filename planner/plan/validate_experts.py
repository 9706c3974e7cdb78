"""Checks of expert placements: a placement document on its own (``planner experts``) and as
the ``experts`` section of a plan (it must match the model and the pool's EP group)."""
from __future__ import annotations

from typing import Any

import numpy as np

from planner.errors import InvalidPlanError
from solvers.experts import DISPATCH_MODES, ExpertLayout, dispatch_split

# Split fractions are written rounded to 9 decimals (planner.experts.plan.placement_document) and
# normalised per expert before that (solvers.experts.scoring.split_from_quota), so an expert's
# fractions sum to 1 within a few 1e-9; 1e-6 leaves room for files written by other tools.
_SPLIT_TOL = 1e-6


def plan_expert_problems(doc: dict[str, Any], model, d) -> list[str]:
    """The ``experts`` section against the model and the pool's degrees ``d``."""
    if model.moe is None:
        return ["experts section given for a dense model"]
    problems = expert_placement_problems(doc)
    if doc.get("num_experts") != model.moe.num_experts:
        problems.append(f"experts section has {doc.get('num_experts')} experts, the model "
                        f"{model.moe.num_experts}")
    if doc.get("num_gpus") != d.ep or doc.get("ep_size") != d.ep:
        problems.append(f"experts section spans {doc.get('num_gpus')} GPUs, the EP group {d.ep}")
    if len(doc.get("moe_layers", [])) != sum(model.moe_layers):
        problems.append(f"experts section covers {len(doc.get('moe_layers', []))} MoE layers, "
                        f"the model has {sum(model.moe_layers)}")
    return problems


def expert_placement_problems(doc: dict[str, Any]) -> list[str]:
    """Every broken invariant of an expert-placement document (``planner.experts.plan``).

    Each MoE layer fills every slot of every GPU with a valid expert, every expert has at
    least one replica, split fractions are non-negative and sum to 1 per expert (and are the
    dispatch rule's own under ``even`` or ``sglang`` dispatch), and the
    derived maps (``logical_to_physical``, ``replica_counts``) agree with
    ``physical_to_logical``.
    """
    try:
        E, G, S = int(doc["num_experts"]), int(doc["num_gpus"]), int(doc["slots_per_gpu"])
        phy = np.array(doc["physical_to_logical"], dtype=np.int64)
        split = np.array(doc["split"], dtype=np.float64)
        layers = list(doc["moe_layers"])
    except KeyError as err:
        hint = (" (this is SGLang's map: evaluate a placement written by 'planner experts "
                "plan --out'; 'planner experts plan --current' reads SGLang's)"
                if isinstance(doc, dict) and "physical_to_logical_map" in doc else "")
        return [f"expert placement: the field {err.args[0]!r} is missing{hint}"]
    except (TypeError, ValueError) as err:
        return [f"expert placement unreadable ({err})"]
    if phy.ndim != 2 or phy.shape != (len(layers), G * S) or split.shape != phy.shape:
        return [f"expert placement: expected {len(layers)} layers x {G}*{S} slots, got "
                f"physical_to_logical {list(phy.shape)} and split {list(split.shape)}"]
    dispatch = doc.get("dispatch", "static")  # documents before dispatch modes: static ratios
    if dispatch not in DISPATCH_MODES:
        return [f"expert placement: dispatch must be one of {', '.join(DISPATCH_MODES)}, got {dispatch!r}"]
    layout = ExpertLayout(E, G, S, max(1, min(int(doc.get("gpus_per_node", G)), G)))
    problems: list[str] = []
    if np.any((phy < 0) | (phy >= E)):
        problems.append(f"expert placement: expert ids outside 0..{E - 1}")
        return problems
    for i, layer in enumerate(layers):
        counts = np.bincount(phy[i], minlength=E)
        if np.any(counts == 0):
            problems.append(f"layer {layer}: experts {np.flatnonzero(counts == 0)[:5].tolist()} "
                            "have no replica")
        sums = np.bincount(phy[i], weights=split[i], minlength=E)
        if np.any(split[i] < -_SPLIT_TOL) or np.any(np.abs(sums[counts > 0] - 1) > _SPLIT_TOL):
            problems.append(f"layer {layer}: split fractions must be >= 0 and sum to 1 per expert")
        if dispatch in ("even", "sglang") and not problems:
            rule = dispatch_split(phy[i], layout, dispatch)
            if np.max(np.abs(rule - split[i])) > _SPLIT_TOL:
                problems.append(f"layer {layer}: split is not what {dispatch} dispatch gives this "
                                "placement (an engine cannot apply other ratios)")
        if doc.get("replica_counts") is not None and list(doc["replica_counts"][i]) != counts.tolist():
            problems.append(f"layer {layer}: replica_counts disagree with physical_to_logical")
        l2p = doc.get("logical_to_physical")
        if l2p is not None and any(sorted(l2p[i][e]) != np.flatnonzero(phy[i] == e).tolist()
                                   for e in range(E)):
            problems.append(f"layer {layer}: logical_to_physical disagrees with physical_to_logical")
    return problems


def validate_expert_placement(doc: dict[str, Any], source: str = "expert placement") -> dict[str, Any]:
    """Return ``doc`` if valid, else raise :class:`InvalidPlanError` listing why."""
    problems = expert_placement_problems(doc)
    if problems:
        raise InvalidPlanError(source, problems, "expert placement file")
    return doc
