"""How many prefill and decode instances to run on a fixed number of GPUs.

Instances of ``gp`` GPUs serve prefills at ``rp`` requests/s each; decode instances of ``gd``
GPUs serve ``rd`` each. The deployment's rate is ``min(np*rp, nd*rd)`` (DistServe, Zhong et al.
OSDI 2024, sec. 4: the two phases are a pipeline whose slower pool bounds goodput). We want the
highest rate per GPU used, ``min(np*rp, nd*rd) / (np*gp + nd*gd)``, with
``np*gp + nd*gd <= total``, ``np, nd >= 1``; ties go to the higher rate, then fewer GPUs. For
each ``np`` the best ``nd`` is one of the two integers around ``np*rp/rd`` (below it the rate
grows with ``nd``; above it extra decode instances only add GPUs), so the exact optimum is
found in O(total/gp). Pools take whole nodes: each pool's GPU count is a multiple of ``unit``.
"""
from __future__ import annotations

import math


def _value(n_p: int, n_d: int, gp: int, rp: float, gd: int, rd: float, price_p: float = 1.0,
           price_d: float = 1.0) -> tuple[float, float, int]:
    rate = min(n_p * rp, n_d * rd)
    gpus = n_p * gp + n_d * gd
    return rate / (n_p * gp * price_p + n_d * gd * price_d), rate, -gpus


def whole_unit_step(g: int, unit: int) -> int:
    """Fewest instances of ``g`` GPUs that fill whole units of ``unit`` GPUs."""
    return unit // math.gcd(unit, g)


def best_split(total: int, gp: int, rp: float, gd: int, rd: float, unit: int = 1,
               decode_total: int | None = None, price_p: float = 1.0, price_d: float = 1.0
               ) -> tuple[int, int, float] | None:
    """(prefill instances, decode instances, request rate), or None when one of each does not
    fit in ``total`` GPUs. Each pool's GPUs are a multiple of ``unit`` (whole nodes). With
    ``decode_total`` the pools draw on separate GPUs (two GPU types): ``total`` prefill GPUs
    and ``decode_total`` decode GPUs. ``price_p``/``price_d`` weigh a prefill/decode GPU in
    the rate per cost (1: the rate per GPU)."""
    if rp <= 0 or rd <= 0:
        return None
    sp, sd = whole_unit_step(gp, unit), whole_unit_step(gd, unit)
    best = None
    for n_p in range(sp, total // gp + 1, sp):
        left = decode_total if decode_total is not None else total - n_p * gp
        room = left // gd // sd * sd
        if room < sd:
            break
        balance = n_p * rp / rd
        low = max(sd, min(room, math.floor(balance / sd) * sd))
        for n_d in {low, min(room, low + sd)}:
            cand = (_value(n_p, n_d, gp, rp, gd, rd, price_p, price_d), n_p, n_d)
            if best is None or cand[0] > best[0]:
                best = cand
    if best is None:
        return None
    (_, rate, _), n_p, n_d = best
    return n_p, n_d, rate


def best_split_brute(total: int, gp: int, rp: float, gd: int, rd: float, unit: int = 1,
                     decode_total: int | None = None, price_p: float = 1.0,
                     price_d: float = 1.0) -> tuple[int, int, float] | None:
    """Every (np, nd) pair: the reference :func:`best_split` is tested against."""
    best = None
    for n_p in range(1, total // gp + 1):
        left = decode_total if decode_total is not None else total - n_p * gp
        for n_d in range(1, left // gd + 1):
            if (n_p * gp) % unit or (n_d * gd) % unit:
                continue
            cand = (_value(n_p, n_d, gp, rp, gd, rd, price_p, price_d), n_p, n_d)
            if best is None or cand[0] > best[0]:
                best = cand
    if best is None:
        return None
    (_, rate, _), n_p, n_d = best
    return n_p, n_d, rate
