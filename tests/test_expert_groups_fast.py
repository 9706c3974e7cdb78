"""Tests of the two-slot group search (``solvers.experts.groups``): the starts, the tabu search,
the two-group descent and ``search_groups`` as a whole, each against an independent reference.

* Validity: every start and every search result is a partition into exactly ``num_groups``
  groups of 2+ experts, also with zero loads and at the smallest shapes.
* ``_cover_groups``: every group it closes carries its load at the target (``L <= (n-1) T``).
* ``_tabu`` and ``_regroup_pairs`` never end above their start; ``_regroup_pairs`` ends at a
  local optimum, checked by enumerating every split of the busiest group with every other.
* ``search_groups`` against the brute-force partition optimum on small instances, and
  determinism (same input, same labels; same plan, byte-identical ``phy2log``).
* On eight real EP144 layers (SGLang trace, 256 experts, 144 GPUs, 2 slots) the plans are no
  worse on the mean than the previous search's (values recorded before the change).
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from solvers.experts import ExpertLayout, group_ratio, plan_layers, search_groups
from test_expert_solvers import _partition_optimum  # the brute-force reference, shared
from solvers.experts.groups import (_cover_groups, _covering_start, _paired_replicas,
                                    _regroup_pairs, _tabu)

TRACE = (Path(__file__).resolve().parents[1]
         / "benchmarks/data/moe_traces/sglang/decode_in1000out1000.json")


def _valid(labels: np.ndarray, num_experts: int, num_groups: int) -> bool:
    labels = np.asarray(labels)
    return (labels.shape == (num_experts,) and labels.min() >= 0 and labels.max() == num_groups - 1
            and np.bincount(labels, minlength=num_groups).min() >= 2)


def _instances(count: int, seed: int, sizes=(4, 5, 6, 7, 8, 9, 10)):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        E = sizes[i % len(sizes)]
        groups = int(rng.integers(1, E // 2 + 1))
        w = rng.lognormal(0.0, 1.2, E) * (rng.random(E) < 0.85)  # some experts idle
        if w.sum() == 0:
            w[0] = 1.0
        out.append((w, groups))
    return out


def _scaled(w: np.ndarray, groups: int) -> np.ndarray:
    """Loads in the units the private helpers use: mean GPU load 1."""
    return w / w.sum() * (w.shape[0] - groups)


@pytest.mark.parametrize("case", range(40))
def test_starts_are_partitions(case):
    w, groups = _instances(40, seed=7, sizes=(4, 6, 9, 16, 33, 64))[case]
    y = _scaled(w, groups)
    paired = _paired_replicas(y, groups)
    assert _valid(paired, w.shape[0], groups)
    cover = _covering_start(y, groups, group_ratio(y, paired, groups))
    assert cover is None or _valid(cover, w.shape[0], groups)


@pytest.mark.parametrize("seed", range(20))
def test_cover_groups_close_at_the_target(seed):
    rng = np.random.default_rng(seed)
    E = int(rng.integers(6, 80))
    groups = int(rng.integers(1, E // 2 + 1))
    y = _scaled(rng.lognormal(0.0, 1.0, E), groups)
    ys = sorted(y.tolist())
    cap = float(rng.uniform(1.0, 2.0))
    built = _cover_groups(ys, cap, groups, build=True)
    if not built:
        return
    assert sorted(i for g in built for i in g) == list(range(E))
    # All groups but the last (which takes the unclosed rest) carry their load at ``cap``.
    for g in built[:-1]:
        assert len(g) >= 2 and sum(ys[i] for i in g) <= (len(g) - 1) * cap * (1 + 1e-9)


@pytest.mark.parametrize("case", range(30))
def test_tabu_and_descent_never_end_above_their_start(case):
    w, groups = _instances(30, seed=11, sizes=(8, 12, 20, 40))[case]
    y = _scaled(w, groups)
    start = _paired_replicas(y, groups)
    r0 = group_ratio(y, start, groups)
    found, r = _tabu(y, start, groups, 100, np.random.default_rng(case))
    assert _valid(found, w.shape[0], groups)
    assert group_ratio(y, found, groups) <= r0 * (1 + 1e-12)
    assert r == pytest.approx(group_ratio(y, found, groups), rel=1e-9)
    polished = _regroup_pairs(y, found, groups)
    assert _valid(polished, w.shape[0], groups)
    assert group_ratio(y, polished, groups) <= group_ratio(y, found, groups) * (1 + 1e-12)


@pytest.mark.parametrize("case", range(20))
def test_descent_ends_at_a_two_group_local_optimum(case):
    """No split of the busiest group together with any other group (up to the size limit)
    puts both below the busiest ratio: checked by enumerating the splits here."""
    rng = np.random.default_rng(100 + case)
    E = int(rng.integers(10, 24))
    groups = int(rng.integers(3, E // 2 + 1))
    y = _scaled(rng.lognormal(0.0, 1.0, E), groups)
    labels = _regroup_pairs(y, _paired_replicas(y, groups), groups)
    load = np.bincount(labels, weights=y, minlength=groups)
    size = np.bincount(labels, minlength=groups)
    ratio = load / (size - 1)
    g = int(np.argmax(ratio))
    for h in range(groups):
        union = np.flatnonzero((labels == g) | (labels == h))
        if h == g or union.size > 10:
            continue
        for k in range(2, union.size - 1):
            for part in itertools.combinations(union.tolist(), k):
                rest = np.setdiff1d(union, part)
                worst = max(y[list(part)].sum() / (k - 1), y[rest].sum() / (rest.size - 1))
                assert worst >= ratio[g] * (1 - 1e-9)


@pytest.mark.parametrize("case", range(42))
def test_search_groups_reaches_the_partition_optimum(case):
    """At most 10 experts: within 0.5 % of the brute-force optimum always, and exactly on it
    in at least 40 of these 42 seeded instances (the aggregate test below; today all 42)."""
    w, groups = _instances(42, seed=3)[case]
    labels = search_groups(w, groups)
    assert _valid(labels, w.shape[0], groups)
    best = _partition_optimum(w, groups)
    assert best * (1 - 1e-9) <= group_ratio(w, labels, groups) <= best * 1.005


def test_search_groups_is_usually_exact_on_small_instances():
    hits = 0
    for w, groups in _instances(42, seed=3):
        found = group_ratio(w, search_groups(w, groups), groups)
        hits += found <= _partition_optimum(w, groups) * (1 + 1e-9)
    assert hits >= 40


def test_search_groups_handles_degenerate_loads():
    assert _valid(search_groups(np.zeros(6), 2), 6, 2)
    assert _valid(search_groups(np.array([5.0, 0, 0, 0]), 2), 4, 2)
    assert _valid(search_groups(np.ones(8), 4), 8, 4)
    assert group_ratio(np.ones(8), search_groups(np.ones(8), 4), 4) == pytest.approx(2.0)


def test_search_groups_is_deterministic():
    rng = np.random.default_rng(5)
    w = rng.lognormal(3.0, 1.0, 96)
    assert np.array_equal(search_groups(w, 40), search_groups(w, 40))


def _trace_layers(layers):
    counts = np.array(json.loads(TRACE.read_text())["logical_count"], dtype=float)
    counts = counts[counts.sum(1) > 0]
    return counts[list(layers)]


# The previous search's ratios on this trace's layers 0-7 (tabu from two starts, 300 steps per
# target, plus the chain and replica-count candidates and the swap search; recorded before the
# change). Per layer the new search may land either side; on the mean it must not be worse.
PREVIOUS_EP144 = [1.147555, 1.132813, 1.117051, 1.084773, 1.254944, 1.099560, 1.198012, 1.034526]


@pytest.mark.skipif(not TRACE.exists(), reason="SGLang trace not present")
def test_ep144_no_worse_than_the_previous_search_and_deterministic():
    layout = ExpertLayout(256, 144, 2)
    loads = _trace_layers(range(len(PREVIOUS_EP144)))
    first = plan_layers(loads, layout)
    second = plan_layers(loads, layout)
    for a, b in zip(first, second):
        assert a.phy2log.tobytes() == b.phy2log.tobytes()
        assert a.split.tobytes() == b.split.tobytes()
        assert np.bincount(a.phy2log, minlength=256).min() >= 1
    assert np.mean([p.ratio for p in first]) <= np.mean(PREVIOUS_EP144) + 1e-6
