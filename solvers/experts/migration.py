"""Migration between placements: relabel a new placement's GPUs so as many replicas as possible
stay where the current placement has them (GPUs are interchangeable for balance, not for the
bytes a re-plan moves).
"""

from __future__ import annotations

import numpy as np

__all__ = ["relabel_to_current"]


def relabel_to_current(new_phy2log: np.ndarray, current_phy2log: np.ndarray, num_gpus: int) -> tuple[np.ndarray, int]:
    """Permute the GPUs of a new placement to keep as many current replicas as possible.

    GPUs are interchangeable for balance, so the new plan's GPU ``i`` may become any physical
    GPU ``j``: a max-weight assignment (OR-Tools ``SimpleLinearSumAssignment``) on the number
    of replicas GPU ``i`` would keep from GPU ``j``. Slots of a GPU keep their current
    position where the expert stays. Returns the relabelled ``phy2log`` and the number of
    replicas that must be copied in (the migration).
    """
    from ortools.graph.python import linear_sum_assignment

    S = new_phy2log.shape[0] // num_gpus
    new, cur = new_phy2log.reshape(num_gpus, S), np.asarray(current_phy2log).reshape(num_gpus, S)
    num_experts = int(max(new.max(), cur.max())) + 1
    new_count = np.stack([np.bincount(r, minlength=num_experts) for r in new])
    cur_count = np.stack([np.bincount(r, minlength=num_experts) for r in cur])
    overlap = np.minimum(new_count[:, None, :], cur_count[None, :, :]).sum(2)
    solver = linear_sum_assignment.SimpleLinearSumAssignment()
    left, right = np.meshgrid(np.arange(num_gpus), np.arange(num_gpus), indexing="ij")
    solver.add_arcs_with_cost(left.ravel().astype(np.int32), right.ravel().astype(np.int32), (-overlap).ravel().astype(np.int64))
    if solver.solve() != solver.OPTIMAL:
        raise RuntimeError("GPU relabelling assignment failed")
    out = np.empty_like(cur)
    for i in range(num_gpus):
        j = solver.right_mate(i)
        out[j] = _keep_slots(list(new[i]), list(cur[j]))
    moved = int(num_gpus * S - overlap[np.arange(num_gpus), [solver.right_mate(i) for i in range(num_gpus)]].sum())
    return out.ravel(), moved


def _keep_slots(new_experts: list[int], current: list[int]) -> list[int]:
    """Order ``new_experts`` so experts already in ``current`` keep their slot index."""
    remaining = list(new_experts)
    out: list[int | None] = [None] * len(current)
    for i, e in enumerate(current):
        if e in remaining:
            out[i] = e
            remaining.remove(e)
    fill = iter(sorted(remaining))
    return [e if e is not None else next(fill) for e in out]
