"""Property tests of the expert-parallel solvers, each checked against an independent reference.

* ``solvers.experts.eplb_baseline``: the published DeepSeek EPLB README example (the only hard-coded
  result in this file, ``tests/fixtures/eplb_readme_example.json``) and structural properties
  of the global policy, balanced packing and greedy replication.
* ``solvers.experts.quota``: ``solve_quotas`` against the LP ``min T`` over the transportation
  polytope (PuLP/CBC) and against Hall's formula ``max_S w(S)/|N(S)|`` enumerated here, on
  seeded random instances (integer and fractional loads); ``locality_quotas`` against a PuLP
  LP of the cross-node objective; ``cross_node_tokens`` on hand examples.
* ``solvers.experts`` placement (``exact``, ``placement``, ``construction``, ``migration``,
  ``scoring``): CP-SAT (``solve_layer_milp``) against ``brute_force_layer``
  on tiny instances, the heuristic ``plan_layer`` within 2 % of the brute-force optimum,
  output validity on medium instances (nominal and robust), ``relabel_to_current`` against
  an enumeration of GPU permutations, and ``drift_scenarios`` determinism.
"""
from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pulp
import pytest

from solvers.experts import (
    ExpertLayout,
    balanced_packing,
    brute_force_layer,
    chain_placement,
    covering_lp_bound,
    cross_node_tokens,
    drift_scenarios,
    even_split,
    even_split_gpu_loads,
    greedy_counts,
    group_placement,
    group_ratio,
    groups_of_placement,
    improve_counts,
    interleaved_gpu_order,
    locality_quotas,
    lp_lower_bound,
    plan_layer,
    plan_layers,
    rebalance_experts,
    relabel_to_current,
    replicate_experts,
    replication_placement,
    search_groups,
    solve_layer_milp,
    solve_quotas,
    static_gpu_loads,
    tree_gpus,
    worst_ratio,
)
from solvers.experts.covering import _cheapest_cover  # a private helper, tested on its own

# PuLP 3.x deprecation notices (LpVariable construction, PULP_CBC_CMD) are noise here.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pulp")

FIXTURE = Path(__file__).parent / "fixtures" / "eplb_readme_example.json"
REL = 1e-9


# =========================================================================================
# Independent references
# =========================================================================================


def _cbc() -> pulp.PULP_CBC_CMD:
    return pulp.PULP_CBC_CMD(msg=False)


def lp_minmax(loads, phy2log, gpu_of_slot, num_gpus) -> float:
    """LP optimum of ``min T`` s.t. each expert's tokens go to GPUs holding it, GPU load <= T."""
    pairs = sorted({(int(e), int(g)) for e, g in zip(phy2log, gpu_of_slot)})
    prob = pulp.LpProblem("minmax", pulp.LpMinimize)
    t = pulp.LpVariable("T", lowBound=0)
    x = {(e, g): pulp.LpVariable(f"x_{e}_{g}", lowBound=0) for e, g in pairs}
    prob += t
    for e in range(len(loads)):
        prob += pulp.lpSum(x[p] for p in pairs if p[0] == e) == float(loads[e])
    for g in range(num_gpus):
        prob += pulp.lpSum(x[p] for p in pairs if p[1] == g) <= t
    assert prob.solve(_cbc()) == pulp.LpStatusOptimal
    return float(pulp.value(t))


def hall_optimum(loads, phy2log, gpu_of_slot, num_gpus) -> float:
    """``max over expert sets S of w(S) / |N(S)|`` (and the mean), by enumeration."""
    loads = np.asarray(loads, dtype=float)
    nbrs = [set(gpu_of_slot[phy2log == e].tolist()) for e in range(len(loads))]
    best = loads.sum() / num_gpus
    for r in range(1, len(loads) + 1):
        for subset in itertools.combinations(range(len(loads)), r):
            covered = set().union(*(nbrs[e] for e in subset))
            best = max(best, loads[list(subset)].sum() / len(covered))
    return best


def lp_min_cross(loads, phy2log, gpu_of_slot, node_of_gpu, cap) -> float:
    """LP: tokens of each expert originate evenly on the nodes; minimise tokens served off
    their origin node with every GPU at most ``cap``."""
    num_nodes = int(np.max(node_of_gpu)) + 1
    gpus_of = {e: sorted(set(gpu_of_slot[phy2log == e].tolist())) for e in range(len(loads))}
    prob = pulp.LpProblem("cross", pulp.LpMinimize)
    y = {(e, n, g): pulp.LpVariable(f"y_{e}_{n}_{g}", lowBound=0)
         for e in gpus_of for n in range(num_nodes) for g in gpus_of[e]}
    prob += pulp.lpSum(v for (e, n, g), v in y.items() if node_of_gpu[g] != n)
    for e in gpus_of:
        for n in range(num_nodes):
            prob += pulp.lpSum(y[e, n, g] for g in gpus_of[e]) == float(loads[e]) / num_nodes
    for g in range(len(node_of_gpu)):
        prob += pulp.lpSum(v for (e, n, gg), v in y.items() if gg == g) <= cap
    assert prob.solve(_cbc()) == pulp.LpStatusOptimal
    return float(pulp.value(prob.objective))


def random_placement(rng, num_experts, num_gpus, slots) -> np.ndarray:
    """A random ``phy2log`` in which every expert has at least one replica."""
    phy2log = np.concatenate([np.arange(num_experts), rng.integers(0, num_experts, num_gpus * slots - num_experts)])
    return rng.permutation(phy2log)


def random_loads(rng, num_experts, skewed: bool) -> np.ndarray:
    if skewed:
        return np.round(rng.lognormal(3.0, 1.2, num_experts)).astype(float) + 1
    return rng.integers(0, 60, num_experts).astype(float)


def quota_instances(count: int, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        E, G = int(rng.integers(3, 9)), int(rng.integers(2, 5))
        S = int(rng.integers(-(-E // G), -(-E // G) + 3))
        out.append((random_loads(rng, E, skewed=bool(i % 2)), random_placement(rng, E, G, S),
                    np.repeat(np.arange(G), S), G))
    return out


def tiny_layouts(count: int, seed: int):
    """Seeded tiny layer instances (E 3..5, G 2..3, G*S >= E, S <= 3)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        E, G = int(rng.integers(3, 6)), int(rng.integers(2, 4))
        S = int(rng.integers(-(-E // G), 4)) if -(-E // G) < 4 else -(-E // G)
        w = random_loads(rng, E, skewed=bool(i % 2))
        if w.sum() == 0:
            w[0] = 1.0
        out.append((w, ExpertLayout(E, G, S)))
    return out


def check_placement(phy2log: np.ndarray, layout: ExpertLayout) -> None:
    assert phy2log.shape == (layout.num_slots,)
    assert phy2log.min() >= 0 and phy2log.max() < layout.num_experts
    assert set(phy2log.tolist()) == set(range(layout.num_experts))


def check_split(phy2log: np.ndarray, split: np.ndarray, loads: np.ndarray) -> None:
    """Fractions >= 0 summing to 1 per expert. Non-integer loads are scaled to integers at a
    resolution of ``2**-30`` of the total before the flow (``solvers.experts.quota``), so an
    expert's fractions may be off by half a unit of that resolution relative to its load."""
    assert split.shape == phy2log.shape
    assert np.all(split >= -1e-12)
    loads = np.asarray(loads, dtype=float)
    sums = np.bincount(phy2log, weights=split, minlength=loads.shape[0])
    integral = np.all(loads == np.round(loads))
    tol = 1e-9 if integral else 0.5 * loads.sum() / (2**30 * np.maximum(loads, 1e-300)) + 1e-9
    assert np.all(np.abs(sums - 1.0) <= tol), np.abs(sums - 1.0).max()


# =========================================================================================
# eplb_baseline
# =========================================================================================


@pytest.fixture(scope="module")
def readme():
    return json.loads(FIXTURE.read_text())


def test_eplb_reproduces_readme_example(readme):
    weight = np.array(readme["weight"], dtype=float)
    res = rebalance_experts(weight, readme["num_replicas"], readme["num_groups"], readme["num_nodes"],
                            readme["num_gpus"])
    assert res.phy2log.tolist() == readme["expected_phy2log"]
    for layer in range(weight.shape[0]):
        assert res.logcnt[layer].tolist() == np.bincount(res.phy2log[layer], minlength=weight.shape[1]).tolist()
    per_gpu = readme["num_replicas"] // readme["num_gpus"]
    assert per_gpu == 2
    gpu_of_slot = np.repeat(np.arange(readme["num_gpus"]), per_gpu)
    loads = even_split_gpu_loads(weight, res.phy2log, gpu_of_slot, readme["num_gpus"])
    assert loads == pytest.approx(np.array(readme["derived_gpu_loads_equal_split"]), abs=1e-9)
    ratio = loads.max(1) / loads.mean(1)
    assert ratio == pytest.approx(np.array(readme["derived_max_over_mean_per_layer"]), abs=5e-4)


def test_eplb_even_split_matches_static_split(readme):
    """``even_split_gpu_loads`` agrees with ``static_gpu_loads`` under ``even_split`` fractions."""
    weight = np.array(readme["weight"], dtype=float)
    phy2log = np.array(readme["expected_phy2log"])
    G = readme["num_gpus"]
    gpu_of_slot = np.repeat(np.arange(G), phy2log.shape[1] // G)
    loads = even_split_gpu_loads(weight, phy2log, gpu_of_slot, G)
    for layer in range(weight.shape[0]):
        split = even_split(phy2log[layer], weight.shape[1])
        assert loads[layer] == pytest.approx(static_gpu_loads(weight[layer], phy2log[layer], split, G), rel=REL)
        assert loads[layer].sum() == pytest.approx(weight[layer].sum(), rel=REL)


@pytest.mark.parametrize("seed", range(6))
def test_eplb_global_mode_structure(seed):
    rng = np.random.default_rng(seed)
    E = int(rng.integers(4, 17))
    G = int(rng.integers(2, 6))
    per_gpu = -(-E // G) + int(rng.integers(0, 3))
    P = G * per_gpu
    weight = rng.integers(0, 200, (3, E)).astype(float)
    res = rebalance_experts(weight, P, 1, 1, G)
    assert res.phy2log.shape == (3, P) and res.phyrank.shape == (3, P) and res.logcnt.shape == (3, E)
    for layer in range(3):
        counts = np.bincount(res.phy2log[layer], minlength=E)
        assert counts.min() >= 1
        assert counts.tolist() == res.logcnt[layer].tolist()
        assert counts.sum() == P
        # Each GPU holds exactly P/G slots (the layout), and ranks number each expert's replicas.
        assert res.phy2log[layer].reshape(G, per_gpu).shape == (G, P // G)
        for e in range(E):
            assert sorted(res.phyrank[layer][res.phy2log[layer] == e].tolist()) == list(range(counts[e]))
        # The replica counts are the greedy max load-per-replica counts.
        assert counts.tolist() == greedy_counts(weight[layer], P).tolist()
    # num_groups not divisible by num_nodes falls back to the global policy.
    fallback = rebalance_experts(weight, P, 3, 2, G)
    assert np.array_equal(fallback.phy2log, res.phy2log)


def test_balanced_packing_properties():
    rng = np.random.default_rng(7)
    weight = rng.random((5, 12))
    pack, rank = balanced_packing(weight, 4)
    for r in range(5):
        assert np.bincount(pack[r], minlength=4).tolist() == [3] * 4
        for p in range(4):
            assert sorted(rank[r][pack[r] == p].tolist()) == [0, 1, 2]
    # One item per pack: any assignment is a permutation.
    pack1, _ = balanced_packing(weight, 12)
    assert all(sorted(row.tolist()) == list(range(12)) for row in pack1)
    with pytest.raises(ValueError):
        balanced_packing(weight, 5)


def test_replicate_experts_greedy_rule():
    """Each redundant replica goes to the expert with the highest load per replica."""
    rng = np.random.default_rng(3)
    weight = rng.integers(1, 100, (4, 6)).astype(float)
    res = replicate_experts(weight, 11)
    assert np.array_equal(res.phy2log[:, :6], np.tile(np.arange(6), (4, 1)))
    for r in range(4):
        counts = np.ones(6, dtype=int)
        for i in range(6, 11):
            e = res.phy2log[r, i]
            assert weight[r, e] / counts[e] == pytest.approx((weight[r] / counts).max())
            assert res.phyrank[r, i] == counts[e]
            counts[e] += 1
        assert counts.tolist() == res.logcnt[r].tolist()


# =========================================================================================
# expert_quota.solve_quotas
# =========================================================================================


@pytest.mark.parametrize("case", range(24))
def test_solve_quotas_integer_matches_lp(case):
    loads, phy2log, gpu_of_slot, G = quota_instances(24, seed=11)[case]
    sol = solve_quotas(loads, phy2log, gpu_of_slot, G)
    # (a) feasibility of the quotas.
    assert np.all(sol.quota >= -1e-12)
    assert np.bincount(phy2log, weights=sol.quota, minlength=len(loads)) == pytest.approx(loads, abs=1e-9)
    assert sol.gpu_load == pytest.approx(np.bincount(gpu_of_slot, weights=sol.quota, minlength=G), abs=1e-9)
    assert sol.max_load == pytest.approx(sol.gpu_load.max(), abs=1e-12)
    # (b) optimal: the integer optimum is the ceiling of the LP (= Hall) optimum.
    lp = lp_minmax(loads, phy2log, gpu_of_slot, G)
    assert lp == pytest.approx(hall_optimum(loads, phy2log, gpu_of_slot, G), rel=1e-7, abs=1e-7)
    assert sol.max_load == math.ceil(lp - 1e-7)
    assert lp - 1e-7 <= sol.max_load <= lp + 1
    # (c) the reported bound.
    assert sol.lower_bound <= lp + 1e-7
    assert sol.lower_bound <= sol.max_load <= sol.lower_bound + 1
    assert sol.max_flows >= 1
    # Never worse than the even split over the same placement.
    even = even_split_gpu_loads(loads, phy2log, gpu_of_slot, G)
    assert sol.max_load <= even.max() + 1e-9


@pytest.mark.parametrize("case", range(12))
def test_solve_quotas_float_matches_lp(case):
    rng = np.random.default_rng(100 + case)
    _, phy2log, gpu_of_slot, G = quota_instances(12, seed=12)[case]
    E = int(phy2log.max()) + 1
    loads = rng.random(E) * rng.choice([1e-3, 1.0, 7.3, 1e4])
    sol = solve_quotas(loads, phy2log, gpu_of_slot, G)
    lp = lp_minmax(loads, phy2log, gpu_of_slot, G)
    assert sol.max_load == pytest.approx(lp, rel=1e-6)
    assert sol.lower_bound <= sol.max_load * (1 + 1e-6)
    assert np.all(sol.quota >= 0)
    assert np.bincount(phy2log, weights=sol.quota, minlength=E) == pytest.approx(loads, rel=1e-6, abs=1e-6 * loads.sum())
    assert sol.gpu_load == pytest.approx(np.bincount(gpu_of_slot, weights=sol.quota, minlength=G), rel=1e-12)
    even = even_split_gpu_loads(loads, phy2log, gpu_of_slot, G)
    assert sol.max_load <= even.max() * (1 + 1e-6)


def test_solve_quotas_duplicate_replicas_on_one_gpu_split_evenly():
    # Expert 0 has two slots on GPU 0 and one on GPU 1; expert 1 only on GPU 1.
    phy2log = np.array([0, 0, 0, 1])
    gpu_of_slot = np.array([0, 0, 1, 1])
    sol = solve_quotas(np.array([10.0, 4.0]), phy2log, gpu_of_slot, 2)
    assert sol.max_load == 7
    assert sol.quota[0] == sol.quota[1]
    assert sol.gpu_load.tolist() == [7.0, 7.0]


def test_solve_quotas_missing_replica_raises():
    phy2log = np.array([0, 0, 1, 1])
    gpu_of_slot = np.array([0, 0, 1, 1])
    with pytest.raises(ValueError):
        solve_quotas(np.array([5.0, 3.0, 2.0]), phy2log, gpu_of_slot, 2)
    # An expert without load needs no replica.
    sol = solve_quotas(np.array([5.0, 3.0, 0.0]), phy2log, gpu_of_slot, 2)
    assert sol.max_load == 5


# =========================================================================================
# expert_quota.locality_quotas / cross_node_tokens
# =========================================================================================


def test_cross_node_tokens_hand_example():
    loads = np.array([8.0])
    assert cross_node_tokens(loads, np.array([0]), np.array([8.0]), np.array([0]), 2) == pytest.approx(4.0)
    assert cross_node_tokens(loads, np.array([0, 0]), np.array([4.0, 4.0]), np.array([0, 1]), 2) == pytest.approx(0.0)
    # Replicas on both nodes but all tokens on node 0: half of them cross.
    assert cross_node_tokens(loads, np.array([0, 0]), np.array([8.0, 0.0]), np.array([0, 1]), 2) == pytest.approx(4.0)


@pytest.mark.parametrize("seed", range(5))
def test_locality_quotas_properties(seed):
    rng = np.random.default_rng(50 + seed)
    layout = ExpertLayout(num_experts=6, num_gpus=4, slots_per_gpu=3, gpus_per_node=2)
    # Loads divisible by the node count: the even per-node origin is then integral.
    loads = 2.0 * rng.integers(1, 40, layout.num_experts)
    phy2log = random_placement(rng, layout.num_experts, layout.num_gpus, layout.slots_per_gpu)
    gpu_of_slot, node_of_gpu = layout.gpu_of_slot, layout.node_of_gpu
    node_of_slot = node_of_gpu[gpu_of_slot]
    flow = solve_quotas(loads, phy2log, gpu_of_slot, layout.num_gpus)
    opt = flow.max_load
    cap = opt * (1 + 1e-12)
    quota = locality_quotas(loads, phy2log, gpu_of_slot, node_of_gpu, cap)
    assert np.all(quota >= -1e-12)
    assert np.bincount(phy2log, weights=quota, minlength=layout.num_experts) == pytest.approx(loads, abs=1e-9)
    gpu_load = np.bincount(gpu_of_slot, weights=quota, minlength=layout.num_gpus)
    assert gpu_load.max() <= cap * (1 + 1e-9)
    cross = cross_node_tokens(loads, phy2log, quota, node_of_slot, 2)
    assert cross <= cross_node_tokens(loads, phy2log, flow.quota, node_of_slot, 2) + 1e-6
    assert cross == pytest.approx(lp_min_cross(loads, phy2log, gpu_of_slot, node_of_gpu, cap), abs=1e-6)
    # A larger cap never increases cross-node tokens.
    previous = cross
    for factor in (1.1, 1.5, 3.0):
        q = locality_quotas(loads, phy2log, gpu_of_slot, node_of_gpu, opt * factor)
        assert np.bincount(gpu_of_slot, weights=q, minlength=layout.num_gpus).max() <= opt * factor * (1 + 1e-9)
        c = cross_node_tokens(loads, phy2log, q, node_of_slot, 2)
        assert c <= previous + 1e-6
        previous = c
    # Below the min-max optimum there are no quotas.
    with pytest.raises(ValueError):
        locality_quotas(loads, phy2log, gpu_of_slot, node_of_gpu, opt - 1)


def test_locality_quotas_odd_loads_counterexample():
    """Found by a 300-instance scan with odd integer loads: the locality quotas at the min-max
    cap used to cross more tokens (59) than the flow quotas (58), when node shares of an odd
    expert were rounded to whole tokens (fixed: loads are scaled by the node count)."""
    layout = ExpertLayout(num_experts=6, num_gpus=4, slots_per_gpu=4, gpus_per_node=2)
    loads = np.array([36.0, 23.0, 21.0, 31.0, 36.0, 25.0])
    phy2log = np.array([2, 0, 3, 5, 1, 1, 1, 4, 5, 0, 1, 2, 4, 5, 4, 0])
    node_of_slot = layout.node_of_gpu[layout.gpu_of_slot]
    flow = solve_quotas(loads, phy2log, layout.gpu_of_slot, layout.num_gpus)
    quota = locality_quotas(loads, phy2log, layout.gpu_of_slot, layout.node_of_gpu, flow.max_load)
    assert cross_node_tokens(loads, phy2log, quota, node_of_slot, 2) <= \
        cross_node_tokens(loads, phy2log, flow.quota, node_of_slot, 2) + 1e-6


# =========================================================================================
# expert_placement: exact references and the heuristic
# =========================================================================================


@pytest.mark.parametrize("case", range(15))
def test_milp_matches_brute_force(case):
    w, layout = tiny_layouts(15, seed=21)[case]
    brute, brute_p = brute_force_layer(w, layout)
    check_placement(brute_p, layout)
    assert brute == pytest.approx(solve_quotas(w, brute_p, layout.gpu_of_slot, layout.num_gpus).max_load)
    res = solve_layer_milp(w, layout)
    assert res.optimal
    assert res.max_load == pytest.approx(brute, abs=1e-6)
    assert res.gap == pytest.approx(0.0, abs=1e-9)
    check_placement(res.phy2log, layout)
    # The MILP's placement achieves its value with flow quotas.
    assert solve_quotas(w, res.phy2log, layout.gpu_of_slot, layout.num_gpus).max_load == pytest.approx(brute, abs=1e-6)
    assert lp_lower_bound(w, layout) <= brute + 1e-9


def test_milp_hint_keeps_heuristic_value():
    w, layout = tiny_layouts(1, seed=5)[0]
    plan = plan_layer(w[None], layout)
    res = solve_layer_milp(w, layout, hint=plan.phy2log)
    assert res.optimal
    assert res.max_load <= plan.ratio * w.sum() / layout.num_gpus + 1e-6


def _worst_flow(scenarios, phy2log, layout) -> float:
    """Busiest/mean in the worst scenario, quotas re-planned per scenario (real-time)."""
    from solvers.experts.layout import layout_quotas
    return max(layout_quotas(x, phy2log, layout).max_load * layout.num_gpus / x.sum()
               for x in scenarios if x.sum() > 0)


def _brute_force_robust(scenarios, layout) -> float:
    """Every placement (multisets of S experts per GPU, GPUs unordered) by its worst scenario."""
    E, G, S = layout.num_experts, layout.num_gpus, layout.slots_per_gpu
    gpu_sets = list(itertools.combinations_with_replacement(range(E), S))
    best = math.inf
    for combo in itertools.combinations_with_replacement(range(len(gpu_sets)), G):
        phy2log = np.array([e for i in combo for e in gpu_sets[i]], dtype=np.int64)
        if np.unique(phy2log).shape[0] == E:
            best = min(best, _worst_flow(scenarios, phy2log, layout))
    return best


def test_robust_placement_against_brute_force_over_scenarios():
    """Robust mode (four drifted scenarios, quotas re-planned per step) against every
    placement on 24 tiny layers: the score it reports is its placement's true worst scenario,
    within 5% of the best placement's (measured: one layer 4.8% off, every other within
    1.1%; mean under 0.5%)."""
    rng = np.random.default_rng(5)
    gaps = []
    for w, layout in tiny_layouts(24, seed=41):
        scenarios = np.stack([w * rng.lognormal(0, 0.3, size=w.size) for _ in range(4)])
        got = plan_layer(scenarios, layout)
        check_placement(got.phy2log, layout)
        worst = _worst_flow(scenarios, got.phy2log, layout)
        assert got.ratio == pytest.approx(worst, rel=1e-9)
        best = _brute_force_robust(scenarios, layout)
        assert got.lower_bound_ratio <= best + 1e-9 <= worst + 2e-9
        gaps.append(worst / best - 1)
    assert max(gaps) <= 0.05 and float(np.mean(gaps)) <= 0.005


def test_time_limited_milp_is_the_same_every_run():
    """A solve cut short by its budget (deterministic time, not wall time) returns the same
    placement, value and bound on every run, whatever the machine's load, with its gap."""
    rng = np.random.default_rng(3)
    layout = ExpertLayout(24, 6, 5, 3)
    w = np.maximum(np.round(rng.lognormal(4, 1.2, size=24)), 1)
    runs = [solve_layer_milp(w, layout, time_limit_s=0.05) for _ in range(3)]
    assert not runs[0].optimal and not runs[0].wall_clock_stopped and runs[0].gap > 0
    for r in runs[1:]:
        assert np.array_equal(r.phy2log, runs[0].phy2log)
        assert (r.max_load, r.bound) == (runs[0].max_load, runs[0].bound)


@pytest.mark.parametrize("case", range(60))
def test_heuristic_within_two_percent_of_brute_force(case):
    w, layout = tiny_layouts(60, seed=31)[case]
    brute, _ = brute_force_layer(w, layout)
    plan = plan_layer(w[None], layout)
    check_placement(plan.phy2log, layout)
    achieved = plan.ratio * w.sum() / layout.num_gpus
    assert achieved <= 1.02 * brute + 1e-9, (w.tolist(), layout)
    assert achieved >= brute * (1 - 1e-9)


# Counterexamples found outside the seeded set above (seed 35 case 29 of ``tiny_layouts``, and a
# scan of 1200 further instances: 9 beyond 2 %, all at E=5, G=3, S=2). The optimum pairs two
# light experts on one GPU and splits the heaviest over the other two. In both cases one slot
# swap reaches the optimum, but it moves a replica off the *second* GPU of the binding set
# (loads 220/220/182 and 195/194/113), while the local search only tries swaps out of the
# busiest binding GPU. Fixed: swaps now start from the busiest GPUs of the binding set, ranked
# by the binding GPU's new load only (the other GPU may shed replicated load through the flow).
HEURISTIC_MISSES = [
    ([280.0, 125.0, 35.0, 9.0, 173.0], (5, 3, 2)),  # heuristic 220, optimum 208 (+5.8 %)
    ([31.0, 268.0, 82.0, 7.0, 114.0], (5, 3, 2)),   # heuristic 195, optimum 179 (+8.9 %)
]


@pytest.mark.parametrize("loads,shape", HEURISTIC_MISSES)
def test_heuristic_known_misses(loads, shape):
    w, layout = np.array(loads), ExpertLayout(*shape)
    brute, _ = brute_force_layer(w, layout)
    assert plan_layer(w[None], layout).ratio * w.sum() / layout.num_gpus <= 1.02 * brute + 1e-9


def test_lp_lower_bound_definition():
    rng = np.random.default_rng(9)
    for _ in range(20):
        E, G = int(rng.integers(2, 12)), int(rng.integers(1, 6))
        layout = ExpertLayout(E, G, -(-E // G) + int(rng.integers(0, 2)))
        w = rng.lognormal(2.0, 1.5, E)
        bound = lp_lower_bound(w, layout)
        assert bound >= w.sum() / G * (1 - 1e-12)
        # Replica-count feasibility at the bound, and infeasibility just below it (unless mean).
        assert np.ceil(w / bound * (1 - 1e-9)).clip(min=1).sum() <= layout.num_slots
        if bound > w.sum() / G * (1 + 1e-6):
            assert np.ceil(w / (bound * (1 - 1e-6))).clip(min=1).sum() > layout.num_slots


# =========================================================================================
# expert_placement: medium instances, robust mode, helpers
# =========================================================================================


MEDIUM = [(64, 16, 5), (64, 32, 2)]


def _medium_loads(E, seed=0):
    rng = np.random.default_rng(seed)
    return np.round(rng.lognormal(5.0, 1.0, E)) + 1


@pytest.mark.parametrize("E,G,S", MEDIUM)
def test_plan_layer_valid_medium(E, G, S):
    layout = ExpertLayout(E, G, S)
    w = _medium_loads(E)
    plan = plan_layer(w[None], layout)
    check_placement(plan.phy2log, layout)
    check_split(plan.phy2log, plan.split, w)
    assert plan.ratio >= plan.lower_bound_ratio - 1e-9
    assert plan.lower_bound_ratio == pytest.approx(
        min(lp_lower_bound(w, layout) / (w.sum() / G), plan.ratio), rel=REL)
    assert plan.ratio == pytest.approx(worst_ratio(w[None], plan.phy2log, plan.split, G), rel=REL)
    # The split is the optimal quota split of the returned placement.
    flow = solve_quotas(w, plan.phy2log, layout.gpu_of_slot, G)
    assert plan.ratio == pytest.approx(flow.max_load / (w.sum() / G), rel=1e-9)
    loads = static_gpu_loads(w, plan.phy2log, plan.split, G)
    assert loads.sum() == pytest.approx(w.sum(), rel=REL)
    # Never worse than the EPLB-like replication placement with its own optimal quotas.
    rep = replication_placement(w, layout)
    assert flow.max_load <= solve_quotas(w, rep, layout.gpu_of_slot, G).max_load + 1e-9
    # Deterministic.
    again = plan_layer(w[None], layout)
    assert np.array_equal(again.phy2log, plan.phy2log)
    assert np.array_equal(again.split, plan.split)
    assert again.ratio == plan.ratio


@pytest.mark.parametrize("E,G,S", MEDIUM)
def test_plan_layer_robust_medium(E, G, S):
    layout = ExpertLayout(E, G, S)
    w = _medium_loads(E, seed=1)
    scen = drift_scenarios(w, 0.2, 6, seed=0)
    mean_w = scen.mean(0)
    # Static quotas: the score is the static split's worst ratio over the scenarios.
    static = plan_layer(scen, layout, robust_quotas="static")
    check_placement(static.phy2log, layout)
    check_split(static.phy2log, static.split, mean_w)
    assert static.ratio == pytest.approx(worst_ratio(scen, static.phy2log, static.split, G), rel=REL)
    assert static.ratio >= static.lower_bound_ratio - 1e-9
    # Real-time quotas (default): the score is the worst per-scenario flow optimum, which the
    # returned static split (exact quotas of the mean load) can only match or exceed.
    rt = plan_layer(scen, layout)
    check_placement(rt.phy2log, layout)
    check_split(rt.phy2log, rt.split, mean_w)
    per_scenario = max(solve_quotas(x, rt.phy2log, layout.gpu_of_slot, G).max_load * G / x.sum() for x in scen)
    assert rt.ratio == pytest.approx(per_scenario, rel=1e-9)
    assert rt.ratio <= worst_ratio(scen, rt.phy2log, rt.split, G) * (1 + 1e-9)
    assert rt.ratio >= rt.lower_bound_ratio - 1e-9
    mean_flow = solve_quotas(mean_w, rt.phy2log, layout.gpu_of_slot, G)
    assert static_gpu_loads(mean_w, rt.phy2log, rt.split, G).max() == pytest.approx(mean_flow.max_load, rel=1e-6)
    # Deterministic.
    again = plan_layer(scen, layout)
    assert np.array_equal(again.phy2log, rt.phy2log) and np.array_equal(again.split, rt.split)
    with pytest.raises(ValueError):
        plan_layer(scen, layout, robust_quotas="bogus")


def test_plan_layers_shapes_and_consistency():
    layout = ExpertLayout(12, 4, 4)
    rng = np.random.default_rng(4)
    loads = rng.integers(1, 100, (3, 12)).astype(float)
    calls = []
    plans = plan_layers(loads, layout, progress=lambda: calls.append(1))
    assert len(plans) == 3 and len(calls) == 3
    for layer, plan in enumerate(plans):
        single = plan_layer(loads[layer][None], layout)
        assert np.array_equal(plan.phy2log, single.phy2log)
        assert plan.ratio == single.ratio
    scen = drift_scenarios(loads, 0.2, 3, seed=1)
    robust = plan_layers(scen, layout)
    assert len(robust) == 3
    for layer, plan in enumerate(robust):
        check_placement(plan.phy2log, layout)
        check_split(plan.phy2log, plan.split, scen[:, layer].mean(0))


def _cross_node(w: np.ndarray, plan, layout: ExpertLayout) -> float:
    """Cross-node tokens of a plan's static split (``cross_node_tokens``' dispatch model)."""
    node_of_slot = layout.node_of_gpu[layout.gpu_of_slot]
    nodes = int(layout.node_of_gpu.max()) + 1
    return cross_node_tokens(w, plan.phy2log, w[plan.phy2log] * plan.split, node_of_slot, nodes)


def test_plan_layer_locality_slack():
    layout = ExpertLayout(16, 8, 3, gpus_per_node=4)
    w = _medium_loads(16, seed=3)
    base = plan_layer(w[None], layout)
    tight = plan_layer(w[None], layout, locality_slack=0.0)
    local = plan_layer(w[None], layout, locality_slack=0.1)
    check_placement(local.phy2log, layout)
    check_split(local.phy2log, local.split, w)
    assert local.ratio <= base.ratio * 1.1 * (1 + 1e-9)
    assert local.ratio <= tight.ratio * 1.1 * (1 + 1e-9)
    assert local.ratio == pytest.approx(worst_ratio(w[None], local.phy2log, local.split, 8), rel=REL)
    # Same candidates, a looser cap: the slack can only remove cross-node tokens.
    assert _cross_node(w, local, layout) <= _cross_node(w, tight, layout) + 1e-6


def test_plan_layer_locality_slack_cuts_cross_node_tokens():
    """Two one-GPU nodes, two slots each, loads (60, 30, 10): the only placement at ratio 1
    (every other one is >= 1.2) puts expert 0 on both GPUs with experts 1 and 2 beside it, and
    balance forces expert 0's quotas to 20 / 40 (GPU loads 50 / 50). Tokens originate evenly on
    the nodes, so 10 of expert 0's, 15 of expert 1's and 5 of expert 2's cross: 30. A 10 % slack
    (busiest <= 55) lets expert 0 serve 25 on the node with expert 1: only 25 cross. Without the
    slack (None, or 0: the most local of the best-balanced quotas) that cannot happen."""
    layout = ExpertLayout(3, 2, 2, gpus_per_node=1)
    w = np.array([60.0, 30.0, 10.0])
    slack = 0.1
    without = [plan_layer(w[None], layout), plan_layer(w[None], layout, locality_slack=0.0)]
    local = plan_layer(w[None], layout, locality_slack=slack)
    check_placement(local.phy2log, layout)
    check_split(local.phy2log, local.split, w)
    best = min(p.ratio for p in without)
    assert best == pytest.approx(1.0, rel=REL)
    for plan in without:
        assert _cross_node(w, local, layout) < _cross_node(w, plan, layout) - 1.0  # whole tokens
    # Balance stays within the slack, measured independently of the solver's own ratio.
    gpu_load = static_gpu_loads(w, local.phy2log, local.split, layout.num_gpus)
    assert gpu_load.max() / gpu_load.mean() <= best * (1 + slack) * (1 + 1e-9)
    assert local.ratio <= best * (1 + slack) * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_construction_helpers_valid(seed):
    rng = np.random.default_rng(60 + seed)
    E, G = int(rng.integers(8, 30)), int(rng.integers(2, 9))
    layout = ExpertLayout(E, G, -(-E // G) + int(rng.integers(0, 3)), gpus_per_node=4)
    w = np.round(rng.lognormal(3.0, 1.0, E)) + 1
    counts = greedy_counts(w, layout.num_slots)
    assert counts.min() >= 1 and counts.sum() == layout.num_slots
    rep = replication_placement(w, layout)
    check_placement(rep, layout)
    assert np.bincount(rep, minlength=E).tolist() == counts.tolist()
    order = interleaved_gpu_order(layout)
    assert sorted(order.tolist()) == list(range(G))
    for h in (0, 1, 2, 4):
        p = chain_placement(w, layout, h, order)
        if p is not None:
            check_placement(p, layout)
    best, sol = improve_counts(w, layout, 10)
    check_placement(best, layout)
    assert sol.max_load <= solve_quotas(w, rep, layout.gpu_of_slot, G).max_load + 1e-9
    assert sol.max_load == pytest.approx(solve_quotas(w, best, layout.gpu_of_slot, G).max_load)


def test_interleaved_gpu_order_visits_nodes_round_robin():
    layout = ExpertLayout(8, 12, 1, gpus_per_node=4)
    order = interleaved_gpu_order(layout)
    assert order.tolist() == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]


def test_layout_validation():
    with pytest.raises(ValueError):
        ExpertLayout(10, 2, 4)
    with pytest.raises(ValueError):
        ExpertLayout(0, 2, 4)
    layout = ExpertLayout(5, 3, 2, gpus_per_node=2)
    assert layout.num_slots == 6
    assert layout.gpu_of_slot.tolist() == [0, 0, 1, 1, 2, 2]
    assert layout.node_of_gpu.tolist() == [0, 0, 1]


# =========================================================================================
# relabel_to_current, drift_scenarios
# =========================================================================================


def _moved(out: np.ndarray, cur: np.ndarray, G: int) -> int:
    S = out.shape[0] // G
    moved = 0
    for g in range(G):
        extra = Counter(out[g * S:(g + 1) * S].tolist()) - Counter(cur[g * S:(g + 1) * S].tolist())
        moved += sum(extra.values())
    return moved


def test_relabel_permuted_copy_moves_nothing():
    layout = ExpertLayout(24, 6, 5)
    w = _medium_loads(24, seed=2)
    p = plan_layer(w[None], layout).phy2log
    rng = np.random.default_rng(0)
    G, S = layout.num_gpus, layout.slots_per_gpu
    perm = rng.permutation(G)
    cur = p.reshape(G, S)[perm]
    cur = np.stack([rng.permutation(row) for row in cur]).ravel()
    out, moved = relabel_to_current(p, cur, G)
    assert moved == 0
    assert np.array_equal(out, cur)
    assert [sorted(r) for r in out.reshape(G, S).tolist()] == [sorted(r) for r in cur.reshape(G, S).tolist()]


def test_relabel_hand_example():
    new = np.array([0, 1, 2, 3])
    cur = np.array([2, 4, 0, 1])
    out, moved = relabel_to_current(new, cur, 2)
    assert out.tolist() == [2, 3, 0, 1]
    assert moved == 1 == _moved(out, cur, 2)


@pytest.mark.parametrize("seed", range(6))
def test_relabel_optimal_over_gpu_permutations(seed):
    rng = np.random.default_rng(80 + seed)
    G, S, E = int(rng.integers(2, 6)), int(rng.integers(1, 4)), 6
    new = rng.integers(0, E, G * S)
    cur = rng.integers(0, E, G * S)
    out, moved = relabel_to_current(new, cur, G)
    # Same GPU contents as the new plan, up to a GPU permutation.
    assert sorted(sorted(r) for r in out.reshape(G, S).tolist()) == sorted(sorted(r) for r in new.reshape(G, S).tolist())
    assert moved == _moved(out, cur, G)
    # Slots whose expert stays keep their current index.
    for g in range(G):
        o, c = out[g * S:(g + 1) * S], cur[g * S:(g + 1) * S]
        kept = sum((Counter(o.tolist()) & Counter(c.tolist())).values())
        assert int((o == c).sum()) == kept
    best = min(_moved(new.reshape(G, S)[list(pm)].ravel(), cur, G) for pm in itertools.permutations(range(G)))
    assert moved == best


def test_drift_scenarios_deterministic():
    loads = np.arange(1.0, 9.0)
    a = drift_scenarios(loads, 0.3, 5, seed=7)
    b = drift_scenarios(loads, 0.3, 5, seed=7)
    c = drift_scenarios(loads, 0.3, 5, seed=8)
    assert a.shape == (5, 8)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.array_equal(a[0], loads) and np.array_equal(c[0], loads)
    assert np.all(a > 0)
    assert np.array_equal(drift_scenarios(loads, 0.0, 4, seed=1), np.tile(loads, (4, 1)))
    layered = drift_scenarios(np.ones((3, 8)), 0.2, 4, seed=0)
    assert layered.shape == (4, 3, 8) and np.array_equal(layered[0], np.ones((3, 8)))


# =========================================================================================
# expert_groups: the two-slot group model, its search and the covering LP bound
# =========================================================================================


def _set_partitions(items: list[int], k: int):
    """Every partition of ``items`` into exactly ``k`` non-empty blocks."""
    if not items:
        if k == 0:
            yield []
        return
    if k == 0:
        return
    first, rest = items[0], items[1:]
    for part in _set_partitions(rest, k - 1):
        yield [[first]] + part
    for part in _set_partitions(rest, k):
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]


def _partition_optimum(w: np.ndarray, groups: int) -> float:
    """``min max_g L_g / (n_g - 1)`` over partitions into ``groups`` blocks of 2+ experts."""
    best = math.inf
    for part in _set_partitions(list(range(w.shape[0])), groups):
        if min(len(b) for b in part) >= 2:
            best = min(best, max(w[b].sum() / (len(b) - 1) for b in part))
    return best


def _two_slot_instances(count: int, seed: int, sizes=((4, 2), (5, 3), (6, 4), (6, 3), (7, 4))):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        E, G = sizes[i % len(sizes)]
        w = random_loads(rng, E, skewed=bool(i % 2))
        if w.sum() == 0:
            w[0] = 1.0
        out.append((w, ExpertLayout(E, G, 2)))
    return out


@pytest.mark.parametrize("case", range(20))
def test_group_model_is_exact_against_brute_force(case):
    """The module's theorem: with two slots per GPU the optimum busiest load equals the best
    partition into E - G groups of max L_g / (n_g - 1). The loads are integers and the brute
    force counts whole tokens, so it is that optimum rounded up (flow integrality)."""
    w, layout = _two_slot_instances(20, seed=41)[case]
    brute, _ = brute_force_layer(w, layout)
    best = _partition_optimum(w, layout.num_experts - layout.num_gpus)
    assert brute == math.ceil(best - 1e-9)


@pytest.mark.parametrize("seed", range(30))
def test_tree_gpus_carries_the_group_at_its_ratio(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    x = rng.lognormal(0.0, 1.2, n) * (rng.random(n) < 0.9)
    x[0] = max(x[0], 0.1)
    items = list(range(n))
    cap = x.sum() / (n - 1)
    gpus = tree_gpus(x, items, cap * (1 + 1e-12))
    assert len(gpus) == n - 1
    assert all(1 <= len(g) <= 2 and len(set(g)) == len(g) for g in gpus)
    assert sorted({e for g in gpus for e in g}) == items
    phy2log = np.array([e for g in gpus for e in (g if len(g) == 2 else g * 2)])
    flow = solve_quotas(x, phy2log, np.repeat(np.arange(n - 1), 2), n - 1)
    assert flow.max_load <= cap * (1 + 1e-6)


@pytest.mark.parametrize("case", range(40))
def test_search_groups_within_two_percent_of_the_partition_optimum(case):
    rng = np.random.default_rng(1000 + case)
    E = int(rng.integers(6, 11))
    groups = int(rng.integers(1, E // 2 + 1))
    w = rng.lognormal(0.0, 1.0, E)
    labels = search_groups(w, groups)
    assert np.bincount(labels, minlength=groups).min() >= 2
    best = _partition_optimum(w, groups)
    got = group_ratio(w, labels, groups)
    assert best * (1 - 1e-9) <= got <= 1.02 * best


@pytest.mark.parametrize("seed", range(40))
def test_cheapest_cover_matches_enumeration(seed):
    rng = np.random.default_rng(seed)
    units = rng.integers(-1500, 1000, 8)
    price = rng.uniform(-0.5, 1.0, 8)
    best = math.inf
    for k in range(1, 9):
        for s in itertools.combinations(range(8), k):
            if units[list(s)].sum() >= 1000:
                best = min(best, price[list(s)].sum())
    got, cover = _cheapest_cover(units, price)
    if math.isinf(best):
        assert math.isinf(got)
    else:
        assert got == pytest.approx(best, abs=1e-9)
        assert units[cover].sum() >= 1000 and price[cover].sum() == pytest.approx(got, abs=1e-9)


@pytest.mark.parametrize("case", range(20))
def test_covering_lp_bound_is_a_lower_bound(case):
    w, layout = _two_slot_instances(20, seed=43, sizes=((6, 3), (7, 4), (8, 5), (8, 4)))[case]
    groups = layout.num_experts - layout.num_gpus
    best = _partition_optimum(w, groups)
    lo = lp_lower_bound(w, layout)
    bound = covering_lp_bound(w, groups, lo, best * 1.05, tol=1e-4)
    assert lo * (1 - 1e-12) <= bound <= best * (1 + 1e-9)


def test_covering_lp_bound_beats_the_replica_bound_on_medium_experts():
    """Ten experts of load 0.75 on 6 GPUs: 4 groups of 2+ experts holding 10 experts include
    at least two pairs, each carrying 1.5 on one GPU, so the optimum is 1.5. The replica-count
    bound is only the mean, 1.25; the covering LP also needs two pair patterns to reach 4 bins
    (``2 a + 3 b <= 10`` and ``a + b >= 4`` force ``a >= 2``), so it proves 1.5 up to its
    surplus grid of 1/1000 (rounded in the bound's favour of validity, so slightly below)."""
    w = np.full(10, 0.75)
    layout = ExpertLayout(10, 6, 2)
    assert _partition_optimum(w, 4) == pytest.approx(1.5)
    assert lp_lower_bound(w, layout) == pytest.approx(1.25)
    bound = covering_lp_bound(w, 4, 1.25, 1.5, tol=1e-4)
    assert 1.49 <= bound <= 1.5


def test_group_placement_realises_the_group_ratio():
    rng = np.random.default_rng(3)
    layout = ExpertLayout(64, 40, 2)
    w = rng.lognormal(4.0, 1.0, 64)
    phy2log = group_placement(w, layout, interleaved_gpu_order(layout))
    check_placement(phy2log, layout)
    labels = search_groups(w, 24)
    flow = solve_quotas(w, phy2log, layout.gpu_of_slot, layout.num_gpus)
    assert flow.max_load == pytest.approx(group_ratio(w, labels, 24), rel=1e-6)
    assert group_placement(w, ExpertLayout(64, 16, 5), interleaved_gpu_order(layout)) is None


@pytest.mark.parametrize("seed", range(10))
def test_groups_of_placement_never_above_the_placement(seed):
    """Merging a placement's components into E - G groups keeps the busiest load at or below
    the placement's flow optimum, and the search started there never ends above it."""
    rng = np.random.default_rng(seed)
    E = int(rng.integers(12, 40))
    G = int(rng.integers(E // 2 + 1, E))
    layout = ExpertLayout(E, G, 2)
    w = rng.lognormal(3.0, 1.0, E)
    phy2log = replication_placement(w, layout)
    flow = solve_quotas(w, phy2log, layout.gpu_of_slot, G).max_load
    labels = groups_of_placement(w, phy2log, E - G)
    assert np.bincount(labels, minlength=E - G).min() >= 2
    assert group_ratio(w, labels, E - G) <= flow * (1 + 1e-6)
    searched = search_groups(w, E - G, start=labels)
    assert group_ratio(w, searched, E - G) <= group_ratio(w, labels, E - G) * (1 + 1e-12)
