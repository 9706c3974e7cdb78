"""Integer micro-batch shares of data-parallel replicas that run at different speeds.

The problem
-----------
``R`` data-parallel replicas share ``total`` micro-batches per step. Replica ``r`` takes
``micro_batch_s[r]`` seconds per micro-batch (its own GPUs' pace) and may hold at most
``max_shares[r]`` micro-batches (a memory limit; ``None``: no limit). Choose integers
``shares[r]`` with ``1 <= shares[r] <= max_shares[r]`` and ``sum(shares) == total`` that
minimise the bottleneck ``max_r shares[r] * micro_batch_s[r]``: the gradient sync is lockstep,
so the step waits for the replica that finishes last (uneven per-replica batches on mixed GPU
types: HexiScale, Yan et al. 2024; Cephalo, Guo et al. 2024, batches by each GPU's
throughput; Sailor, Strati et al. SOSP'25, arXiv:2504.17096).

The algorithm (:func:`solve_shares`)
------------------------------------
Greedy increments: every replica starts at one micro-batch; each further micro-batch goes to
the replica whose bottleneck after taking it, ``(shares[r] + 1) * micro_batch_s[r]``, is the
smallest (lowest index on ties). The chosen increments are the ``total - R`` smallest of all
increments ``k * micro_batch_s[r]`` (``2 <= k <= max_shares[r]``), since each replica's
increments grow with ``k``; so the final bottleneck, the largest chosen increment or a
replica's first micro-batch, is the least possible. To stay fast on large batches, replicas
are first filled to the increments strictly below the continuous bound
``total / sum(1 / micro_batch_s)``, which the greedy would take anyway.
:func:`brute_force_shares` enumerates every split for the tests.
"""
from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass

__all__ = ["InfeasibleShares", "ShareProblem", "Shares", "brute_force_shares", "check_shares",
           "solve_shares"]

BRUTE_FORCE_MAX_SPLITS = 2_000_000


class InfeasibleShares(ValueError):
    """No split satisfies the bounds (the message says which)."""


@dataclass(frozen=True)
class ShareProblem:
    """``micro_batch_s[r]``: seconds per micro-batch of replica r (> 0); ``total``: the step's
    micro-batches over all replicas; ``max_shares[r]``: the most replica r may take (None: no
    limit, or no limits at all)."""

    micro_batch_s: tuple[float, ...]
    total: int
    max_shares: tuple[int | None, ...] | None = None

    def __post_init__(self) -> None:
        if not self.micro_batch_s:
            raise ValueError("micro_batch_s: at least one replica, got none")
        if min(self.micro_batch_s) <= 0 or not all(map(math.isfinite, self.micro_batch_s)):
            raise ValueError(f"micro_batch_s: finite times > 0, got {self.micro_batch_s}")
        if self.max_shares is not None and len(self.max_shares) != len(self.micro_batch_s):
            raise ValueError(f"max_shares: {len(self.micro_batch_s)} entries, one per replica, "
                             f"got {len(self.max_shares)}")

    def cap(self, replica: int) -> int:
        """The most micro-batches ``replica`` may take (``total`` when unlimited)."""
        limit = None if self.max_shares is None else self.max_shares[replica]
        return self.total if limit is None else min(limit, self.total)


@dataclass(frozen=True)
class Shares:
    """Micro-batches per replica and the bottleneck ``max shares[r] * micro_batch_s[r]``."""

    shares: tuple[int, ...]
    bottleneck_s: float


def check_shares(problem: ShareProblem, shares: tuple[int, ...]) -> float:
    """The bottleneck of ``shares``, after checking it solves ``problem`` (ValueError if not)."""
    if len(shares) != len(problem.micro_batch_s):
        raise ValueError(f"{len(shares)} shares for {len(problem.micro_batch_s)} replicas")
    if sum(shares) != problem.total:
        raise ValueError(f"shares sum to {sum(shares)}, expected {problem.total}")
    for r, k in enumerate(shares):
        if not 1 <= k <= problem.cap(r):
            raise ValueError(f"replica {r}: share {k} outside [1, {problem.cap(r)}]")
    return max(k * t for k, t in zip(shares, problem.micro_batch_s))


def _check_feasible(problem: ShareProblem) -> None:
    replicas = len(problem.micro_batch_s)
    if problem.total < replicas:
        raise InfeasibleShares(f"{problem.total} micro-batches for {replicas} replicas: each "
                               "needs at least one")
    room = sum(problem.cap(r) for r in range(replicas))
    if min(problem.cap(r) for r in range(replicas)) < 1 or room < problem.total:
        raise InfeasibleShares(f"the replicas' limits hold {room} micro-batches, fewer than the "
                               f"{problem.total} to place (or a limit is below 1)")


def solve_shares(problem: ShareProblem) -> Shares:
    """The split that minimises the bottleneck (module docstring); raises
    :class:`InfeasibleShares` when none exists."""
    # Step 1: feasibility
    _check_feasible(problem)
    times = problem.micro_batch_s
    # Step 2: fill each replica with its increments below the continuous bound
    bound = problem.total / math.fsum(1.0 / t for t in times)
    shares = [max(1, min(problem.cap(r), math.floor(bound / t))) for r, t in enumerate(times)]
    for r, t in enumerate(times):
        while shares[r] > 1 and shares[r] * t >= bound:
            shares[r] -= 1
    if sum(shares) > problem.total:
        shares = [1] * len(times)
    # Step 3: the rest one at a time, each to the replica it delays least
    heap = [((k + 1) * t, r) for r, (k, t) in enumerate(zip(shares, times))
            if k < problem.cap(r)]
    heapq.heapify(heap)
    for _ in range(problem.total - sum(shares)):
        _, r = heapq.heappop(heap)
        shares[r] += 1
        if shares[r] < problem.cap(r):
            heapq.heappush(heap, ((shares[r] + 1) * times[r], r))
    result = tuple(shares)
    return Shares(result, check_shares(problem, result))


def brute_force_shares(problem: ShareProblem) -> Shares:
    """Every split, the smallest bottleneck (first found on ties); small problems only."""
    _check_feasible(problem)
    replicas = len(problem.micro_batch_s)
    if math.comb(problem.total - 1, replicas - 1) > BRUTE_FORCE_MAX_SPLITS:
        raise ValueError("too many splits to enumerate")
    best: Shares | None = None
    for head in itertools.product(*(range(1, problem.cap(r) + 1) for r in range(replicas - 1))):
        last = problem.total - sum(head)
        if not 1 <= last <= problem.cap(replicas - 1):
            continue
        shares = (*head, last)
        value = check_shares(problem, shares)
        if best is None or value < best.bottleneck_s:
            best = Shares(shares, value)
    assert best is not None  # feasible, so some split exists
    return best
