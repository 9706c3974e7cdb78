"""The ping-pong pipeline closed form (solvers/serving/pingpong.py) against its own event
recursion, and MegaScale-Infer's overlap condition as a special case."""
import random

import pytest

from solvers.serving.pingpong import min_micro_batches, pipeline_s, round_s, rounds_s


def test_identical_rounds_closed_form_is_exact():
    rng = random.Random(1)
    for _ in range(2000):
        stages = [rng.uniform(0.05, 3.0) for _ in range(rng.randint(1, 5))]
        m, layers = rng.randint(1, 8), rng.randint(1, 60)
        exact = rounds_s([stages] * layers, m)
        assert pipeline_s([(stages, layers)], m) == pytest.approx(exact, rel=1e-12)


def test_dense_then_moe_layers_within_bound():
    """Attention-only dense layers first (DeepSeek-V3's three), then MoE layers: the closed
    form never undercuts the recursion and overshoots it by at most 4%."""
    rng = random.Random(2)
    worst = 0.0
    for _ in range(2000):
        m = rng.randint(1, 8)
        moe = [rng.uniform(0.05, 3.0) for _ in range(4)]
        kinds = [([rng.uniform(0.05, 3.0), 0.0, 0.0, 0.0], rng.randint(0, 5)),
                 (moe, rng.randint(20, 80))]
        exact = rounds_s([s for s, c in kinds for _ in range(c)], m)
        err = pipeline_s(kinds, m) / exact - 1
        assert err <= 1e-12
        worst = min(worst, err)
    assert worst > -0.04


def test_steady_state_round_time_from_recursion():
    """The long-run time per round of the recursion is the max-plus cycle time."""
    rng = random.Random(3)
    for _ in range(200):
        stages = [rng.uniform(0.05, 3.0) for _ in range(4)]
        m = rng.randint(1, 8)
        per_round = rounds_s([stages] * 401, m) - rounds_s([stages] * 400, m)
        assert per_round == pytest.approx(round_s(stages, m), rel=1e-9)


def test_megascale_overlap_condition():
    """Equal attention and expert times T_f, one-way transfer T_c <= T_f: the bottleneck is
    never idle exactly when m >= 2 (1 + T_c / T_f) (MegaScale-Infer sec. 4.2)."""
    for t_f, t_c in ((1.0, 0.5), (1.0, 1.0), (2.0, 0.3), (1.0, 0.9)):  # T_c <= T_f, as they require
        stages = [t_f, t_c, t_f, t_c]
        need = min_micro_batches(stages)
        assert need == max(1, -(-2 * (1 + t_c / t_f) // 1))
        assert round_s(stages, need) == pytest.approx(need * t_f)
        if need > 1:
            assert round_s(stages, need - 1) > (need - 1) * t_f


def test_more_micro_batches_never_lower_throughput():
    rng = random.Random(4)
    for _ in range(200):
        stages = [rng.uniform(0.05, 3.0) for _ in range(4)]
        per_mb = [round_s(stages, m) / m for m in range(1, 10)]
        assert all(b <= a + 1e-12 for a, b in zip(per_mb, per_mb[1:]))


def test_rejects_no_micro_batches():
    with pytest.raises(ValueError):
        round_s([1.0], 0)


def test_a_stage_that_waited_pays_its_resume_cost_once_per_wait():
    # one round, m = 1: attention starts at 0 (busy from before), the experts wait for the
    # dispatch and resume: 1 + 0.5 + (1 + 0.2) + 0.5
    stages = [1.0, 0.5, 1.0, 0.5]
    resume = (0.2, 0.0, 0.2, 0.0)
    assert rounds_s([stages], 1, resume) == pytest.approx(3.2)
    # a second round: the attention rank waited for the combine too (+0.2), and so did the
    # experts again (+0.2)
    assert rounds_s([stages, stages], 1, resume) == pytest.approx(3.2 + 3.2 + 0.2)
    # m = 2 with a slow attention stage: the experts wait for every dispatch and the attention
    # rank never waits, so only the last micro-batch's resume lies on the critical path
    slow = [2.0, 0.1, 0.5, 0.1]
    plain = rounds_s([slow], 2)
    with_resume = rounds_s([slow], 2, resume)
    assert with_resume == pytest.approx(plain + 0.2)  # only the last micro-batch's wait shows


@pytest.mark.parametrize("term", ["resume_s", "late_s"])
def test_waiting_costs_never_shorten_and_cost_at_most_one_per_task(term):
    # each alone (together, a later arrival can trade a late read for a smaller resume, so the
    # step is not monotone in both at once)
    rng = random.Random(11 if term == "resume_s" else 12)
    for _ in range(300):
        m, n = rng.randint(1, 5), rng.randint(1, 4)
        rounds = [[rng.uniform(0.01, 1.0) for _ in range(4)] for _ in range(n)]
        extra = [rng.uniform(0, 0.3), 0.0, rng.uniform(0, 0.3), 0.0]
        base, got = rounds_s(rounds, m), rounds_s(rounds, m, **{term: extra})
        assert base <= got <= base + m * n * (extra[0] + extra[2]) + 1e-12


def test_a_micro_batch_that_came_while_its_stage_was_busy_pays_the_late_read():
    # m = 2, slow experts: micro-batch 1's dispatch arrives at 2.1 while the experts work on
    # micro-batch 0 until 4.1, so they read it late (+0.1): 4.1 + 0.1 + 3 + 0.1 (combine)
    stages = [1.0, 0.1, 3.0, 0.1]
    late = (0.1, 0.0, 0.1, 0.0)
    assert rounds_s([stages], 2) == pytest.approx(7.2)
    assert rounds_s([stages], 2, late_s=late) == pytest.approx(7.3)
    # the first round's attention takes no message: m micro-batches queued at time 0 pay none
    assert rounds_s([[1.0, 0.0, 0.0, 0.0]], 3, late_s=late) == pytest.approx(3.0)
    # a stage that waited pays the resume, never the late read (m = 1: nothing is ever early)
    assert rounds_s([stages, stages], 1, late_s=late) == pytest.approx(rounds_s([stages] * 2, 1))
