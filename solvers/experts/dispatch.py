"""How a runtime splits an expert's tokens over its replicas: the dispatch rules a placement is
planned and measured under.

A placement (``phy2log [G*S]``) fixes where replicas sit; the *dispatch rule* fixes what share of
expert ``e``'s tokens each replica serves. Four rules:

* ``even``: every replica serves ``1 / c_e`` of its expert (``c_e`` replicas). vLLM's EPLB maps
  each (token, top-k slot) to replica ``position mod c_e`` (``eplb_map_to_physical_and_record``
  in ``vllm/model_executor/layers/fused_moe``: "select a pseudo-random replica for each logical
  expert"), SGLang's ``--ep-dispatch-algorithm dynamic`` picks a random replica per token, and
  DeepSeek's EPLB assumes the same when it packs (README "Algorithm"): to first order the split
  is even.
* ``sglang``: SGLang's static dispatch (``--ep-dispatch-algorithm static``;
  ``compute_logical_to_rank_dispatch_physical_map`` and ``_find_nearest_expert`` in
  ``python/sglang/srt/eplb/expert_location.py``). Each sending rank ``r`` sends *all* its tokens
  for expert ``e`` to one replica: the only one if ``c_e = 1``; else the first (lowest physical
  id) replica on its own GPU; else the first on its own node; else a "fair choice" - the ranks
  left over are dealt the candidate replicas round-robin (``k // c_e`` each) and the remainder at
  random (seeded). :func:`sglang_split` takes the expectation of that remainder
  (``k mod c_e`` ranks spread evenly), so it is exact in the round-robin part.
* ``static``: split ratios chosen by the planner (the exact min-max quotas of the planning loads);
  only a runtime that reads ratios can apply them (planner's executor).
* ``realtime``: quotas re-planned for every micro-batch's exact loads
  (:func:`solvers.experts.quota.solve_quotas`; ``planner.experts.realtime_quotas``).

Token-origin model for ``sglang`` (ours; an engine routes by rank, a trace counts per expert):
every rank originates the same share ``1 / G`` of each expert's tokens, as with data-parallel
attention over the EP group and evenly spread requests. With replicas of an expert on distinct
nodes the rule is then exactly the even split; two replicas on one node give the first (lowest
physical id) the node-mates' share.
"""

from __future__ import annotations

import numpy as np

from solvers.experts.layout import ExpertLayout
from solvers.experts.quota import solve_quotas
from solvers.experts.scoring import even_split, split_from_quota

__all__ = ["DISPATCH_MODES", "dispatch_gpu_loads", "dispatch_split", "sglang_split"]

DISPATCH_MODES = ("even", "sglang", "static", "realtime")


def sglang_split(phy2log: np.ndarray, layout: ExpertLayout) -> np.ndarray:
    """Expected share ``[P]`` of its expert's tokens that each slot serves under SGLang's static
    dispatch (module docstring), with every rank originating ``1 / G`` of every expert."""
    phy2log = np.asarray(phy2log, dtype=np.int64)
    G, S, E, n = layout.num_gpus, layout.slots_per_gpu, layout.num_experts, layout.gpus_per_node
    P = phy2log.shape[0]
    slot = np.arange(P)
    gpu = slot // S
    node = slot // (S * n)  # SGLang: physical id // (slots per GPU x GPUs per node)
    nodes = -(-G // n)
    ranks_on_node = np.bincount(np.arange(G) // n, minlength=nodes)
    counts = np.bincount(phy2log, minlength=E)
    # First slot of each (expert, GPU) and of each (expert, node): slots are in ascending id.
    first_gpu = _first_of(phy2log * G + gpu)
    first_node = _first_of(phy2log * nodes + node)
    gpus_of = np.zeros((E, nodes), dtype=np.int64)  # distinct GPUs holding e on each node
    np.add.at(gpus_of, (phy2log[first_gpu], node[first_gpu]), 1)
    share = first_gpu.astype(np.float64)  # its own GPU's rank
    node_mates = ranks_on_node[node] - gpus_of[phy2log, node]
    share += np.where(first_node, node_mates, 0)
    covered = (gpus_of > 0) @ ranks_on_node  # ranks on nodes holding e
    share += (G - covered[phy2log]) / counts[phy2log]
    share = np.where(counts[phy2log] == 1, G, share)
    return share / G


def _first_of(keys: np.ndarray) -> np.ndarray:
    """Mask of the first occurrence of each key (in slot order)."""
    _, idx = np.unique(keys, return_index=True)
    mask = np.zeros(keys.shape[0], dtype=bool)
    mask[idx] = True
    return mask


def dispatch_split(phy2log: np.ndarray, layout: ExpertLayout, mode: str,
                   loads: np.ndarray | None = None,
                   planned: np.ndarray | None = None) -> np.ndarray:
    """Split fractions ``[P]`` under ``mode``: ``even`` and ``sglang`` depend on the placement
    only; ``static`` is the ``planned`` split; ``realtime`` the exact quotas of ``loads``."""
    if mode == "even":
        return even_split(phy2log, layout.num_experts)
    if mode == "sglang":
        return sglang_split(phy2log, layout)
    if mode == "static":
        if planned is None:
            raise ValueError("static dispatch needs the planned split")
        return np.asarray(planned, dtype=np.float64)
    if mode == "realtime":
        if loads is None:
            raise ValueError("realtime dispatch needs the loads")
        w = np.asarray(loads, dtype=np.float64)
        sol = solve_quotas(w, phy2log, layout.gpu_of_slot, layout.num_gpus)
        return split_from_quota(w, phy2log, sol.quota)
    raise ValueError(f"dispatch must be one of {', '.join(DISPATCH_MODES)}, got {mode!r}")


def dispatch_gpu_loads(loads: np.ndarray, phy2log: np.ndarray, layout: ExpertLayout, mode: str,
                       planned: np.ndarray | None = None) -> np.ndarray:
    """GPU loads ``[G]`` of one layer's ``loads [E]`` under ``mode`` (:func:`dispatch_split`)."""
    w = np.asarray(loads, dtype=np.float64)
    split = dispatch_split(phy2log, layout, mode, w, planned)
    return np.bincount(layout.gpu_of_slot, weights=w[phy2log] * split, minlength=layout.num_gpus)
