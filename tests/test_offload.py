"""Fine-grained activation offloading (Megatron ``--offload-modules expert_fc1 moe_act``):
the routed experts' FC1 inputs and activation inputs wait for the backward on the host."""
from __future__ import annotations

import pytest

from cost_models.parallel import ConfigError, Degrees
from cost_models.profile import default_profile
from cost_models.training.config import TrainingConfig, Workload
from cost_models.training.memory import ActivationShape, layer_activation_bytes
from cost_models.training.step import estimate
from planner.inputs.models import load_model
from topologies.standard import homogeneous_cluster


def _shape(offload=()) -> ActivationShape:
    return ActivationShape(tokens=4096, seq_len=4096, tp=1, etp=1, sequence_parallel=False,
                           unfused_attention=False, dropout=False, moe_imbalance=1.0,
                           offload=offload)


def test_offloaded_expert_tensors_leave_the_gpu_exactly():
    """Per routed copy: FC1's input is h values, the GLU activation's input 2f, 2 bytes each."""
    model = load_model("qwen3-30b-a3b")
    h, f, k = model.hidden_size, model.moe.expert_ffn_hidden, model.moe.top_k
    base = layer_activation_bytes(model, 0, _shape(), "none")
    fc1 = layer_activation_bytes(model, 0, _shape(("expert_fc1",)), "none")
    both = layer_activation_bytes(model, 0, _shape(("expert_fc1", "moe_act")), "none")
    assert base - fc1 == pytest.approx(4096 * k * 2 * h)
    assert fc1 - both == pytest.approx(4096 * k * 2 * 2 * f)


def test_dense_layers_and_full_recompute_do_not_change():
    model = load_model("llama-3.1-8b")
    assert (layer_activation_bytes(model, 0, _shape(("expert_fc1", "moe_act")), "none")
            == layer_activation_bytes(model, 0, _shape(), "none"))
    moe = load_model("qwen3-30b-a3b")
    assert (layer_activation_bytes(moe, 0, _shape(("moe_act",)), "full")
            == layer_activation_bytes(moe, 0, _shape(), "full"))


def test_offloading_lowers_the_peak_not_the_step_time():
    model = load_model("qwen3-30b-a3b")
    cluster = homogeneous_cluster("H100", 1)
    w = Workload(4096, 256, "bf16")
    plain = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=8, ep=8), micro_batch=2)
    off = TrainingConfig.from_dict({"degrees": {"dp": 8, "ep": 8}, **plain.options_dict(),
                                    "offload_modules": ["expert_fc1", "moe_act"]})
    assert off.offload_modules == ("expert_fc1", "moe_act")
    a = estimate(model, cluster, w, plain, default_profile("H100"))
    b = estimate(model, cluster, w, off, default_profile("H100"))
    assert b.memory.activations_bytes < a.memory.activations_bytes
    assert b.step_time_s == a.step_time_s
    assert off.options_dict()["offload_modules"] == ["expert_fc1", "moe_act"]
    assert "offload_modules" not in plain.options_dict()
    with pytest.raises(ConfigError, match="offload_modules"):
        TrainingConfig(offload_modules=("attention",))
