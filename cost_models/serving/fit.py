"""Fit a few serving calibration parameters to measured (or published, fitted) latencies.

The loss is the mean squared log ratio of predicted to measured time, so every case counts
alike whatever its size; coordinate descent over each parameter's range in log space, a golden
section per coordinate, a fixed number of sweeps (deterministic, no dependency beyond the
standard library).
"""
from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

Predict = Callable[[Mapping[str, float], object], float]


def log_loss(predict: Predict, params: Mapping[str, float],
             cases: Sequence[tuple[object, float]]) -> float:
    return sum(math.log(predict(params, case) / measured) ** 2
               for case, measured in cases) / len(cases)


def _golden(f: Callable[[float], float], lo: float, hi: float, iters: int = 30) -> float:
    g = (math.sqrt(5) - 1) / 2
    a, b = math.log(lo), math.log(hi)
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(math.exp(c)), f(math.exp(d))
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(math.exp(d))
    return math.exp((a + b) / 2)


def fit(predict: Predict, cases: Sequence[tuple[object, float]],
        bounds: Mapping[str, tuple[float, float]], start: Mapping[str, float],
        sweeps: int = 4) -> dict[str, float]:
    """Parameters within ``bounds`` minimising :func:`log_loss`, from ``start``."""
    params = dict(start)
    for _ in range(sweeps):
        for name, (lo, hi) in sorted(bounds.items()):
            params[name] = _golden(
                lambda v, n=name: log_loss(predict, {**params, n: v}, cases), lo, hi)
    return params
