"""solvers.serving.pinned_cores: ranks pinned to cores they may share. With a core per rank
it is the ping-pong recursion exactly; on shared cores a hand-worked case, the cores' work as
a lower bound, and the rules that make it differ from processor sharing (a message waits for
its receiver's core, and is then a late read)."""
from __future__ import annotations

import random

import pytest

from solvers.serving.pingpong import rounds_s
from solvers.serving.pinned_cores import PinnedRank, pinned_rounds
from solvers.serving.shared_cores import shared_rounds


def _ranks(cores_att, cores_ffn, unit=0):
    return ([PinnedRank("attention", unit, c) for c in cores_att]
            + [PinnedRank("ffn", unit, c) for c in cores_ffn])


def _instance(rng):
    A, F, m, R = rng.randint(1, 3), rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 3)
    rounds = [[rng.uniform(0, 1), rng.uniform(0, .5), rng.uniform(0, 1), rng.uniform(0, .5)]
              for _ in range(R)] + [[rng.uniform(0, 1), 0.0, 0.0, 0.0]]
    return A, F, m, rounds, tuple(rng.uniform(0, .3) for _ in range(4))


def test_a_core_per_rank_is_the_ping_pong_recursion():
    rng = random.Random(7)
    for _ in range(400):
        A, F, m, rounds, (ra, rf, la, lf) = _instance(rng)
        run = pinned_rounds(rounds, m, _ranks(range(A), range(A, A + F)), (ra, rf), (la, lf))
        assert run.finish_s == pytest.approx(rounds_s(rounds, m, (ra, 0, rf, 0), (la, 0, lf, 0)),
                                             rel=1e-12, abs=1e-12)
        # alone on its core a rank's wall time in its work is the work
        assert run.busy_s == pytest.approx(run.work_s)


def test_two_ffn_ranks_on_one_core_run_in_turn():
    a, d, e, c, t = 1.0, 0.25, 2.0, 0.5, 0.75
    ra, rf, la, lf = 0.01, 0.02, 0.03, 0.04
    run = pinned_rounds([[a, d, e, c], [t, 0, 0, 0]], 1, _ranks([0], [1, 1]), (ra, rf), (la, lf))
    # both dispatches arrive at a + d on the free core 1: the first FFN rank takes it (it
    # stood idle: resume), the second one's tokens wait unread until it is free again (a
    # late read); the attention rank, idle meanwhile, resumes for the tail
    assert run.finish_s == pytest.approx(a + d + (e + rf) + (e + lf) + c + (t + ra))
    assert run.work_s == pytest.approx((a + t + ra, e + rf, e + lf))
    # processor sharing of both cores by all three would overlap more
    shared = shared_rounds([[a, d, e, c], [t, 0, 0, 0]], 1, [1, 0, 2, 0], 2.0)
    assert shared.finish_s < run.finish_s


def test_ranks_computing_on_one_core_share_it():
    # two attention ranks on core 0 start together and split it; their dispatches arrive
    # together at the FFN rank's free core 1
    a, d, e, c = 1.0, 0.1, 0.5, 0.1
    run = pinned_rounds([[a, d, e, c]], 1, _ranks([0, 0], [1]))
    assert run.finish_s == pytest.approx(2 * a + d + e + c)
    assert run.busy_s[:2] == pytest.approx((2 * a, 2 * a)) and run.work_s[:2] == (a, a)


def test_no_core_finishes_before_its_work():
    rng = random.Random(11)
    for _ in range(300):
        A, F, m, rounds, (ra, rf, la, lf) = _instance(rng)
        cores = rng.randint(1, A + F)
        ranks = [PinnedRank("attention" if i < A else "ffn", 0, rng.randrange(cores))
                 for i in range(A + F)]
        if not any(k.role == "attention" for k in ranks) or not any(
                k.role == "ffn" for k in ranks):
            continue
        run = pinned_rounds(rounds, m, ranks, (ra, rf), (la, lf))
        for core in range(cores):
            on = [i for i, k in enumerate(ranks) if k.core == core]
            assert run.finish_s >= sum(run.work_s[i] for i in on) - 1e-9
        # and none sooner than its ranks' own chain of work and links on cores of their own
        alone = rounds_s(rounds, m)
        assert run.finish_s >= alone - 1e-9


def test_units_talk_only_inside_themselves():
    rounds = [[1.0, 0.1, 1.0, 0.1], [0.5, 0, 0, 0]]
    one = pinned_rounds(rounds, 2, _ranks([0], [1]))
    two = pinned_rounds(rounds, 2, _ranks([0], [1], unit=0) + _ranks([2], [3], unit=1))
    assert two.finish_s == pytest.approx(one.finish_s)


@pytest.mark.parametrize("ranks, why", [
    ((PinnedRank("ffn", 0, 0),), "no attention rank"),
    ((PinnedRank("attention", 0, 0),), "no FFN rank"),
    ((PinnedRank("attention", 0, 0), PinnedRank("expert", 0, 1)), "role")])
def test_bad_ranks_are_refused(ranks, why):
    with pytest.raises(ValueError, match=why):
        pinned_rounds([[1.0, 0.1, 1.0, 0.1]], 1, ranks)
    with pytest.raises(ValueError, match="micro_batches"):
        pinned_rounds([[1.0, 0.1, 1.0, 0.1]], 0, _ranks([0], [1]))
