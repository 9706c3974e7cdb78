"""Gradient and Adam-moment widths (``TrainingConfig.grad_reduce_in_fp32``,
``optimizer_moment_bytes``): memory, the DP gradient reduction and the optimizer step."""
from __future__ import annotations

import pytest

from cost_models.parallel import ConfigError, Degrees
from cost_models.profile import Profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.data_parallel import optimizer_bytes_per_param
from cost_models.training.step import estimate
from planner.inputs.models import load_model
from topologies.standard import homogeneous_cluster

MODEL = load_model("llama-3.1-8b")
CLUSTER = homogeneous_cluster("H100", 2)
D = Degrees(tp=2, pp=1, dp=8)


def _est(precision="bf16", **opts):
    w = Workload(seq_len=4096, global_batch=64, precision=precision)
    return estimate(MODEL, CLUSTER, w, TrainingConfig(degrees=D, sequence_parallel=True, **opts),
                    Profile())


def test_bf16_gradients_halve_gradient_memory_and_its_reduction():
    wide, narrow = _est(), _est(grad_reduce_in_fp32=False)
    assert narrow.memory.grads_bytes == pytest.approx(wide.memory.grads_bytes / 2)
    assert narrow.memory.weights_bytes == wide.memory.weights_bytes
    assert narrow.dp_comm_total_s < 0.75 * wide.dp_comm_total_s  # reduce-scatter at half size
    assert narrow.time.compute_s == wide.time.compute_s


def test_bf16_moments_shrink_optimizer_state_by_a_third():
    wide, narrow = _est(), _est(optimizer_moment_bytes=2)
    # fp32 master (4) + two moments: 12 -> 8 bytes per parameter
    assert narrow.memory.optimizer_bytes == pytest.approx(wide.memory.optimizer_bytes * 8 / 12)
    # the step reads and writes m and v at 2 bytes instead of 4: 30 -> 22 bytes per parameter
    assert narrow.time.optimizer_s == pytest.approx(wide.time.optimizer_s * 22 / 30)


def test_fp32_jobs_are_unchanged_by_the_gradient_flag():
    """fp32 gradients are already the compute dtype (the CPU reference job's case)."""
    w = Workload(seq_len=1, global_batch=1, precision="fp32", optimizer="sgd")
    assert optimizer_bytes_per_param(TrainingConfig(grad_reduce_in_fp32=False), w) == \
        optimizer_bytes_per_param(TrainingConfig(), w)
    from cost_models.training.stage_memory import state_bytes_per_param
    assert state_bytes_per_param(TrainingConfig(grad_reduce_in_fp32=False), w) == \
        state_bytes_per_param(TrainingConfig(), w)


def test_optimizer_bytes_per_param_counts_reads_and_writes():
    w = Workload(seq_len=1, global_batch=1)  # bf16, adam: 30 bytes
    assert optimizer_bytes_per_param(TrainingConfig(), w) == 30
    assert optimizer_bytes_per_param(TrainingConfig(grad_reduce_in_fp32=False), w) == 28
    assert optimizer_bytes_per_param(TrainingConfig(optimizer_moment_bytes=2), w) == 22


def test_widths_are_validated_and_left_out_of_plans_at_their_defaults():
    with pytest.raises(ConfigError):
        TrainingConfig(optimizer_moment_bytes=1)
    opts = TrainingConfig().options_dict()
    assert "grad_reduce_in_fp32" not in opts and "optimizer_moment_bytes" not in opts
    narrow = TrainingConfig(grad_reduce_in_fp32=False, optimizer_moment_bytes=2)
    assert TrainingConfig.from_dict({"degrees": {}, **narrow.options_dict()}) == narrow
