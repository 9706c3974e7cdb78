"""The DP batch-share solver (solvers.batch_shares) against brute force, and its validator."""
from __future__ import annotations

import random

import pytest

from solvers.batch_shares import (InfeasibleShares, ShareProblem, brute_force_shares,
                                  check_shares, solve_shares)


def _random_problem(rng: random.Random) -> ShareProblem:
    replicas = rng.randint(1, 4)
    times = tuple(rng.choice([1.0, 1.5, 2.0, 3.17, 0.31, rng.uniform(0.1, 5.0)])
                  for _ in range(replicas))
    total = rng.randint(1, 12)
    caps = None
    if rng.random() < 0.5:  # memory-limited replicas, some unlimited
        caps = tuple(rng.choice([None, rng.randint(0, 6)]) for _ in range(replicas))
    return ShareProblem(times, total, caps)


def _smallest_increments(problem: ShareProblem) -> tuple[int, ...]:
    """The split the module docstring defines, built another way: every replica's first
    micro-batch, then the ``total - R`` smallest increments ``k * micro_batch_s[r]`` (k >= 2,
    within the replica's limit), ties to the lowest replica index."""
    times, caps = problem.micro_batch_s, problem.max_shares or (None,) * len(problem.micro_batch_s)
    increments = sorted((k * t, r) for r, (t, cap) in enumerate(zip(times, caps))
                        for k in range(2, (cap if cap is not None else problem.total) + 1))
    shares = [1] * len(times)
    for _, r in increments[:problem.total - len(times)]:
        shares[r] += 1
    return tuple(shares)


@pytest.mark.parametrize("seed", range(300))
def test_solver_equals_brute_force(seed: int) -> None:
    problem = _random_problem(random.Random(seed))
    try:
        expected = brute_force_shares(problem)
    except InfeasibleShares:
        with pytest.raises(InfeasibleShares):
            solve_shares(problem)
        return
    got = solve_shares(problem)
    assert check_shares(problem, got.shares) == got.bottleneck_s
    assert got.bottleneck_s == pytest.approx(expected.bottleneck_s, rel=1e-12)
    # the shares themselves (they decide the plan's bytes): the documented split among equal
    # bottlenecks, built another way
    assert got.shares == _smallest_increments(problem)


def test_large_batch_matches_the_slow_greedy() -> None:
    """The fill below the continuous bound changes nothing: it equals adding one at a time."""
    times, total = (1.0, 3.17 / 1.0, 1.3, 0.77), 1000
    got = solve_shares(ShareProblem(times, total))
    shares = [1] * len(times)
    for _ in range(total - len(times)):
        r = min(range(len(times)), key=lambda i: ((shares[i] + 1) * times[i], i))
        shares[r] += 1
    assert got.bottleneck_s == max(k * t for k, t in zip(shares, times))


@pytest.mark.parametrize("times, total, caps, shares", [
    ((1.0, 1.0), 4, None, (2, 2)),             # equal speeds: an even split
    ((3.0, 1.0), 8, None, (2, 6)),             # three times faster: three times the share
    ((3.0, 1.0), 8, (None, 5), (3, 5)),        # the fast replica's memory holds only 5
    ((1.0, 0.01), 3, None, (1, 2)),            # every replica takes at least one
])
def test_known_splits(times, total, caps, shares) -> None:
    assert solve_shares(ShareProblem(times, total, caps)).shares == shares


@pytest.mark.parametrize("times, total, caps", [
    ((1.0, 1.0, 1.0), 2, None),     # fewer micro-batches than replicas
    ((1.0, 1.0), 9, (4, 4)),        # the limits hold 8
    ((1.0, 1.0), 4, (0, None)),     # a replica that can hold none
])
def test_infeasible(times, total, caps) -> None:
    with pytest.raises(InfeasibleShares):
        solve_shares(ShareProblem(times, total, caps))


def test_validator_refuses_bad_splits() -> None:
    problem = ShareProblem((1.0, 2.0), 5, (None, 2))
    for bad in [(3, 1, 1), (4, 2), (5, 0), (2, 3)]:
        with pytest.raises(ValueError):
            check_shares(problem, bad)
    assert check_shares(problem, (3, 2)) == 4.0
