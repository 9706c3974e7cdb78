"""Pipeline bubble of each schedule, from the per-stage micro-batch times.

1F1B and interleaved 1F1B (Narayanan et al., SC'21, sec. 2.2): with m micro-batches, p stages,
v model chunks per stage and per-micro-batch stage times t_i, a step takes m*max(t_i) +
(p-1)/v * mean(t_i); for equal stages that is the paper's (m + (p-1)/v) * t, whose bubble
fraction is (p-1)/(v*m).

ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", sec. 3.1 and Table 2) defers each
backward's weight-gradient part W into the cool-down and so shrinks the bubble to
(p-1)(T_F + T_B - T_W), T_B the input-gradient part, when T_W <= min(T_F, T_B)
(``solvers.pipeline.closed_form.bubble_closed_form_s``: (p-1)(T_F + T_B - min(T_W, T_F, T_B))), at
1F1B's peak memory. Per stage, with w_i its weight-gradient time and T_F, T_B taken as equal
halves of t_i - w_i: (p-1) * mean(t_i - w_i - min(w_i, (t_i - w_i)/2)).

SlimPipe (Li et al. 2025, arXiv 2504.14519; ``TrainingConfig.seq_slices = k``): each
micro-batch of a 1F1B pipeline is cut into k sequence slices whose causal-attention cost is
evened out by workload redistribution, so a step runs m*k slice units of t_i/k each and the
bubble shrinks to (p-1)/k * mean(t_i) (``solvers.pipeline.slimpipe.step_time_s``).

``solvers.pipeline.sim`` checks these closed forms event by event (tests).
"""
from __future__ import annotations

from cost_models.training.config import TrainingConfig
from cost_models.training.stage import StageCost

__all__ = ["bubble_s"]


def bubble_s(cfg: TrainingConfig, stages: tuple[StageCost, ...]) -> float:
    """Pipeline bubble of the schedule (module docstring): (p-1)/v * mean(t_i); for ZB-H1
    (p-1) * mean(t_i - w_i - min(w_i, (t_i - w_i)/2)); for SlimPipe with k slices
    (p-1)/k * mean(t_i)."""
    if cfg.zero_bubble:
        rest = [s.total_s - s.weight_grad_s for s in stages]
        per = [r - min(s.weight_grad_s, r / 2) for r, s in zip(rest, stages)]
        return (cfg.degrees.pp - 1) * sum(per) / len(per)
    # warm-up and flush do not overlap their transfers (stage.pp_exposed_s): the bubble's
    # stage times keep the whole send/recv
    mean_s = sum(s.total_s + s.pp_hidden_s for s in stages) / len(stages)
    return (cfg.degrees.pp - 1) / (cfg.vpp * cfg.seq_slices) * mean_s
