"""Dispatch rules (``solvers.experts.dispatch``) and planning for an engine's own dispatch
(``solvers.experts.even``): the SGLang rule against a literal transcription of SGLang's
source, ``plan_even`` against brute force on small instances and against EPLB on real traces."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from solvers.experts import (ExpertLayout, dispatch_gpu_loads, dispatch_split, even_split, plan_even,
                             rebalance_experts, sglang_split, spread_over_nodes)

TRACES = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "moe_traces" / "sglang"


def sglang_reference(phy2log: np.ndarray, layout: ExpertLayout) -> np.ndarray:
    """SGLang's static dispatch written out rank by rank (``_find_nearest_expert`` and
    ``_fair_choices`` in sglang/srt/eplb/expert_location.py), the random remainder of the fair
    choice replaced by its expectation."""
    G, S, n = layout.num_gpus, layout.slots_per_gpu, layout.gpus_per_node
    share = np.zeros(phy2log.shape[0])
    for e in range(layout.num_experts):
        candidates = [p for p in range(phy2log.shape[0]) if phy2log[p] == e]
        left = 0
        for rank in range(G):
            if len(candidates) == 1:
                share[candidates[0]] += 1
                continue
            same_gpu = [p for p in candidates if p // S == rank]
            same_node = [p for p in candidates if p // (S * n) == rank // n]
            if same_gpu:
                share[same_gpu[0]] += 1
            elif same_node:
                share[same_node[0]] += 1
            else:
                left += 1
        for p in candidates:
            share[p] += left / len(candidates)
    return share / G


def random_placement(rng, E, G, S) -> np.ndarray:
    phy = np.concatenate([np.arange(E), rng.integers(0, E, G * S - E)])
    rng.shuffle(phy)
    return phy


def test_sglang_split_matches_the_rank_by_rank_rule():
    rng = np.random.default_rng(0)
    for _ in range(300):
        E, G, n = int(rng.integers(2, 12)), int(rng.integers(1, 10)), int(rng.integers(1, 5))
        S = int(rng.integers(-(-E // G), -(-E // G) + 3))
        layout = ExpertLayout(E, G, S, n)
        phy = random_placement(rng, E, G, S)
        split = sglang_split(phy, layout)
        assert np.allclose(split, sglang_reference(phy, layout))
        assert np.allclose(np.bincount(phy, weights=split, minlength=E), 1.0)


def test_sglang_split_is_even_when_replicas_sit_on_distinct_nodes():
    layout = ExpertLayout(4, 8, 2, 2)  # 4 nodes of 2 GPUs
    # Expert 0 on nodes 0, 1, 2 (one GPU each), expert 1 twice on node 3: uneven.
    phy = np.array([0, 1, 2, 3, 0, 1, 2, 3, 0, 2, 3, 2, 1, 2, 1, 3])
    split = sglang_split(phy, layout)
    assert np.allclose(split[phy == 0], 1 / 3)
    # Expert 1 at slots 1 (node 0), 5 (node 1), 12, 14 (node 3, GPUs 6 and 7): nodes 0 and 1
    # send both their ranks to their one replica, node 3's ranks each keep their own, and
    # node 2's two ranks spread over all four: 2.5, 2.5, 1.5, 1.5 ranks of 8.
    assert np.allclose(split[phy == 1], np.array([2.5, 2.5, 1.5, 1.5]) / 8)
    # Two replicas on one node where a rank of that node holds none: the first takes it.
    layout = ExpertLayout(2, 4, 2, 4)  # one node of 4 GPUs
    phy = np.array([0, 1, 0, 1, 1, 1, 1, 1])  # expert 0 on GPUs 0, 1; GPUs 2, 3 have none
    assert np.allclose(sglang_split(phy, layout)[[0, 2]], [3 / 4, 1 / 4])


def test_dispatch_split_rules():
    rng = np.random.default_rng(1)
    layout = ExpertLayout(8, 4, 3, 2)
    phy = random_placement(rng, 8, 4, 3)
    w = rng.integers(1, 100, 8).astype(float)
    assert np.array_equal(dispatch_split(phy, layout, "even"), even_split(phy, 8))
    planned = rng.random(phy.shape[0])
    assert np.array_equal(dispatch_split(phy, layout, "static", planned=planned), planned)
    realtime = dispatch_gpu_loads(w, phy, layout, "realtime")
    for rule in ("even", "sglang"):  # real-time quotas are optimal: no rule does better
        assert realtime.max() <= dispatch_gpu_loads(w, phy, layout, rule).max() + 1.0
    with pytest.raises(ValueError, match="dispatch must be one of"):
        dispatch_split(phy, layout, "random")


def brute_force_even(w: np.ndarray, layout: ExpertLayout, rule: str) -> float:
    """The least busiest GPU over every placement (each GPU any multiset of S experts, every
    expert placed) under ``rule``."""
    E, G, S = layout.num_experts, layout.num_gpus, layout.slots_per_gpu
    best = np.inf
    for gpus in itertools.combinations_with_replacement(
            list(itertools.combinations_with_replacement(range(E), S)), G):
        for order in ({gpus} if rule == "even" else set(itertools.permutations(gpus))):
            phy = np.array([e for g in order for e in g])
            if np.bincount(phy, minlength=E).min() == 0:
                continue
            best = min(best, dispatch_gpu_loads(w, phy, layout, rule).max())
    return best


@pytest.mark.parametrize("rule", ["even", "sglang"])
def test_plan_even_against_brute_force(rule):
    """Small instances: never better than the optimum (so the scoring is honest), close to it
    on every instance, and exactly optimal on most."""
    rng = np.random.default_rng(5)
    gaps = []
    for _ in range(40 if rule == "even" else 15):
        E, G = int(rng.integers(3, 6)), int(rng.integers(2, 4))
        S = int(rng.integers(-(-E // G), -(-E // G) + 2))
        if len(list(itertools.combinations_with_replacement(range(E), S))) ** G > (3e4 if rule == "even" else 2e3):
            continue
        layout = ExpertLayout(E, G, S, 1 if rule == "even" else 2)
        w = np.maximum(np.round(rng.lognormal(3, 1, size=E)), 1)
        phy, score = plan_even(w[None], layout, dispatch=rule)
        load = dispatch_gpu_loads(w, phy, layout, rule)
        assert score == pytest.approx(load.max() / load.mean())
        opt = brute_force_even(w, layout, rule)
        assert load.max() >= opt - 1e-9
        gaps.append(load.max() / opt - 1)
    assert len(gaps) >= 8
    # Measured: even worst 0.4% (35 of 36 optimal: every count vector is tried at this size,
    # the packing is the heuristic), SGLang worst 6.3% (7 of 10 optimal: labels are searched
    # by swaps only).
    assert max(gaps) <= (0.01 if rule == "even" else 0.08), gaps
    assert np.mean(np.array(gaps) < 1e-9) >= (0.9 if rule == "even" else 0.6), gaps


def _trace(name: str) -> np.ndarray:
    counts = np.array(json.loads((TRACES / f"{name}.json").read_text())["logical_count"], dtype=float)
    return counts[counts.sum(1) > 0]


@pytest.mark.parametrize("rule", ["even", "sglang"])
@pytest.mark.parametrize("gpus, slots", [(64, 5), (144, 2)])
def test_plan_even_never_worse_than_eplb_on_real_layers(rule, gpus, slots):
    """Every third layer of a real trace: never worse than the EPLB placement it starts from,
    under the rule the engine applies; deterministic."""
    loads = _trace("prefill_in1024")[::3]
    layout = ExpertLayout(256, gpus, slots)
    base = rebalance_experts(loads, layout.num_slots, 1, 1, gpus).phy2log
    ours, theirs = [], []
    for w, start in zip(loads, base):
        phy, score = plan_even(w[None], layout, dispatch=rule, starts=(start,))
        eplb = dispatch_gpu_loads(w, start, layout, rule)
        assert score <= eplb.max() / eplb.mean() + 1e-12
        ours.append(score)
        theirs.append(eplb.max() / eplb.mean())
    assert np.mean(ours) < np.mean(theirs) - 0.005  # and better on the whole
    again, _ = plan_even(loads[0][None], layout, dispatch=rule, starts=(base[0],))
    first, _ = plan_even(loads[0][None], layout, dispatch=rule, starts=(base[0],))
    assert np.array_equal(again, first)


def test_spread_over_nodes_keeps_gpu_contents_and_removes_clashes():
    rng = np.random.default_rng(3)
    layout = ExpertLayout(32, 16, 3, 4)  # 4 nodes
    for _ in range(20):
        phy = random_placement(rng, 32, 16, 3)
        spread = spread_over_nodes(phy, layout)
        as_sets = lambda p: sorted(tuple(sorted(g)) for g in p.reshape(16, 3).tolist())  # noqa: E731
        assert as_sets(spread) == as_sets(phy)

        def clashes(p):  # replicas of one expert on one node, beyond the first
            node = np.arange(p.shape[0]) // 12
            return sum(len(x) - len(set(x)) for x in
                       ([node[(p == e)] .tolist() for e in range(32)]))

        assert clashes(spread) <= clashes(phy)
