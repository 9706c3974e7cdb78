"""The prefill/decode instance split against brute force over every pair."""
import itertools

import pytest

from solvers.serving.ratio import best_split, best_split_brute


@pytest.mark.parametrize("total,gp,gd,unit", [
    (8, 1, 1, 1), (8, 2, 4, 1), (16, 1, 8, 8), (32, 4, 8, 8), (64, 8, 16, 8), (24, 2, 3, 1),
    (48, 16, 8, 8), (16, 4, 2, 8)])
def test_split_matches_brute_force(total, gp, gd, unit):
    for rp, rd in itertools.product((0.3, 1.0, 2.7, 11.0), (0.2, 1.0, 4.5)):
        got, ref = best_split(total, gp, rp, gd, rd, unit), best_split_brute(total, gp, rp, gd,
                                                                             rd, unit)
        if ref is None:
            assert got is None
            continue
        value = lambda s: min(s[0] * rp, s[1] * rd) / (s[0] * gp + s[1] * gd)  # noqa: E731
        assert value(got) == pytest.approx(value(ref), rel=1e-12)
        # the documented tie-break: at equal rate per GPU the higher rate, then fewer GPUs
        assert got[2] == ref[2] == min(got[0] * rp, got[1] * rd)
        assert got[0] * gp + got[1] * gd == ref[0] * gp + ref[1] * gd
        assert (got[0] * gp) % unit == 0 and (got[1] * gd) % unit == 0
        assert got[0] * gp + got[1] * gd <= total


def test_ties_go_to_the_higher_rate_then_fewer_gpus():
    """Equal speeds and sizes: 1+1, 2+2, 3+3 and 4+4 instances all give the same rate per GPU;
    the split takes the highest rate (4+4), as the module docstring says."""
    assert best_split(16, 2, 1.0, 2, 1.0) == (4, 4, 4.0)
    assert best_split_brute(16, 2, 1.0, 2, 1.0) == (4, 4, 4.0)


def test_no_room_for_both_pools():
    assert best_split(8, 8, 1.0, 8, 1.0, 8) is None
    assert best_split(16, 8, 1.0, 8, 1.0, 8) == (1, 1, 1.0)


@pytest.mark.parametrize("total,gp,decode_total,gd,unit", [
    (16, 2, 8, 1, 8), (32, 8, 16, 4, 8), (8, 1, 24, 8, 8), (12, 3, 12, 2, 1)])
def test_split_over_two_gpu_types_matches_brute_force(total, gp, decode_total, gd, unit):
    for rp, rd in itertools.product((0.3, 1.0, 5.0), (0.2, 1.5, 9.0)):
        got = best_split(total, gp, rp, gd, rd, unit, decode_total)
        ref = best_split_brute(total, gp, rp, gd, rd, unit, decode_total)
        value = lambda s: min(s[0] * rp, s[1] * rd) / (s[0] * gp + s[1] * gd)  # noqa: E731
        assert (got is None) == (ref is None)
        if ref is not None:
            assert value(got) == pytest.approx(value(ref), rel=1e-12)
            assert got[0] * gp <= total and got[1] * gd <= decode_total


@pytest.mark.parametrize("prices", [(1.0, 1.0), (3.0, 1.0), (1.0, 2.5)])
def test_split_by_cost_matches_brute_force(prices):
    pp_, pd_ = prices
    for total, gp, decode_total, gd, unit in ((16, 2, 16, 1, 8), (32, 8, 24, 4, 8)):
        for rp, rd in itertools.product((0.5, 2.0, 7.0), (0.4, 3.0)):
            got = best_split(total, gp, rp, gd, rd, unit, decode_total, pp_, pd_)
            ref = best_split_brute(total, gp, rp, gd, rd, unit, decode_total, pp_, pd_)
            cost = lambda s: s[0] * gp * pp_ + s[1] * gd * pd_  # noqa: E731
            assert (got is None) == (ref is None)
            if ref is not None:
                assert min(got[0] * rp, got[1] * rd) / cost(got) == pytest.approx(
                    min(ref[0] * rp, ref[1] * rd) / cost(ref), rel=1e-12)
