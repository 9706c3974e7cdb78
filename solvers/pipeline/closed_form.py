"""Closed forms of pipeline schedules: bubble, step time and peak in-flight activations.

Uniform stages, ``p2p_s = 0``; ``f, b`` per chunk and micro-batch. Step time =
``v * m * (f + b)`` (one device's work) + bubble, with bubble (:func:`bubble_closed_form_s`):

* gpipe, 1f1b: ``(p - 1) * (f + b)`` (Huang et al. 2019; Narayanan et al. 2021 §2.2.1:
  bubble fraction ``(p - 1) / m`` of the ideal time ``m * (f + b)``);
* interleaved-1f1b: ``(p - 1) * (f + b)`` with *per-chunk* ``f, b``; Narayanan et al.
  2021 §2.2.2 writes it as ``(p - 1) * (t_f + t_b) / v`` with *per-device* times
  ``t_f = v f``, ``t_b = v b``, i.e. a bubble fraction ``(p - 1) / (v m)``;
* zb-h1 (needs ``m >= p``): ``(p - 1) * (f + b_in - min(w, f, b_in))`` with
  ``b_in = (1 - weight_grad_fraction) * b`` and ``w = weight_grad_fraction * b``. When
  ``w <= min(f, b_in)`` this is Qi et al. 2023 Table 2's ``(p-1)(T_F + T_B - T_W)``
  (``T_B`` = input-gradient pass, ``T_W`` = weight-gradient pass): each postponed ``W``
  fills a cool-down gap, and the gap of the warm-up shrinks by ``w``. A ``W`` longer than
  ``f`` or ``b_in`` no longer fits and only ``min(w, f, b_in)`` is saved per stage. The
  min-form was found by, and is checked against, the simulator (:mod:`solvers.pipeline.sim`;
  thousands of random ``f, b, w``, ``m >= p``); for ``m < p`` no closed form is given
  (ValueError), and the simulated bubble is never above 1F1B's. The paper's setting
  ``T_F = T_B = T_W`` gives ``(p - 1) f``, a third of 1F1B's ``3 (p - 1) f``.

Peak in-flight activations (:func:`peak_in_flight_closed_form`, micro-batch-chunks whose
``F`` has run and whose ``B`` has not): gpipe ``m``; 1f1b and zb-h1 ``min(p - s, m)``;
interleaved ``min(v*m, 2*(p - s - 1) + (v - 1)*p + 1)`` (Megatron's warm-up count plus the
one forward that precedes the first backward). All verified against the simulator.
"""
from __future__ import annotations

from solvers.pipeline.sim import PipelineProblem, per_stage

__all__ = ["bubble_closed_form_s", "step_closed_form_s", "peak_in_flight_closed_form"]


def _uniform_times(problem: PipelineProblem) -> tuple[float, float]:
    fs = set(per_stage(problem.forward_s, problem.num_stages))
    bs = set(per_stage(problem.backward_s, problem.num_stages))
    if len(fs) != 1 or len(bs) != 1:
        raise ValueError("closed forms need uniform stages (one forward and one backward time)")
    if problem.p2p_s != 0:
        raise ValueError("closed forms assume p2p_s == 0")
    return fs.pop(), bs.pop()


def bubble_closed_form_s(problem: PipelineProblem) -> float:
    """Idle time of the busiest device, uniform stages and ``p2p_s = 0`` (module docstring).

    gpipe / 1f1b / interleaved-1f1b: ``(p - 1) * (f + b)`` with per-chunk ``f, b``
    (Narayanan et al. 2021 §2.2); zb-h1 (``m >= p``): ``(p - 1) * (f + b_in - min(w, f,
    b_in))``, Qi et al. 2023's ``(p - 1)(T_F + T_B - T_W)`` when ``w <= min(f, b_in)``.
    """
    f, b = _uniform_times(problem)
    p = problem.num_stages
    if problem.schedule == "zb-h1":
        if problem.num_microbatches < p:
            raise ValueError(f"the zb-h1 closed form needs num_microbatches >= num_stages, "
                             f"got {problem.num_microbatches} < {p}")
        w = problem.weight_grad_fraction * b
        b_in = b - w
        return (p - 1) * (f + b_in - min(w, f, b_in))
    return (p - 1) * (f + b)


def step_closed_form_s(problem: PipelineProblem) -> float:
    """``v * m * (f + b)`` plus :func:`bubble_closed_form_s`."""
    f, b = _uniform_times(problem)
    return problem.num_chunks * problem.num_microbatches * (f + b) + bubble_closed_form_s(problem)


def peak_in_flight_closed_form(problem: PipelineProblem) -> tuple[int, ...]:
    """Per-device peak of chunk-micro-batches with F done and B not (module docstring)."""
    p, m, v = problem.num_stages, problem.num_microbatches, problem.num_chunks
    if problem.schedule == "gpipe":
        return (m,) * p
    if problem.schedule == "interleaved-1f1b":
        return tuple(min(v * m, 2 * (p - s - 1) + (v - 1) * p + 1) for s in range(p))
    return tuple(min(p - s, m) for s in range(p))
