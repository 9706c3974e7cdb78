"""Placements for an engine's own dispatch: the even split (vLLM, SGLang ``dynamic``) and
SGLang's static per-rank dispatch (:mod:`solvers.experts.dispatch`).

Under the even split a placement is replica counts ``c_e`` plus a packing of the pieces
``w_e / c_e`` into ``G`` GPUs of ``S`` slots: the problem DeepSeek's EPLB solves greedily
(replicate the max load-per-replica expert, then "balanced packing", heaviest piece to the
lightest GPU with room; :mod:`solvers.experts.eplb_baseline`). :func:`plan_even` searches the
same space further and never returns worse than its starting placements (EPLB's own among them):

1. **Packing polish** (swap local search, the classic pairwise interchange for multiprocessor
   scheduling; Finn and Horowitz, "A linear time approximation algorithm for multiprocessor
   scheduling", BIT 1979): swap a piece of the busiest GPU with a smaller piece elsewhere while
   that lowers the busiest GPU, best swap first. With two slots per GPU the greedy packing is
   already optimal for its counts (largest piece with smallest: the sorted pairing), so only
   the counts can improve it.
2. **Replica counts**: small instances (at most ``_EXHAUSTIVE_COUNTS`` count vectors) try every
   vector, each packed and polished. With two slots per GPU a batched steepest descent moves
   one replica at a time from a giver (an expert with several replicas whose pieces grow
   least) to an expert of the heaviest pairs, every move scored by its sorted pairing at once
   (:func:`_pair_scores`). Larger instances with more slots keep EPLB's counts (measured: count
   moves there gain 0.04% for 50x the time).

Under SGLang's static dispatch (``dispatch="sglang"``) the GPU labels matter: replicas of an
expert on distinct nodes split evenly, two on one node do not. The even plan's GPUs are
relabelled so that replicas of an expert sit on distinct nodes where possible
(:func:`spread_over_nodes`), and a swap search scored by the exact SGLang split follows.

Robust mode plans on the nominal loads and reports the worst scenario (:func:`plan_even` says
why: every robust objective we measured lost on held-out workloads).
Arrays in, arrays out; deterministic.
"""

from __future__ import annotations

import heapq
import itertools
import math

import numpy as np

from solvers.experts.construction import greedy_counts
from solvers.experts.dispatch import sglang_split
from solvers.experts.layout import ExpertLayout

__all__ = ["plan_even", "spread_over_nodes"]

# A move must lower the score by more than this fraction (float noise is not a gain).
_MIN_GAIN = 1e-12
# Two slots per GPU: givers tried per taker and rounds at most of the batched steepest-descent
# count search (takers: the experts of the _BINDING_PAIRS heaviest pairs). Measured on the six
# SGLang traces at EP144 (58 layers each, mean even-split busiest/mean; EPLB global 1.1419):
# first-improvement with 16 moves x 60 rounds 1.1394; this setting 1.1248 at about 2 s per
# model on the 2-core box.
_COUNT_MOVES_PER_ROUND = 64
_COUNT_ROUNDS = 200
_BINDING_PAIRS = 4
# More than two slots, not small: no count moves (each would be a packing plus a swap polish).
# Measured at EP64 (two traces): 8 moves x 20 rounds 1.0004 in 45 s per model, the swap polish
# alone 1.0008 in 0.9 s; EPLB global 1.0208.
# Instances with at most this many replica-count vectors (C(G*S - 1, E - 1)) try them all,
# each packed and polished: e.g. 5 experts on 2 GPUs x 4 slots (35 vectors).
_EXHAUSTIVE_COUNTS = 2000
# Only starts within this fraction of the best start are searched (EPLB's hierarchical packing
# at EP64 starts 1.6-2.1x the mean and is never the best after the search).
_SEED_SLACK = 0.05
# Swap-search steps of the packing polish (each step: the busiest GPU's best swap).
_SWAP_STEPS = 200
# SGLang polish: slot swaps tried (each scored by a full SGLang split, about 0.1 ms), partners
# on the _SGLANG_PARTNERS lightest GPUs. Not tuned (the values were set once and kept).
_SGLANG_SWAPS = 48
_SGLANG_PARTNERS = 4


def _ratio(gpu_load: np.ndarray) -> float:
    """Busiest/mean of ``gpu_load [K, G]``, worst over scenarios (``K = 1`` in the search)."""
    mean = np.maximum(gpu_load.mean(1), 1e-300)
    return float((gpu_load.max(1) / mean).max())


def _even_loads(W: np.ndarray, phy2log: np.ndarray, layout: ExpertLayout) -> np.ndarray:
    counts = np.bincount(phy2log, minlength=layout.num_experts)
    pieces = W[:, phy2log] / counts[phy2log]
    return pieces.reshape(W.shape[0], layout.num_gpus, layout.slots_per_gpu).sum(2)


def _sglang_loads(W: np.ndarray, phy2log: np.ndarray, layout: ExpertLayout) -> np.ndarray:
    pieces = W[:, phy2log] * sglang_split(phy2log, layout)
    return pieces.reshape(W.shape[0], layout.num_gpus, layout.slots_per_gpu).sum(2)


def _polish_swaps(W: np.ndarray, phy2log: np.ndarray, layout: ExpertLayout,
                  steps: int = _SWAP_STEPS) -> np.ndarray:
    """Step 1 (module docstring): best piece swaps out of the busiest (scenario, GPU)."""
    G, S, E = layout.num_gpus, layout.slots_per_gpu, layout.num_experts
    phy = phy2log.copy()
    counts = np.bincount(phy, minlength=E)
    norm = W[:, phy] / counts[phy] / np.maximum(W.sum(1) / G, 1e-300)[:, None]  # [K, P]
    load = norm.reshape(W.shape[0], G, S).sum(2)
    gpu = np.repeat(np.arange(G), S)
    holds = np.zeros((G, E), dtype=np.int64)
    np.add.at(holds, (gpu, phy), 1)
    for _ in range(steps):
        k, g = np.unravel_index(int(np.argmax(load)), load.shape)
        top = load[k, g]
        slots_a = np.arange(g * S, (g + 1) * S)
        # new loads of g and of each other slot's GPU, every scenario: [S, P, K]
        d = norm[:, slots_a].T[:, None, :] - norm.T[None, :, :]
        worst = np.maximum((load[:, g][None, None, :] - d).max(2),
                           (load[:, gpu].T[None, :, :] + d).max(2))
        ok = (gpu[None, :] != g) & (holds[gpu[None, :], phy[slots_a][:, None]] == 0)
        ok &= holds[g, phy][None, :] == 0
        worst = np.where(ok, worst, np.inf)
        i, j = np.unravel_index(int(np.argmin(worst)), worst.shape)
        if not worst[i, j] < top * (1 - _MIN_GAIN):
            break
        a, b = int(slots_a[i]), int(j)
        h = int(gpu[b])
        holds[g, phy[a]] -= 1
        holds[h, phy[b]] -= 1
        phy[a], phy[b] = phy[b], phy[a]
        holds[g, phy[a]] += 1
        holds[h, phy[b]] += 1
        norm[:, [a, b]] = norm[:, [b, a]]
        load[:, g] = norm[:, g * S:(g + 1) * S].sum(1)
        load[:, h] = norm[:, h * S:(h + 1) * S].sum(1)
    return np.sort(phy.reshape(G, S), axis=1).ravel()


def _lpt(w: np.ndarray, counts: np.ndarray, layout: ExpertLayout) -> np.ndarray:
    """Even-split pieces packed heaviest first onto the least-loaded GPU with a free slot that
    does not hold the expert yet (else the least-loaded with a free slot): the packing of
    :func:`solvers.experts.construction.replication_placement`, on a heap."""
    G, S, E = layout.num_gpus, layout.slots_per_gpu, layout.num_experts
    pieces = np.repeat(np.arange(E), counts)
    size = (w / counts)[pieces]
    heap = [(0.0, g) for g in range(G)]
    content: list[list[int]] = [[] for _ in range(G)]
    for p in np.argsort(-size, kind="stable").tolist():
        e = int(pieces[p])
        skipped = []
        while heap and e in content[heap[0][1]]:
            skipped.append(heapq.heappop(heap))
        load, g = heapq.heappop(heap) if heap else skipped.pop(0)
        content[g].append(e)
        if len(content[g]) < S:
            heapq.heappush(heap, (load + float(size[p]), g))
        for item in skipped:
            heapq.heappush(heap, item)
    return np.sort(np.array(content, dtype=np.int64), axis=1).ravel()


def _pack(W: np.ndarray, counts: np.ndarray, layout: ExpertLayout) -> np.ndarray:
    placed = _lpt(W.mean(0), counts, layout)
    return placed if layout.slots_per_gpu == 2 else _polish_swaps(W.mean(0)[None], placed, layout)


def _pair_scores(W: np.ndarray, counts: np.ndarray, num_gpus: int) -> np.ndarray:
    """Two slots per GPU: the worst busiest/mean ``[M]`` of the sorted pairing (largest piece
    with smallest, the optimal pairing for given counts) of each count vector ``counts [M, E]``
    (every row sums to ``2 G``), without building placements."""
    M, E = counts.shape
    reps = np.repeat(np.tile(np.arange(E), M), counts.ravel()).reshape(M, -1)
    per = np.take_along_axis(counts, reps, axis=1)
    pieces = np.sort(W[:, reps] / per[None], axis=2)  # [K, M, 2G]
    pairs = pieces[..., :num_gpus] + pieces[..., ::-1][..., :num_gpus]
    mean = np.maximum(W.sum(1) / num_gpus, 1e-300)[:, None]
    return (pairs.max(2) / mean).max(0)


def _pair_counts_search(W: np.ndarray, counts: np.ndarray, num_gpus: int) -> np.ndarray:
    """Steepest descent over one-replica moves, two slots per GPU (:func:`_pair_scores`): each
    round scores every move from the cheapest givers to the experts of the binding pairs."""
    w = W.mean(0)
    counts = counts.copy()
    score = float(_pair_scores(W, counts[None], num_gpus)[0])
    for _ in range(_COUNT_ROUNDS):
        reps = np.repeat(np.arange(counts.shape[0]), counts)
        order = np.argsort(W.mean(0)[reps] / counts[reps], kind="stable")
        pairs = w[reps][order][:num_gpus] / counts[reps][order][:num_gpus]
        pairs = pairs + (w[reps] / counts[reps])[order][::-1][:num_gpus]
        binding = np.argsort(-pairs, kind="stable")[:_BINDING_PAIRS]
        takers = np.unique(np.concatenate([reps[order][binding], reps[order][::-1][binding]]))
        givers = np.flatnonzero(counts > 1)
        givers = givers[np.argsort(w[givers] / (counts[givers] - 1), kind="stable")]
        givers = givers[:_COUNT_MOVES_PER_ROUND]
        moves = [(int(y), int(x)) for y in takers for x in givers if x != y]
        if not moves:
            break
        trial = np.repeat(counts[None], len(moves), axis=0)
        idx = np.arange(len(moves))
        trial[idx, [m[0] for m in moves]] += 1
        trial[idx, [m[1] for m in moves]] -= 1
        scores = _pair_scores(W, trial, num_gpus)
        i = int(np.argmin(scores))
        if not scores[i] < score * (1 - _MIN_GAIN):
            break
        counts, score = trial[i], float(scores[i])
    return counts


def _compositions(total: int, parts: int):
    """Every vector of ``parts`` integers >= 1 summing to ``total`` (lexicographic order)."""
    for bars in itertools.combinations(range(1, total), parts - 1):
        edges = (0,) + bars + (total,)
        yield np.diff(np.array(edges, dtype=np.int64))


def _improve_counts(W: np.ndarray, phy2log: np.ndarray,
                    layout: ExpertLayout) -> tuple[np.ndarray, float]:
    """Step 2 (module docstring) from ``phy2log``'s counts; ``(phy2log, score)``."""
    G, S, E = layout.num_gpus, layout.slots_per_gpu, layout.num_experts
    best, counts = phy2log, np.bincount(phy2log, minlength=E)
    score = _ratio(_even_loads(W, best, layout))
    if math.comb(G * S - 1, E - 1) <= _EXHAUSTIVE_COUNTS:  # small: every count vector
        for trial_counts in _compositions(G * S, E):
            trial = _pack(W, trial_counts, layout)
            trial_score = _ratio(_even_loads(W, trial, layout))
            if trial_score < score * (1 - _MIN_GAIN):
                best, score = trial, trial_score
        return best, score
    if S == 2:
        trial = _pack(W, _pair_counts_search(W, counts, G), layout)
        trial_score = _ratio(_even_loads(W, trial, layout))
        return (trial, trial_score) if trial_score < score else (best, score)
    return best, score


def spread_over_nodes(phy2log: np.ndarray, layout: ExpertLayout) -> np.ndarray:
    """The same GPUs (slot contents) relabelled so that replicas of one expert share a node as
    rarely as a greedy assignment plus pairwise GPU swaps finds: the most constrained GPU goes
    first to the node with room where it meets the fewest of its experts' other replicas."""
    G, S, E, n = layout.num_gpus, layout.slots_per_gpu, layout.num_experts, layout.gpus_per_node
    nodes = -(-G // n)
    if nodes == 1:
        return phy2log.copy()
    content = phy2log.reshape(G, S)
    holds = np.zeros((G, E), dtype=np.int64)
    np.add.at(holds, (np.repeat(np.arange(G), S), phy2log), 1)
    holds = (holds > 0).astype(np.int64)
    replicated = holds.sum(0) > 1
    degree = holds[:, replicated].sum(1)
    room = np.bincount(np.arange(G) // n, minlength=nodes)
    on_node = np.zeros((nodes, E), dtype=np.int64)
    node_of = np.empty(G, dtype=np.int64)
    for g in np.argsort(-degree, kind="stable"):
        clash = on_node @ holds[g] if replicated.any() else np.zeros(nodes)
        clash = np.where(room > 0, clash, np.iinfo(np.int64).max)
        m = int(np.argmin(clash))
        node_of[g], room[m] = m, room[m] - 1
        on_node[m] += holds[g]
    for _ in range(4 * G):  # pairwise swaps between nodes while they remove clashes
        clash_g = ((on_node[node_of] - holds) * holds * replicated).sum(1)
        g = int(np.argmax(clash_g))
        if clash_g[g] == 0:
            break
        a = node_of[g]
        hg = holds[g] * replicated
        rest_a = on_node[a] - holds[g]
        rest = on_node[node_of] - holds  # each h's node without h
        rep = holds * replicated
        before = rest_a @ hg + (rest * rep).sum(1)
        after = rest @ hg + rep @ rest_a
        gain = np.where(node_of != a, before - after, -1)  # clashes removed by swapping g, h
        h = int(np.argmax(gain))
        if gain[h] <= 0:
            break
        b = node_of[h]
        on_node[a] += holds[h] - holds[g]
        on_node[b] += holds[g] - holds[h]
        node_of[g], node_of[h] = b, a
    # Position within the node: GPU order kept (stable) inside each node.
    order = np.lexsort((np.arange(G), node_of))
    slot_of_node = np.zeros(G, dtype=np.int64)
    target = np.empty(G, dtype=np.int64)
    starts = np.arange(nodes) * n
    for g in order:
        m = node_of[g]
        target[g] = starts[m] + slot_of_node[m]
        slot_of_node[m] += 1
    out = np.empty_like(content)
    out[target] = content
    return out.ravel()


def _polish_sglang(W: np.ndarray, phy2log: np.ndarray,
                   layout: ExpertLayout) -> tuple[np.ndarray, float]:
    """Slot swaps out of the busiest GPU scored by the exact SGLang split (module docstring)."""
    G, S = layout.num_gpus, layout.slots_per_gpu
    best = phy2log.copy()
    load = _sglang_loads(W, best, layout)
    score = _ratio(load)
    evals = 0
    while evals < _SGLANG_SWAPS:
        norm = load / np.maximum(load.mean(1, keepdims=True), 1e-300)
        k, g = np.unravel_index(int(np.argmax(norm)), load.shape)
        order = np.argsort(load[k], kind="stable")  # lightest GPUs first
        improved = False
        for a in range(g * S, (g + 1) * S):
            for h in order[:_SGLANG_PARTNERS]:
                if h == g:
                    continue
                for b in range(h * S, (h + 1) * S):
                    if best[a] == best[b]:
                        continue
                    trial = best.copy()
                    trial[a], trial[b] = trial[b], trial[a]
                    trial_load = _sglang_loads(W, trial, layout)
                    evals += 1
                    trial_score = _ratio(trial_load)
                    if trial_score < score * (1 - _MIN_GAIN):
                        best, load, score, improved = trial, trial_load, trial_score, True
                        break
                    if evals >= _SGLANG_SWAPS:
                        break
                if improved or evals >= _SGLANG_SWAPS:
                    break
            if improved or evals >= _SGLANG_SWAPS:
                break
        if not improved:
            break
    return best, score


def plan_even(scenarios: np.ndarray, layout: ExpertLayout, *, dispatch: str = "even",
              starts: tuple[np.ndarray, ...] = (),
              nominal: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """``(phy2log, score)``: the best placement found for ``dispatch`` (``"even"`` or
    ``"sglang"``) on the ``nominal`` loads ``[E]`` (default: the mean of ``scenarios [K, E]``);
    never worse there than any of ``starts`` (e.g. EPLB's placements). ``score`` is the
    busiest/mean on the nominal loads, or with several scenarios the worst scenario's (the
    plan's sensitivity to drift; the placement is the nominal one).

    Robust mode plans on the nominal loads because every robust objective we measured lost on
    held-out workloads (plan on one SGLang trace, evaluate on the others of its phase;
    benchmarks/expert_placement.py): a search scored by the worst of 16 log-normal drifts
    (sigma 0.15) lost to the nominal plan on 14 of 14 pairs at EP64 (1.1424 against 1.1199)
    and EP144 (1.3322 against 1.3069); choosing among the visited candidates by the mean over
    drifts still lost (EP64 1.1215, 4 of 14 pairs no worse; EP144 1.3092, 1 of 14); shrinking
    the loads 10-40% towards their mean lost 11-14 of 14. Under an even split independent drift
    carries nothing a placement can use.
    """
    if dispatch not in ("even", "sglang"):
        raise ValueError(f"plan_even plans for 'even' or 'sglang' dispatch, got {dispatch!r}")
    W = np.atleast_2d(np.asarray(scenarios, dtype=np.float64))
    w = W.mean(0) if nominal is None else np.asarray(nominal, dtype=np.float64)
    N = w[None]
    loads = _even_loads if dispatch == "even" else _sglang_loads
    own = _pack(N, greedy_counts(w, layout.num_slots), layout)
    seeds = [own] + [np.asarray(s, dtype=np.int64) for s in starts]
    cands = [(_ratio(loads(N, s, layout)), s) for s in seeds]
    first = min(c[0] for c in cands)
    searched: set[bytes] = set()
    for start_score, s in list(cands):
        if start_score > first * (1 + _SEED_SLACK) or (layout.slots_per_gpu > 2 and s is not own):
            continue  # more than two slots: EPLB's packing is the same greedy as ours
        # Two slots: the search depends on the counts only (the packing is the sorted pairing).
        counts = np.bincount(s, minlength=layout.num_experts)
        key = (counts if layout.slots_per_gpu == 2 else s).tobytes()
        if key in searched:
            continue
        searched.add(key)
        polished = s if layout.slots_per_gpu == 2 or s is own else _polish_swaps(N, s, layout)
        improved, _ = _improve_counts(N, polished, layout)
        if dispatch == "sglang":
            for p in (improved, spread_over_nodes(improved, layout)):
                cands.append(_polish_sglang(N, p, layout)[::-1])
        else:
            cands.append((_ratio(loads(N, improved, layout)), improved))
    score, phy = min(cands, key=lambda c: c[0])  # first on ties: deterministic
    if W.shape[0] > 1:
        per_scenario = loads(W, phy, layout)
        score = float((per_scenario.max(1) / np.maximum(per_scenario.mean(1), 1e-300)).max())
    return phy, score
