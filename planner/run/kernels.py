"""Runtime kernels: the solver code a running job executes inside its training step.

This is the ONE module of :mod:`planner.run` that may import :mod:`solvers`; everything else
here reads Plans (or plain data) and never plans. A "kernel" is a solver that is part of the
job's own arithmetic rather than a planning decision:

* :func:`expert_quotas`: the real-time token quotas of expert parallelism. The plan fixes the
  expert placement (which GPU holds which replicas); how many of each expert's tokens each
  replica serves depends on the micro-batch's router output, so every EP rank solves it on
  every micro-batch of every MoE layer, from the all-gathered counts, and must get the same
  answer as every other rank (it is deterministic) and as the planner's quota mode
  (:func:`solvers.experts.quota.solve_quotas`, the very function, so the two cannot drift).
"""
from __future__ import annotations

import numpy as np

from solvers.experts.quota import solve_quotas

__all__ = ["expert_quotas"]


def expert_quotas(loads: np.ndarray, phy2log: np.ndarray, slots_per_gpu: int,
                  num_gpus: int) -> np.ndarray:
    """Integer tokens per physical slot ``[P]`` (int64) for one MoE layer and micro-batch.

    ``loads``: ``[E]`` tokens per logical expert (the EP group's total); ``phy2log``: ``[P]``
    logical expert of each slot, slot ``p`` on GPU ``p // slots_per_gpu`` of ``num_gpus``.
    Each expert's quotas sum to its load; the busiest GPU's total is the least possible.
    """
    gpu_of_slot = np.arange(phy2log.shape[0]) // slots_per_gpu
    solution = solve_quotas(np.asarray(loads, dtype=np.float64), phy2log, gpu_of_slot, num_gpus)
    return np.rint(solution.quota).astype(np.int64)
