"""Cost models against published numbers and analytic identities.

Published figures: Korthikanti et al. 2022 (arXiv:2205.05198) Figure 1 memory per GPU, as
encoded in the reference set benchmarks/data/published_runs_calibration.json.
"""
from __future__ import annotations

import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cost_models import communication as comm
from cost_models.training.memory import in_flight_chunks
from cost_models.model_spec import ModelSpec, count_params
from cost_models.parallel import ConfigError, Degrees
from cost_models.training.config import TrainingConfig, Workload, check_config
from cost_models.profile import Profile, default_profile
from cost_models.training.layers import stage_layers
from cost_models.training.step import estimate
from planner.inputs.models import load_model
from solvers.pipeline.sim import PipelineProblem, simulate
from topologies.cluster import GroupView, LinkTier
from topologies.standard import homogeneous_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import published_runs as pr  # noqa: E402

GIB = 2**30
ROWS = pr.load_rows()


def gpt(layers: int, hidden: int, heads: int) -> ModelSpec:
    return ModelSpec("gpt", layers, hidden, heads, heads, hidden // heads, 4 * hidden, 51200,
                     glu=False, activation="gelu", norm="layernorm", tied_embeddings=True)


@pytest.mark.parametrize("row", [r for r in ROWS if r["kind"] == "memory"], ids=lambda r: r["id"])
def test_memory_matches_korthikanti(row):
    """Activations within 1% and model states within 10% (ours add the embedding table)."""
    est = pr.best_estimate(row, default_profile(row["cluster"]["gpu_key"]))
    me = row["measured"]
    acts = est.memory.activations_bytes / GIB
    state = (est.memory.weights_bytes + est.memory.grads_bytes + est.memory.optimizer_bytes) / GIB
    assert acts == pytest.approx(me["memory_activations_gib_per_gpu"], rel=0.01)
    assert state == pytest.approx(me["memory_params_grads_optimizer_gib_per_gpu"], rel=0.10)


def test_calibration_median_error_within_10_percent():
    """Rows with a published step time or tokens/s/GPU: median |error| <= 10%, all fit."""
    rows = [r for r in ROWS if r["kind"] == "training" and pr.row_target(r)
            and pr.row_target(r).metric in ("step_time_s", "tokens_per_s_per_gpu")]
    errors, fits = [], []
    for row in rows:
        est = pr.best_estimate(row, default_profile(row["cluster"]["gpu_key"]))
        target = pr.row_target(row)
        errors.append(abs(pr.predicted_metric(target, est, pr.row_model(row)) / target.value - 1))
        fits.append(est.memory.fits)
    assert len(rows) >= 20
    assert statistics.median(errors) <= 0.10
    assert all(fits)


@pytest.mark.parametrize("layers,pp,vpp", [(96, 8, 1), (96, 8, 3), (94, 8, 4), (94, 32, 3),
                                           (61, 16, 1), (7, 3, 1)])
def test_stage_layers_partition_every_layer_once(layers, pp, vpp):
    split = stage_layers(layers, pp, vpp)
    assert len(split) == pp
    assert sorted(l for stage in split for l in stage) == list(range(layers))
    sizes = [len(s) for s in split]
    assert max(sizes) - min(sizes) <= vpp


def simulated_pipeline(est):
    """One step of ``est``'s 1F1B / interleaved schedule, simulated event by event
    (``solvers.pipeline.sim``) on the estimate's per-stage micro-batch times, each chunk a
    v-th of its stage and split forward : backward = 1 : 2. The times include the send/recv
    the interleaved schedule hides in its steady state (``pp_hidden_s``): the simulation is
    of warm-up and flush, which pay it."""
    cfg = est.config
    p, v = cfg.degrees.pp, cfg.vpp
    chunk_s = tuple((s.total_s + s.pp_hidden_s) / v for s in est.stages)
    return simulate(PipelineProblem(
        schedule="interleaved-1f1b" if v > 1 else "1f1b", num_stages=p, num_chunks=v,
        num_microbatches=cfg.micro_batches(est.workload),
        forward_s=tuple(t / 3 for t in chunk_s), backward_s=tuple(2 * t / 3 for t in chunk_s)))


@pytest.mark.parametrize("pp,vpp,m", [(4, 1, 16), (8, 1, 64), (4, 2, 16), (8, 4, 32)])
def test_bubble_matches_closed_form(pp, vpp, m):
    """Nearly uniform stages (the last adds the LM head): the bubble is the event simulation's
    idle time, and bubble / (compute part) = (p-1)/(v*m) (Narayanan et al. 2021, sec. 2.2)."""
    model = gpt(32 * vpp, 4096, 32)
    cluster = homogeneous_cluster("H100-SXM5-80GB", pp)
    cfg = TrainingConfig(degrees=Degrees(tp=8, pp=pp, dp=1), vpp=vpp, sequence_parallel=True)
    est = estimate(model, cluster, Workload(2048, m), cfg, Profile())
    per_mb = est.stages[1].total_s  # a middle stage: no embedding or LM head
    sim = simulated_pipeline(est)
    # the closed form averages the stages where the simulation waits on the slowest: <= 3% apart
    assert est.time.bubble_s == pytest.approx(sim.bubble_s, rel=0.03)
    pipeline_s = m * max(s.total_s + s.pp_hidden_s for s in est.stages) + est.time.bubble_s
    assert pipeline_s == pytest.approx(sim.step_s, rel=0.005)
    assert est.time.bubble_s / (m * per_mb) == pytest.approx((pp - 1) / (vpp * m), rel=0.1)


@pytest.mark.parametrize("options", [dict(), dict(vpp=2), dict(zero_bubble=True),
                                     dict(seq_slices=2), dict(recompute="full", zero=3)])
def test_more_micro_batches_add_stage_time_not_bubble(options):
    """Doubling the micro-batches m at a fixed micro-batch adds m times the slowest stage's
    micro-batch time and leaves the bubble as it was: the bubble depends on p, v and the stage
    times, never on m (Narayanan et al. 2021, sec. 2.2: (p-1)/v * t against m * t)."""
    model = load_model("llama-3.1-8b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 2)
    cfg = TrainingConfig(degrees=Degrees(tp=2, pp=4, dp=2), sequence_parallel=True, **options)
    one, two = (estimate(model, cluster, Workload(4096, gb), cfg, Profile()) for gb in (32, 64))
    m = cfg.micro_batches(Workload(4096, 32))
    slow_s = max(s.total_s for s in one.stages)
    assert two.time.bubble_s == pytest.approx(one.time.bubble_s, rel=1e-12)
    if cfg.zero < 3:  # ZeRO-3 gathers weights every micro-batch: exposed DP time grows with m
        assert two.step_time_s - one.step_time_s == pytest.approx(m * slow_s, rel=1e-9)
    else:
        assert two.step_time_s - one.step_time_s >= m * slow_s * (1 - 1e-9)


def _view(n: int, k: int, intra_bw: float, inter_bw: float) -> GroupView:
    intra = LinkTier("nvswitch", intra_bw, 0.0) if k > 1 else None
    inter = LinkTier("ib", inter_bw, 0.0) if n > k else None
    return GroupView(n, k, n // k, intra, inter)


@pytest.mark.parametrize("n,k,expected_busbw", [
    (8, 8, 400e9),  # one node: NVSwitch
    (16, 8, 8 * 50e9),  # two nodes, 8 per node: 8 NICs in parallel (NCCL one ring per NIC)
    (16, 1, 50e9),  # one per node: one NIC
    (64, 2, 100e9),
])
def test_bus_bandwidth_tiers(n, k, expected_busbw):
    prof = Profile(link_efficiency={"nvswitch": 1.0, "ib": 1.0})
    assert comm.bus_bandwidth(_view(n, k, 400e9, 50e9), prof) == pytest.approx(expected_busbw)


def test_collective_volumes_follow_nccl_tests_factors():
    """all-reduce moves 2(n-1)/n S, all-gather and reduce-scatter (n-1)/n S (nccl-tests)."""
    prof = Profile(link_efficiency={"nvswitch": 1.0, "ib": 1.0})
    view = _view(8, 8, 100e9, 1.0)
    size = 1e9
    assert comm.all_reduce_s(view, size, prof) == pytest.approx(2 * 7 / 8 * size / 100e9)
    assert comm.all_gather_s(view, size, prof) == pytest.approx(7 / 8 * size / 100e9)
    assert comm.reduce_scatter_s(view, size, prof) == comm.all_gather_s(view, size, prof)
    assert comm.all_reduce_s(_view(1, 1, 1.0, 1.0), size, prof) == 0.0


def test_all_to_all_splits_intra_and_inter_traffic():
    prof = Profile(link_efficiency={"nvswitch": 1.0, "ib": 1.0})
    view = _view(16, 8, 400e9, 50e9)
    send = 16e6
    expected = max(7 / 16 * send / 400e9, 8 / 16 * send / 50e9)
    assert comm.all_to_all_s(view, send, prof) == pytest.approx(expected)


@pytest.mark.parametrize("stage,pp,vpp,m,expected", [
    (0, 8, 1, 64, 8), (7, 8, 1, 64, 1), (0, 8, 1, 4, 4), (0, 8, 3, 64, 2 * 7 + 2 * 8 + 1)])
def test_in_flight_micro_batches(stage, pp, vpp, m, expected):
    assert in_flight_chunks(stage, pp, vpp, m) == expected


def test_interleaved_first_stage_factor_is_korthikanti():
    """First stage holds p*(1 + (p-1)/(p*v)) micro-batches' worth (Korthikanti sec. 4.2.3)."""
    p, v = 8, 3
    assert in_flight_chunks(0, p, v, 1000) / v == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_state_bytes_per_param_match_megatron_table():
    """18 bytes/param without, 6 + 12/d with the distributed optimizer (Megatron docs)."""
    model = load_model("llama-3.1-8b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1)
    w = Workload(4096, 64)
    params = count_params(model).total
    for zero, per_param in ((0, 18.0), (1, 6 + 12 / 8)):
        cfg = TrainingConfig(degrees=Degrees(dp=8), zero=zero)
        est = estimate(model, cluster, w, cfg, Profile())
        mem = est.memory
        state = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes
        assert state / params == pytest.approx(per_param, rel=1e-6)


def test_moe_expert_parallel_adds_all_to_all_and_imbalance_slows():
    model = load_model("qwen3-30b-a3b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 2)
    w = Workload(4096, 256)
    base = TrainingConfig(degrees=Degrees(dp=16, ep=16, etp=1))
    est = estimate(model, cluster, w, base, Profile())
    assert est.time.ep_comm_s > 0
    skewed = estimate(model, cluster, w, replace(base, moe_imbalance=1.5), Profile())
    assert skewed.step_time_s > est.step_time_s
    assert skewed.memory.activations_bytes > est.memory.activations_bytes


def test_more_recompute_means_less_memory_and_more_time():
    model = load_model("llama-3.1-70b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 8)
    w = Workload(4096, 512)
    ests = [estimate(model, cluster, w, TrainingConfig(degrees=Degrees(tp=8, pp=4, dp=2),
                                                       recompute=r, sequence_parallel=True),
                     Profile()) for r in ("none", "selective", "full")]
    mems = [e.memory.activations_bytes for e in ests]
    times = [e.step_time_s for e in ests]
    assert mems[0] > mems[1] > mems[2]
    assert times[0] < times[1] < times[2]


def test_torch_fsdp_keeps_no_low_precision_shard():
    """ZeRO-3 in bf16: DeepSpeed/Megatron keep a 2-byte weight shard beside the fp32 master,
    PyTorch FSDP only the fp32 shard (the gathered bf16 units are counted in both). The
    difference is exactly 2 bytes per parameter over the shard; gradients, optimizer and time
    stay the same."""
    model = load_model("llama-3.1-8b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 2)
    base = TrainingConfig(degrees=Degrees(dp=16), zero=3)
    for precision in ("bf16", "fp16"):
        w = Workload(4096, 64, precision)
        zero = estimate(model, cluster, w, base, Profile())
        torch = estimate(model, cluster, w, replace(base, low_precision_shard=False), Profile())
        assert zero.memory.weights_bytes - torch.memory.weights_bytes == pytest.approx(
            2 * count_params(model).total / 16, rel=1e-6)
        assert torch.memory.weights_bytes > 0  # the gathered units
        assert torch.memory.optimizer_bytes == zero.memory.optimizer_bytes
        assert torch.memory.grads_bytes == zero.memory.grads_bytes
        assert torch.step_time_s == zero.step_time_s
    # below ZeRO-3 the weights are not sharded, and the option changes nothing
    w = Workload(4096, 64)
    one = TrainingConfig(degrees=Degrees(dp=16), zero=1)
    assert (estimate(model, cluster, w, one, Profile()).memory
            == estimate(model, cluster, w, replace(one, low_precision_shard=False),
                        Profile()).memory)


def test_layer_partition_counts_fsdp_states_as_the_stage_memory_does():
    """The layer-to-stage partition's per-layer model states follow the same rule: 2 bytes per
    parameter over the shard less without the low-precision shard."""
    from cost_models.groups import stage_views
    from cost_models.training.memory import layer_params_split
    from cost_models.training.partition import partition_inputs
    model = load_model("llama-3.1-8b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 2)
    w = Workload(4096, 64)
    cfg = TrainingConfig(degrees=Degrees(pp=2, dp=8), zero=3)
    views = stage_views(cluster, cfg.degrees, None)
    zero = partition_inputs(model, cluster, w, cfg, Profile(), views)
    torch = partition_inputs(model, cluster, w, replace(cfg, low_precision_shard=False),
                             Profile(), views)
    for layer, (a, b) in enumerate(zip(zero.layer_state_bytes, torch.layer_state_bytes)):
        assert a - b == pytest.approx(2 * sum(layer_params_split(model, layer)) / 8)


def test_fused_cross_entropy_keeps_logits_in_the_compute_dtype():
    """The last stage's logits and their gradient: fp32 (8 bytes per logit, Korthikanti et al.
    2022 sec. 4.3), or 2 + 2 bytes in bf16 with a fused loss."""
    model = load_model("llama-3.1-8b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1)
    cfg = TrainingConfig(degrees=Degrees(tp=2, dp=4), micro_batch=2)
    w = Workload(4096, 64)
    plain = estimate(model, cluster, w, cfg, Profile()).memory
    fused = estimate(model, cluster, w, replace(cfg, fused_cross_entropy=True), Profile()).memory
    assert plain.logits_bytes == pytest.approx(8 * 2 * 4096 * model.vocab_size / 2)
    assert fused.logits_bytes == pytest.approx(plain.logits_bytes / 2)
    assert plain.peak_bytes - fused.peak_bytes >= plain.logits_bytes / 2  # plus its allowance


def test_new_memory_options_are_written_only_when_set():
    """Plans written before ``low_precision_shard`` and ``fused_cross_entropy`` keep their
    options (and hashes); set, they round-trip."""
    cfg = TrainingConfig(degrees=Degrees(dp=8), zero=3)
    assert "low_precision_shard" not in cfg.options_dict()
    assert "fused_cross_entropy" not in cfg.options_dict()
    torch = replace(cfg, low_precision_shard=False, fused_cross_entropy=True)
    opts = torch.options_dict()
    assert opts["low_precision_shard"] is False and opts["fused_cross_entropy"] is True
    assert TrainingConfig.from_dict({"degrees": {"dp": 8}, **opts}) == torch


def test_step_is_the_simulated_pipeline_plus_dp_and_optimizer():
    """Llama-3.1-70B, interleaved 1F1B: the step equals an event-by-event simulation of the
    schedule on the estimate's stage times plus the exposed DP time and the optimizer step
    (Narayanan et al. 2021, sec. 2.2: (m + (p-1)/v) * t for equal stages)."""
    model = load_model("llama-3.1-70b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 8)
    cfg = TrainingConfig(degrees=Degrees(tp=8, pp=4, dp=2), vpp=2, sequence_parallel=True)
    est = estimate(model, cluster, Workload(4096, 512), cfg, Profile())
    t = est.time
    assert t.dp_comm_s >= 0 and t.optimizer_s > 0
    # the steady state's micro-batches hide their send/recv (stage.pp_exposed_s)
    m = cfg.micro_batches(est.workload)
    hidden = (max(s.total_s + s.pp_hidden_s for s in est.stages)
              - max(s.total_s for s in est.stages))
    assert est.step_time_s == pytest.approx(
        simulated_pipeline(est).step_s - m * hidden + t.dp_comm_s + t.optimizer_s, rel=0.005)
    assert 0 < est.mfu < 1


def test_model_flops_and_mfu_follow_narayanan_eq3():
    """GPT (Narayanan et al. 2021, eq. 3 without recompute): 72*B*s*l*h^2*(1 + s/(6h)) + 6*B*s*h*V
    FLOPs per step; MFU divides them by step time, GPUs and the H100 SXM's published 989 TFLOPS
    dense BF16 (NVIDIA H100 datasheet)."""
    l, h, s, batch, vocab = 24, 2048, 2048, 64, 51200
    model = gpt(l, h, 16)
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1)
    est = estimate(model, cluster, Workload(s, batch),
                   TrainingConfig(degrees=Degrees(tp=2, pp=2, dp=2), sequence_parallel=True),
                   Profile())
    flops = 72 * batch * s * l * h**2 * (1 + s / (6 * h)) + 6 * batch * s * h * vocab
    assert est.model_flops_per_step == pytest.approx(flops, rel=1e-9)
    assert est.mfu == pytest.approx(flops / (est.step_time_s * 8 * 989e12), rel=1e-9)


@pytest.mark.parametrize("kwargs,gpus,quantity", [
    (dict(tp=3, dp=21), 63, "tp"),
    (dict(tp=8, pp=2, dp=3), 64, "tp*pp*dp*cp"),
    (dict(tp=8, dp=8, ep=2), 64, "ep"),
    (dict(tp=8, dp=4, pp=2, micro_batch=3), 64, "global_batch"),
])
def test_check_config_names_the_quantity(kwargs, gpus, quantity):
    """Cost-model errors name the quantity, not a command-line flag (the CLI maps them)."""
    model = load_model("llama-3.1-70b")
    with pytest.raises(ConfigError) as err:
        check_config(model, Workload(4096, 512), TrainingConfig.from_dict(kwargs), gpus)
    assert err.value.quantity == quantity
    assert "--" not in str(err.value)


def test_layer_partition_puts_the_mtp_module_on_the_last_stage():
    """The partition prices the last stage's head with the MTP modules stage_cost adds there
    (DeepSeek-V3: one more MoE layer, a projection and another LM head)."""
    from dataclasses import replace as dc_replace

    from cost_models.groups import stage_views
    from cost_models.training.partition import partition_inputs
    from cost_models.training.stage import mtp_cost
    from cost_models.training.context import make_context
    with_mtp = load_model("deepseek-v3")
    assert with_mtp.mtp_layers == 1
    without = dc_replace(with_mtp, mtp_layers=0)
    cluster = homogeneous_cluster("H100-SXM5-80GB", 32)
    w = Workload(4096, 1024)
    cfg = TrainingConfig(degrees=Degrees(pp=16, dp=16, ep=16))
    views = stage_views(cluster, cfg.degrees, None)
    a = partition_inputs(with_mtp, cluster, w, cfg, Profile(), views)
    b = partition_inputs(without, cluster, w, cfg, Profile(), views)
    ctx = make_context(with_mtp, cluster, w, cfg, Profile(), views)
    mtp = sum(mtp_cost(ctx.on_stage(15), views[15])[:5])
    assert mtp > max(b.layer_time_s)  # a MoE layer, a projection and an LM head
    assert a.head_time_s - b.head_time_s == pytest.approx(mtp / a.stage_slowdown[-1])
    assert a.layer_time_s == b.layer_time_s


def test_per_op_recompute_reruns_every_second_matmul_and_keeps_their_inputs_out():
    """torchtitan's per-op checkpointing (``recompute="op"``) on Llama-3.1-8B: the backward
    re-runs the elementwise ops and the block's 2nd, 4th and 6th matmuls, K, the output
    projection and w3: 4096 x (1024 + 4096 + 14336) of the layer's 4096 x (4096 + 1024 + 1024
    + 4096 + 3 x 14336) weights, 0.366 of its forward GEMM work (counted here from the
    architecture; with a shape-independent GEMM efficiency the times follow the FLOPs). It
    costs more than Megatron's selective recompute and less than full; without TP it keeps
    less than no recompute and more than full; MoE layers are refused."""
    from cost_models.compute import layer_forward_time, layer_work
    from cost_models.training.context import make_context
    from cost_models.training.stage import op_recompute_s

    model = load_model("llama-3.1-8b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1)
    w = Workload(8192, 16)
    flat = Profile(gemm_half_dim=0.0)
    cfg = TrainingConfig(degrees=Degrees(dp=8), recompute="op")
    ctx = make_context(model, cluster, w, cfg, flat, ())
    t = layer_forward_time(layer_work(model, 0, ctx.shard), ctx.rates, ctx.prof)
    rerun = op_recompute_s(ctx, 0, t, 0.0) - t.elementwise_s
    h, kv, f = 4096, 1024, 14336
    share = (kv + h + f) / (h + kv + kv + h + 3 * f)
    assert share == pytest.approx(0.366, abs=1e-3)
    assert rerun == pytest.approx(share * t.gemm_s, rel=1e-9)
    ests = {r: estimate(model, cluster, w, replace(cfg, recompute=r), Profile())
            for r in ("none", "selective", "op", "full")}
    times = {r: e.time.recompute_s for r, e in ests.items()}
    assert times["none"] == 0 < times["selective"] < times["op"] < times["full"]
    mems = {r: e.memory.activations_bytes for r, e in ests.items()}
    assert mems["none"] > mems["op"] > mems["full"]
    with pytest.raises(ValueError, match="dense layers"):
        estimate(load_model("mixtral-8x7b"), homogeneous_cluster("H100-SXM5-80GB", 2), w,
                 TrainingConfig(degrees=Degrees(dp=16, ep=8), recompute="op"), Profile())
