"""Cost terms the executor exposes: the calibrated machine's measured collective times by size,
the switch cost of a blocking collective inside compute, and the reference job's expert-gradient
sync in the run prediction."""
from __future__ import annotations

import itertools
import math
import statistics

import pytest

from cost_models import communication as comm
from cost_models import fitting
from cost_models.fitting import one_tier_view
from cost_models.profile import Profile
from topologies.cluster import GroupView, LinkTier

ROWS = [[1024.0, 1e-3], [65536.0, 2e-3], [1048576.0, 8e-3], [4194304.0, 20e-3]]


def _prof(**kw) -> Profile:
    return Profile(link_efficiency={"host": 1.0}, collective_tables={"host:all_reduce:2": ROWS},
                   **kw)


def test_measured_times_are_interpolated_log_log_and_extended_at_both_ends():
    view = one_tier_view(2, "host", 1e9, 1e-4)
    prof = _prof()
    for b, t in ROWS:  # at the measured sizes: the measurement
        assert comm.all_reduce_s(view, b, prof) == pytest.approx(t)
    # between: a straight line in log-log
    mid = math.sqrt(65536.0 * 1048576.0)
    assert comm.all_reduce_s(view, mid, prof) == pytest.approx(math.sqrt(2e-3 * 8e-3))
    assert comm.all_reduce_s(view, 10.0, prof) == pytest.approx(1e-3)  # the latency floor
    slope = (20e-3 - 8e-3) / (4194304.0 - 1048576.0)  # beyond: the last points' bandwidth
    assert comm.all_reduce_s(view, 8388608.0, prof) == pytest.approx(20e-3 + 4194304.0 * slope)
    for size in (3000.0, 300000.0, 3e6):  # monotone in size like the rows
        assert comm.all_reduce_s(view, size, prof) < comm.all_reduce_s(view, 1.01 * size, prof)


def test_the_table_serves_only_groups_it_was_measured_on():
    prof = _prof()
    alpha_beta = Profile(link_efficiency={"host": 1.0})
    other_size = one_tier_view(4, "host", 1e9, 1e-4)  # no 4-member table
    other_tier = one_tier_view(2, "nvswitch", 1e9, 1e-4)
    two_domains = GroupView(2, 1, 2, LinkTier("host", 1e9, 1e-4), LinkTier("ib", 5e9, 5e-6))
    for view in (other_size, other_tier, two_domains):
        assert comm.all_reduce_s(view, 65536.0, prof) == comm.all_reduce_s(view, 65536.0,
                                                                            alpha_beta)
    assert comm.all_gather_s(one_tier_view(2, "host", 1e9, 1e-4), 65536.0, prof) == \
        comm.all_gather_s(one_tier_view(2, "host", 1e9, 1e-4), 65536.0, alpha_beta)


@pytest.mark.parametrize("bad", [{"host:all_reduce": ROWS}, {"host:broadcast:2": ROWS},
                                 {"host:all_reduce:2": [[1024.0, 1e-3]]},
                                 {"host:all_reduce:2": [[1024.0, -1.0], [2048.0, 1e-3]]}])
def test_malformed_tables_are_refused(bad):
    with pytest.raises(ValueError, match="collective_tables"):
        Profile(collective_tables=bad)


def test_tables_come_from_the_collective_cases_and_the_switch_cost_from_interleaved_runs():
    cases = [{"op": "all_reduce", "group_size": 2, "bytes": b, "time_s": t} for b, t in ROWS]
    tables = fitting.collective_tables(cases, "host")
    assert tables == {"host:all_reduce:2": ROWS}
    link = fitting.LinkFit(1e9, 1e-4, {}, {})
    switch = 0.4e-3  # each interleaved round pays compute + the measured all-reduce + this
    inter = [{"op": "all_reduce", "group_size": 2, "bytes": b, "compute_s": c,
              "interleaved_s": c + t + switch + noise}
             for (b, t), c, noise in zip(ROWS, (1e-3, 3e-3, 2e-3, 5e-3), (1e-5, -2e-5, 0, 3e-5))]
    # a calibration written before the burst was recorded: the median extra, no skew
    assert fitting.fit_collective_switch(inter, link, "host", tables) == pytest.approx(
        (switch, 0.0, 0.0), abs=2e-5)
    faster = [{**c, "interleaved_s": c["compute_s"]} for c in inter]  # never negative
    assert fitting.fit_collective_switch(faster, link, "host", tables) == (0.0, 0.0, 0.0)


def test_the_arrival_skew_is_fitted_from_interleaved_runs_of_several_segment_lengths():
    """Rounds whose collective waits switch + skew * (sqrt(segment) - sqrt(burst)): the fit
    finds both; without the sqrt growth (every segment pays the same extra) it finds no skew;
    where the in-situ collective is faster than the tables at every length, neither."""
    cases = [{"op": "all_reduce", "group_size": 2, "bytes": b, "time_s": t} for b, t in ROWS]
    tables = fitting.collective_tables(cases, "host")
    link = fitting.LinkFit(1e9, 1e-4, {}, {})
    switch, skew, burst = 0.1e-3, 2e-3, 1e-4  # skew in s per sqrt(s)
    segments = (2e-4, 1e-3, 8e-3, 5e-2)

    def rounds(extra):
        return [{"op": "all_reduce", "group_size": 2, "bytes": b, "compute_s": c,
                 "interleaved_s": c + t + extra(c), "burst_s": burst}
                for (b, t), c in zip(ROWS, segments)]
    grown = rounds(lambda c: switch + skew * (math.sqrt(c) - math.sqrt(burst)))
    assert fitting.fit_collective_switch(grown, link, "host", tables) == pytest.approx(
        (switch, skew, burst), rel=1e-6)
    flat = rounds(lambda c: 3e-4)
    assert fitting.fit_collective_switch(flat, link, "host", tables) == pytest.approx(
        (3e-4, 0.0, burst), abs=1e-9)
    faster = rounds(lambda c: -1e-4)
    assert fitting.fit_collective_switch(faster, link, "host", tables) == (0.0, 0.0, burst)


def test_arrival_skew_grows_with_the_square_root_of_the_segment_and_starts_past_the_burst():
    prof = Profile(collective_skew_sqrt_s=1e-3, collective_burst_s=1e-4)
    assert comm.arrival_skew_s(1e-4, prof) == 0.0  # what the tables already hold
    assert comm.arrival_skew_s(1e-5, prof) == 0.0  # never negative
    assert comm.arrival_skew_s(0.04, prof) == pytest.approx(1e-3 * (0.2 - 0.01))
    assert comm.arrival_skew_s(0.04, Profile()) == 0.0  # not measured: none


def test_the_step_pays_arrival_skew_per_blocking_collective_and_once_before_a_lone_dp_sync():
    """TP: 2 forward + 2 backward all-reduces per layer, each after its share of the layer's
    pass; DP without TP, EP or a pipeline: one skew over the whole step's compute; a plan with
    neither pays nothing; a profile without the term is unchanged."""
    from cost_models.parallel import Degrees
    from cost_models.training.config import TrainingConfig
    from cost_models.training.data_parallel import backward_window_s
    from cost_models.training.step import estimate

    model, cluster, workload, tp = _llama_8b_one_node()
    skewed = Profile(collective_skew_sqrt_s=1e-3)
    a, b = (estimate(model, cluster, workload, tp, p) for p in (Profile(), skewed))
    cost = a.stages[0]
    per_layer_fwd = cost.compute_s / model.num_layers / 3  # forward : backward = 1 : 2
    calls = 2 * model.num_layers * tp.micro_batches(workload)  # per pass
    want = calls * 1e-3 * (math.sqrt(per_layer_fwd / 2) + math.sqrt(2 * per_layer_fwd / 2))
    assert b.time.tp_comm_s - a.time.tp_comm_s == pytest.approx(want, rel=0.02)
    dp = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=8), micro_batch=1)
    c, d = (estimate(model, cluster, workload, dp, p) for p in (Profile(), skewed))
    m = dp.micro_batches(workload)
    assert d.time.dp_comm_s - c.time.dp_comm_s == pytest.approx(
        1e-3 * math.sqrt(m * c.stages[0].compute_s), rel=1e-6)
    alone = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=1), micro_batch=1)
    e, f = (estimate(model, cluster, workload, alone, p) for p in (Profile(), skewed))
    assert e.time.step_s == f.time.step_s
    assert backward_window_s(3.0) == 2.0  # the 1 : 2 split the expectation above uses


def _llama_8b_one_node():
    """(model, cluster, workload, TP8 with sequence parallelism): Llama-3.1-8B on one H100
    node, 8 sequences of 1024 tokens, where the per-collective terms are checked."""
    from cost_models.parallel import Degrees
    from cost_models.training.config import TrainingConfig, Workload
    from planner.inputs.models import load_model
    from topologies.standard import homogeneous_cluster

    return (load_model("llama-3.1-8b"), homogeneous_cluster("H100-SXM5-80GB", 1),
            Workload(8, 1024), TrainingConfig(degrees=Degrees(tp=8, pp=1, dp=1),
                                              micro_batch=1, sequence_parallel=True))


def test_the_switch_cost_is_paid_per_blocking_collective_of_a_tp_layer():
    from cost_models.parallel import Degrees
    from cost_models.training.config import TrainingConfig
    from cost_models.training.step import estimate

    model, cluster, workload, cfg = _llama_8b_one_node()
    a, b = (estimate(model, cluster, workload, cfg, p)
            for p in (Profile(), Profile(collective_switch_s=1e-3)))
    # 2 fwd + 2 bwd per layer (a gather and its scatter counted as one call under sequence
    # parallelism); the vocabulary-parallel embedding and output layer 1 each and the loss 3
    # (stage.vocab_parallel_comm)
    vocab = 1 + 1 + 3
    calls = (2 * 2 * model.num_layers + vocab) * cfg.micro_batches(workload)
    assert b.time.tp_comm_s - a.time.tp_comm_s == pytest.approx(calls * 1e-3)
    none = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=8), micro_batch=1)
    c, d = (estimate(model, cluster, workload, none, p)
            for p in (Profile(), Profile(collective_switch_s=1e-3)))
    assert c.time.step_s == d.time.step_s  # no TP or EP collective: nothing to pay


def test_compute_resumes_after_each_blocking_tp_collective_and_only_then():
    """``Profile.resume_s`` is compute after every blocking TP all-reduce (2 forward, 2
    backward per layer and micro-batch, and the vocabulary-parallel embedding's, output
    layer's and loss's), not communication; nothing without TP, and only the vocabulary's
    when the layers' all-reduces are asynchronous (``tp_comm_overlap``)."""
    from cost_models.parallel import Degrees
    from cost_models.training.config import TrainingConfig
    from cost_models.training.step import estimate

    model, cluster, workload, tp8 = _llama_8b_one_node()
    resumes = Profile(resume_s=1e-3)
    a, b = (estimate(model, cluster, workload, tp8, p) for p in (Profile(), resumes))
    vocab = 1 + 1 + 3  # see the switch cost's test above
    calls = (2 * 2 * model.num_layers + vocab) * tp8.micro_batches(workload)
    assert b.time.compute_s - a.time.compute_s == pytest.approx(calls * 1e-3)
    assert b.time.tp_comm_s == a.time.tp_comm_s
    none = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=8), micro_batch=1)
    c, d = (estimate(model, cluster, workload, none, p) for p in (Profile(), resumes))
    assert c.time.step_s == d.time.step_s
    overlap = TrainingConfig(degrees=Degrees(tp=8, pp=1, dp=1), micro_batch=1,
                             sequence_parallel=True, tp_comm_overlap=True)
    c, d = (estimate(model, cluster, workload, overlap, p) for p in (Profile(), resumes))
    assert d.time.compute_s - c.time.compute_s == pytest.approx(
        vocab * overlap.micro_batches(workload) * 1e-3)


def test_the_run_prediction_prices_the_jobs_expert_gradient_sync(tmp_path):
    """The reference job all-reduces, per MoE layer, every logical expert's fp32 gradient over
    the whole DP group; the step model all-reduces each rank's own experts over expert-DP.
    The prediction adds the difference, exactly (DP4 x EP4 on the tiny MoE: expert-DP is 1),
    and the job's packing around it: per layer the buffer of all 8 experts zeroed, each of the
    rank's 2 slots added in (3 passes) and copied back (2), fp32 at the GPU's stream rate."""
    import json
    from pathlib import Path

    from cost_models.groups import stage_views
    from cost_models.model_spec import mlp_params
    from plan_helpers import solve_to
    from planner.plan.file import load_plan
    from planner.run.reference_job.shape import IMPLEMENTATION
    from planner.training.run_prediction import job_model, predict_run

    root = Path(__file__).resolve().parents[1]
    path = solve_to(tmp_path / "plan.json", "--pp", "1", "--ep", "4", "--schedule", "1f1b",
                    model=str(root / "tests" / "fixtures" / "tiny-moe.yaml"))
    plan = load_plan(path)
    shape = {"num_layers": 4, "hidden": 256, "heads": 4, "vocab": 1024, "ffn": 1024,
             "expert_ffn": 512, "seq_len": 64, "micro_batch": 1, "micro_batches": 2,
             "dp": 4, "num_experts": 8, "top_k": 2, "moe_layers": [False, True, True, True]}
    impl = {**IMPLEMENTATION, "precision": "bf16"}  # H100 has no fp32 peak in the catalog
    record = {"plan": json.loads(path.read_text()), "shape": shape, "implementation": impl}
    megatron = {**record, "implementation": {k: v for k, v in impl.items()
                                             if k != "expert_grad_sync"}}
    job, plain = predict_run(record, None), predict_run(megatron, None)
    model = job_model(shape)
    views = stage_views(plan.cluster(), plan.parallel_config().degrees)
    width = mlp_params(256, 512, False, True)
    prof = plan.profile()
    per_layer = comm.all_reduce_s(views[0].dp_cp, 4.0 * 8 * width, prof)
    stream = plan.cluster().slowest_gpu.hbm_bw_bytes_per_s * prof.hbm_efficiency
    pack = 4.0 * width * (8 + 5 * (8 // 4)) / stream
    assert job.dp_comm_s - plain.dp_comm_s == pytest.approx(3 * (per_layer + pack), rel=1e-9)
    assert job.step_s - plain.step_s == pytest.approx(3 * (per_layer + pack), rel=1e-9)
    assert model.moe.num_experts == 8


def test_the_optimizer_streams_at_stream_efficiency_where_calibrated_else_hbm_efficiency():
    """A calibrated profile measured the bandwidth on stream copies (stream_efficiency 1), and
    fitted hbm_efficiency on whole layers: the optimizer step, one pass over flat buffers,
    takes bytes / (bandwidth * 1) there, and bytes / (bandwidth * hbm_efficiency) with the
    shipped profiles (stream_efficiency 0)."""
    from cost_models.parallel import Degrees
    from cost_models.training.config import TrainingConfig, Workload
    from cost_models.training.step import estimate
    from planner.inputs.models import load_model
    from topologies.standard import homogeneous_cluster

    model = load_model("llama-3.1-8b")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1)
    workload = Workload(8, 1024)
    cfg = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=8), micro_batch=1)
    shipped, streamed = (estimate(model, cluster, workload, cfg, p) for p in (
        Profile(hbm_efficiency=0.4), Profile(hbm_efficiency=0.4, stream_efficiency=1.0)))
    assert shipped.time.optimizer_s == pytest.approx(2.5 * streamed.time.optimizer_s)
    assert Profile(hbm_efficiency=0.4).stream_eff == 0.4
    with pytest.raises(ValueError, match="stream_efficiency"):
        Profile(stream_efficiency=1.5)


def test_dispatch_bookkeeping_is_fitted_linear_in_experts_and_priced_per_moe_layer_and_micro_batch(
        tmp_path):
    """calibrate's dispatch cases give a + b * experts; the run prediction pays it once per
    MoE layer and micro-batch of the busiest stage (3 MoE layers x 2 micro-batches here), in
    the step and in check-run's quota-solve row; without EP, or with a profile that measured
    none, nothing."""
    import json
    from pathlib import Path

    from plan_helpers import solve_to
    from planner.run.check_run import compare
    from planner.run.reference_job.shape import IMPLEMENTATION
    from planner.training.run_prediction import predict_run

    cases = [{"experts": e, "time_s": 2e-4 + 3e-5 * e} for e in (4, 16, 32, 64)]
    assert fitting.fit_dispatch(cases) == pytest.approx((2e-4, 3e-5), rel=1e-9)
    assert fitting.fit_dispatch([]) == (0.0, 0.0)

    root = Path(__file__).resolve().parents[1]
    path = solve_to(tmp_path / "plan.json", "--pp", "1", "--ep", "4", "--schedule", "1f1b",
                    model=str(root / "tests" / "fixtures" / "tiny-moe.yaml"))
    shape = {"num_layers": 4, "hidden": 256, "heads": 4, "vocab": 1024, "ffn": 1024,
             "expert_ffn": 512, "seq_len": 64, "micro_batch": 1, "micro_batches": 2,
             "dp": 4, "num_experts": 8, "top_k": 2, "moe_layers": [False, True, True, True]}
    record = {"plan": json.loads(path.read_text()), "shape": shape,
              "implementation": {**IMPLEMENTATION, "precision": "bf16"}}
    measured = Profile(dispatch_solve_s=2e-4, dispatch_solve_per_expert_s=3e-5)
    with_solve, without = predict_run(record, measured), predict_run(record, Profile())
    per_dispatch = 2e-4 + 3e-5 * 8
    assert with_solve.step_s - without.step_s == pytest.approx(3 * 2 * per_dispatch, rel=1e-9)
    steps = [{"forward": 0.1, "backward": 0.2, "ep_comm": 0.01, "quota_solve": 0.004,
              "dp_comm": 0.01, "optimizer": 0.001, "step": 0.33}] * 3
    record_run = {**record, "step_times_max_s": [0.33] * 3,
                  "rank_timings": [{"rank": r, "stage": 0, "steps": steps} for r in range(4)]}
    row = next(r for r in compare(record_run, with_solve) if "quota solve" in r.what)
    assert row.predicted_s == pytest.approx(3 * 2 * per_dispatch)
    assert row.measured_s == pytest.approx(0.004)


def test_a_no_grad_call_costs_what_calibrate_timed_and_the_afd_prediction_uses_it():
    """eager_call_s is a sequence's time over its calls (median over cases); the AFD
    prediction charges it per torch call where the calibration has it, kernel_overhead_s
    where it has not."""
    from planner.serving.afd_run_prediction import machine_of

    cases = [{"calls": 19, "time_s": 19 * 4e-6}, {"calls": 19, "time_s": 19 * 6e-6},
             {"calls": 19, "time_s": 19 * 5e-6}]
    assert fitting.fit_eager_call(cases) == pytest.approx(5e-6)
    assert fitting.fit_eager_call([]) == 0.0
    doc = {"schema": "planner.calibration/v1",
           "profile": {"kernel_overhead_s": 1.3e-5, "eager_call_s": 5e-6},
           "fit": {"peak_flops": 1e11, "memory_bw_bytes_per_s": 1e10,
                   "link": {"bw_bytes_per_s": 1e9, "latency_s": 1e-4}},
           "machine": {"world_size": 2, "threads": 1}}
    assert machine_of(doc).call_s == 5e-6
    older = {**doc, "profile": {"kernel_overhead_s": 1.3e-5}}
    assert machine_of(older).call_s == 1.3e-5
    assert machine_of(doc, eager_call_s=7e-6).call_s == 7e-6  # an explicit override wins


def test_a_calls_cost_is_what_its_sequence_takes_beyond_the_math_the_model_prices():
    """The AFD prediction prices each call's math (its GEMMs and element-wise passes) apart,
    so eager_call_s holds what is left: two cases of different sizes built as calls x 5 us
    plus their modelled math give 5 us each; counting the math in the call (no rates) gives
    more for the larger case, and the median of the two is off."""
    from cost_models.compute import GpuRates

    rates = GpuRates(peak_flops=5e10, hbm_bytes_per_s=1e10, elem_bytes=4)
    prof = Profile(gemm_efficiency=0.6, gemm_half_dim=16.0, hbm_efficiency=0.5)
    cases = [{"rows": r, "width": w, "calls": 19,
              "time_s": 19 * 5e-6 + fitting.eager_math_s(r, w, rates, prof)}
             for r, w in ((4, 32), (32, 128))]
    math_large = fitting.eager_math_s(32, 128, rates, prof)
    assert math_large > 19 * 5e-6  # the larger case's math is not negligible
    assert fitting.fit_eager_call(cases, rates, prof) == pytest.approx(5e-6)
    assert fitting.fit_eager_call(cases) > 5e-6 + math_large / 19 / 2 * 0.99
    # the math grows with the GEMMs' size: 8 rows w^2 FLOP, at most at the peak
    assert math_large > 8 * 32 * 128 ** 2 / 5e10


# the AFD job's tiny model (one attention rank; the tests set the FFN ranks, micro-batches)
TINY_AFD_SHAPE = {"moe_layers": [False, True, True], "num_experts": 8, "top_k": 2,
                  "attention_ranks": 1, "shared_experts": 1, "hidden": 64, "heads": 4,
                  "vocab": 128, "batch": 8, "context": 16, "steps": 4, "seed": 0}


def _tiny_calibration(world: int, **profile: float) -> dict:
    """A ``planner.calibration/v1`` document of a small made-up machine, ``profile``'s
    measured terms added."""
    return {"schema": "planner.calibration/v1",
            "profile": {"kernel_overhead_s": 1e-5, "hbm_efficiency": 0.5,
                        "gemm_efficiency": 0.9, "gemm_half_dim": 10.0,
                        "attention_efficiency": 0.3, "link_efficiency": {"host": 1.0},
                        **profile},
            "fit": {"peak_flops": 8e10, "memory_bw_bytes_per_s": 2e10,
                    "link": {"bw_bytes_per_s": 2e9, "latency_s": 2e-4}},
            "machine": {"world_size": world, "threads": 1}}


def test_the_late_read_is_the_median_wait_and_the_afd_prediction_pays_it_where_measured():
    """late_read_s is the median over pairs of calibrate's late wait (0 for calibrations
    without it); the AFD prediction of an overlapped plan grows with it, an m = 1 plan (no
    micro-batch ever comes early) does not."""
    from planner.serving.afd_run_prediction import predict_afd_run

    cases = [{"late_wait_s": 3e-4}, {"late_wait_s": 1e-4}, {"late_wait_s": 2e-4}, {}]
    assert fitting.fit_late_read(cases) == pytest.approx(2e-4)
    assert fitting.fit_late_read([{"one_way_s": 1e-4}]) == 0.0
    doc = _tiny_calibration(2)
    late = _tiny_calibration(2, late_read_s=5e-4)
    shape = {**TINY_AFD_SHAPE, "ffn_ranks": 1}

    def record(m: int) -> dict:
        return {"shape": {**shape, "micro_batches": m}, "config": {"units": 1},
                "rank_timings": [{"threads": 1}] * 2}
    four = predict_afd_run(record(4), doc).step_s
    assert predict_afd_run(record(4), late).step_s > four
    assert predict_afd_run(record(1), late).step_s == pytest.approx(
        predict_afd_run(record(1), doc).step_s)


def test_each_isend_and_irecv_of_the_afd_job_costs_the_measured_post():
    """p2p_post_s is the median over pairs of calibrate's post time (0 without); the AFD
    job's posts (per micro-batch and MoE layer: the dispatch's isend and the result's irecv
    per FFN rank on an attention rank; the next receive's irecv and the result's isend per
    attention rank on an FFN rank) each cost it instead of a call: the pack shares grow by
    exactly posts * (post - call)."""
    from planner.serving.afd_run_prediction import job_costs, machine_of

    assert fitting.fit_p2p_post([{"post_s": 3e-5}, {"post_s": 1e-5}, {"post_s": 2e-5},
                                 {}]) == pytest.approx(2e-5)
    assert fitting.fit_p2p_post([{"one_way_s": 1e-4}]) == 0.0
    doc = _tiny_calibration(3, eager_call_s=5e-6)
    posted = _tiny_calibration(3, eager_call_s=5e-6, p2p_post_s=3e-5)
    shape = {**TINY_AFD_SHAPE, "ffn_ranks": 2, "micro_batches": 2}
    for preposted, ffn_posts in ((True, 2), (False, 3)):
        plain = job_costs(shape, 1, machine_of(doc), preposted)
        paid = job_costs(shape, 1, machine_of(posted), preposted)
        extra = 3e-5 - 5e-6
        att_posts = 2 * (2 if preposted else 3)  # per FFN rank: the message(s) and irecv
        assert paid.attention_pack_s - plain.attention_pack_s == pytest.approx(
            att_posts * extra, rel=1e-9)
        assert paid.ffn_pack_s - plain.ffn_pack_s == pytest.approx(ffn_posts * extra, rel=1e-9)
        assert paid.experts_s - plain.experts_s == pytest.approx(ffn_posts * extra, rel=1e-9)
        assert paid.ops_attention == plain.ops_attention  # still counted as calls


@pytest.mark.parametrize("zero", [0, 3])
def test_recomputed_forwards_widen_the_backward_window_that_hides_dp_communication(
        monkeypatch, zero):
    """A recomputing stage's backward runs each layer's forward again, and the gradient
    reduction (with FSDP also the next layers' gathers) overlaps that time too. With gradients
    G = 3 s and parameters P = 0.5 s per reduction, a micro-batch's compute F = 3 s and its
    recompute R = 0.6 s: without ZeRO-3 (overlap_grad_reduce, no param-gather overlap) the
    exposed part is max(0, G - (2F/3 + R)) + P = 0.9 s (1.5 s without R in the window); with
    ZeRO-3, per micro-batch, max(0, P - F/3) + max(0, P + G - (2F/3 + R)) = 0.9 s (1.5 s).
    While a collective overlaps compute c it holds f = 20/132 of the SMs
    (``COMM_SM_SHARE``): the pair takes max(comm, c + min(comm, c) * 20/112). Without ZeRO-3
    and with R, the slowed backward (2.6 s * 132/112 = 3.064 s) outlasts G = 3 s: 0.464 s
    over the window instead of 0.4 s; the other cases' collectives outlast their slowed
    windows and are exposed as before. With ZeRO-3 the forward's gather (P under F/3 = 1 s)
    adds 0.5 * 20/112 s per micro-batch."""
    from cost_models.parallel import Degrees
    from cost_models.training import data_parallel as dp_module
    from cost_models.training.config import TrainingConfig
    from cost_models.training.context import make_context
    from cost_models.training.stage import StageCost

    model, cluster, workload, _ = _llama_8b_one_node()
    monkeypatch.setattr(dp_module, "_dp_comm", lambda ctx, stage, dense, expert: (3.0, 0.5))
    cfg = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=8), micro_batch=1, zero=zero,
                         overlap_grad_reduce=True, overlap_param_gather=False)
    ctx = make_context(model, cluster, workload, cfg, Profile(), ())
    m = 4
    gather = 0.5 * 20 / 112 if zero else 0.5
    for recompute_s, backward in ((0.6, 0.9 if zero else 2.6 * 132 / 112 - 2.6),
                                  (0.0, 1.5 if zero else 1.0)):
        cost = StageCost(stage=0, layers=4, compute_s=3.0, recompute_s=recompute_s,
                         tp_comm_s=0.0, cp_comm_s=0.0, ep_comm_s=0.0, pp_comm_s=0.0)
        sync = dp_module.stage_sync(ctx, 0, range(model.num_layers), cost, m)
        assert sync.exposed_s == pytest.approx((gather + backward) * (m if zero else 1))


def test_only_overlapped_dp_communication_slows_the_compute(monkeypatch):
    """Without overlap the gradient reduction and the gather run alone: the step pays them in
    full (G + P = 3.5 s) and nothing more. With both overlapped, a short reduction (G = 0.3 s
    inside the 2 s backward window, P = 0.2 s inside the 1 s forward window) is hidden, and
    the step pays only the compute it slowed, (G + P) * 20/112."""
    from cost_models.parallel import Degrees
    from cost_models.training import data_parallel as dp_module
    from cost_models.training.config import TrainingConfig
    from cost_models.training.context import make_context
    from cost_models.training.stage import StageCost

    model, cluster, workload, _ = _llama_8b_one_node()
    cost = StageCost(stage=0, layers=4, compute_s=3.0, recompute_s=0.0,
                     tp_comm_s=0.0, cp_comm_s=0.0, ep_comm_s=0.0, pp_comm_s=0.0)
    for overlap, comm_s, expected in ((False, (3.0, 0.5), 3.5), (True, (0.3, 0.2), 0.5 * 20 / 112)):
        monkeypatch.setattr(dp_module, "_dp_comm", lambda ctx, stage, d, e, c=comm_s: c)
        cfg = TrainingConfig(degrees=Degrees(tp=1, pp=1, dp=8), micro_batch=1, zero=1,
                             overlap_grad_reduce=overlap, overlap_param_gather=overlap)
        ctx = make_context(model, cluster, workload, cfg, Profile(), ())
        sync = dp_module.stage_sync(ctx, 0, range(model.num_layers), cost, 4)
        assert sync.exposed_s == pytest.approx(expected)


def test_overlapped_tp_collectives_hide_only_behind_their_own_gemm():
    """With ``tp_comm_overlap`` each block's all-gather runs fused with the GEMM it feeds and
    its reduce-scatter with the GEMM that produces it, so the attention block's collectives
    cannot hide behind the MLP's GEMMs: widening the MLP leaves the exposed time as it was
    (the old aggregate rule, everything behind all of the layer's GEMMs, hid it all), and the
    exposed time stays below the blocking collectives' time."""
    from dataclasses import replace

    from cost_models.training.config import Workload
    from cost_models.training.step import estimate

    model, cluster, _, tp8 = _llama_8b_one_node()
    workload = Workload(8, 8192)
    over = replace(tp8, tp_comm_overlap=True)
    blocking = estimate(model, cluster, workload, tp8, Profile()).time.tp_comm_s
    exposed = estimate(model, cluster, workload, over, Profile()).time.tp_comm_s
    wide = replace(model, ffn_hidden_size=4 * model.ffn_hidden_size)
    wide_exposed = estimate(wide, cluster, workload, over, Profile()).time.tp_comm_s
    assert 0 < exposed < 0.5 * blocking
    assert wide_exposed == pytest.approx(exposed)


def test_weighting_the_interleave_cases_holds_the_skew_when_their_error_grows_with_the_segment():
    """Extras that follow switch + skew * (sqrt(segment) - sqrt(burst)) at calibrate's
    segments (0.05-90 ms, as on the 2-vCPU box) plus an error of 3% of each segment, under
    every pattern of signs: weighted by 1 / (segment + burst)^2 the fitted skew is never
    further from the truth than the unweighted least squares', and its typical error is under
    a third of theirs (the long segments' errors set the unweighted fit)."""
    cases = [{"op": "all_reduce", "group_size": 2, "bytes": b, "time_s": t} for b, t in ROWS]
    tables = fitting.collective_tables(cases, "host")
    link = fitting.LinkFit(1e9, 1e-4, {}, {})
    skew, burst = 1e-2, 1.4e-3
    segments = (5e-5, 3e-4, 1e-3, 2.5e-3, 2.5e-3, 6e-3, 0.02, 0.09)
    b, t = ROWS[0]
    grown = [skew * max(0.0, math.sqrt(c) - math.sqrt(burst)) for c in segments]
    rows = [(1.0, max(0.0, math.sqrt(c) - math.sqrt(burst))) for c in segments]
    weighted, plain = [], []
    for signs in itertools.product((1, -1), repeat=len(segments)):
        extra = [g + 0.03 * c * s for g, c, s in zip(grown, segments, signs)]
        noisy = [{"op": "all_reduce", "group_size": 2, "bytes": b, "compute_s": c,
                  "interleaved_s": c + t + e, "burst_s": burst} for c, e in zip(segments, extra)]
        weighted.append(abs(fitting.fit_collective_switch(noisy, link, "host", tables)[1] - skew))
        plain.append(abs(fitting.nonneg_lstsq2(rows, extra)[1] - skew))
    assert all(w <= p + 1e-12 for w, p in zip(weighted, plain))
    assert statistics.median(weighted) < statistics.median(plain) / 3


@pytest.mark.parametrize("pp", [1, 2])
def test_the_step_model_counts_the_reference_jobs_blocking_tp_collectives(monkeypatch, pp):
    """Each blocking TP collective of a micro-batch costs ``resume_s`` of compute in the step
    model, so the model's count is the compute a unit ``resume_s`` adds. It equals the
    all-reduces the reference job's TP ranks really make for one micro-batch, forward and
    backward, counted by replacing ``torch.distributed.all_reduce``: four per layer and, split
    by vocabulary as Megatron-Core splits them, one for the embedding on the first stage and
    four for the output layer and loss on the last (the model priced neither until the job
    split them: a replicated head had run the full vocabulary on every TP rank)."""
    torch = pytest.importorskip("torch")
    from cost_models.groups import stage_views
    from cost_models.parallel import Degrees
    from cost_models.training.config import TrainingConfig, Workload
    from cost_models.training.context import make_context
    from cost_models.training.stage import stage_cost
    from planner.inputs.models import load_model_file
    from planner.run.reference_job.model import Stage, batch
    from planner.run.reference_job.shape import JobShape
    from planner.run.reference_job.timers import Timers
    from planner.run.reference_job.tp import shard_block, shard_vocab
    from topologies.standard import homogeneous_cluster

    model = load_model_file("benchmarks/data/reference-gpt.yaml")
    cluster = homogeneous_cluster("H100-SXM5-80GB", 1)
    cfg = TrainingConfig(degrees=Degrees(tp=2, pp=pp, dp=4 // pp), micro_batch=1)
    views = stage_views(cluster, cfg.degrees, None)
    per = model.num_layers // pp

    def modelled(stage: int) -> float:
        def compute(resume_s: float) -> float:
            ctx = make_context(model, cluster, Workload(128, 8), cfg, Profile(resume_s=resume_s),
                               views).on_stage(stage)
            return stage_cost(ctx, stage, range(stage * per, (stage + 1) * per), {}).compute_s
        return (compute(1e-3) - compute(0.0)) / 1e-3

    calls = []
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda *a, **k: calls.append(1))
    shape = JobShape(num_layers=model.num_layers, hidden=model.hidden_size,
                     heads=model.num_heads, vocab=model.vocab_size, seq_len=16)
    for stage in range(pp):
        calls.clear()
        layers = tuple(range(stage * per, (stage + 1) * per))
        job = Stage(shape, layers, stage == 0, stage == pp - 1)
        timers, group = Timers(None), object()  # all_reduce is the counter: any group does
        for block in job.blocks:
            shard_block(block, 0, 2, group, timers)
        shard_vocab(job, 0, 2, group, timers)
        x, y = batch(shape, 0)
        inp = x[:1] if stage == 0 else torch.randn(1, 16, shape.hidden, requires_grad=True)
        out = job(inp)
        (job.loss(out, y[:1], y[:1].numel()) if stage == pp - 1 else out.sum()).backward()
        expected = 4 * per + (1 if stage == 0 else 0) + (4 if stage == pp - 1 else 0)
        assert len(calls) == expected
        assert modelled(stage) == pytest.approx(expected)


@pytest.mark.parametrize("name", ["reference-gpt", "reference-moe"])
def test_the_jobs_gradient_bucket_holds_the_parameters_the_model_syncs(name):
    """The reference job all-reduces its dense parameters' gradients in one bucket
    (``dp.dense_params``): exactly the non-expert parameters the step model prices for the DP
    all-reduce (``layers.stage_params``), plus the LM head's bias and the final LayerNorm,
    which the model leaves out (1,536 values here). MoE layers hold no dense MLP beside their
    experts: the job had kept one, unused, and all-reduced its 1.6M zero gradients every step
    (the MoE plan's bucket 75% larger than priced)."""
    pytest.importorskip("torch")
    from cost_models.parallel import Degrees
    from cost_models.training.config import TrainingConfig
    from cost_models.training.layers import stage_params
    from planner.inputs.models import load_model_file
    from planner.run.reference_job.dp import dense_params
    from planner.run.reference_job.model import Stage
    from planner.run.reference_job.shape import JobShape

    m = load_model_file(f"benchmarks/data/{name}.yaml")
    moe = m.moe
    ep = 2 if moe else 1
    dense, _ = stage_params(m, TrainingConfig(degrees=Degrees(dp=2, ep=ep)), 0,
                            tuple(range(m.num_layers)))
    shape = JobShape(num_layers=m.num_layers, hidden=m.hidden_size, heads=m.num_heads,
                     vocab=m.vocab_size, ffn=m.ffn_hidden_size,
                     expert_ffn=moe.expert_ffn_hidden if moe else 0,
                     moe_layers=tuple(m.moe_layers) if moe else (),
                     num_experts=moe.num_experts if moe else 0, top_k=moe.top_k if moe else 0)
    job = Stage(shape, tuple(range(m.num_layers)), True, True)
    bucket = sum(p.numel() for p in dense_params(job, ep))
    assert bucket == dense + m.vocab_size + 2 * m.hidden_size


def test_each_mtp_module_runs_the_vocabulary_parallel_embedding_head_and_loss_again():
    """DeepSeek-V3's MTP module on the last stage embeds the shifted tokens, projects and runs
    the shared output layer and a loss (DeepSeek-V3 report, sec. 2.2): under TP that is the
    embedding's all-reduce, the output layer's and the loss's three again. The last stage of
    a TP2 PP2 layout makes 4 + 5 blocking vocabulary collectives a micro-batch, the first 1;
    the module adds the embedding's and the output layer's and loss's time."""
    from cost_models.groups import stage_views
    from cost_models.parallel import Degrees
    from cost_models.training.config import TrainingConfig, Workload
    from cost_models.training.context import make_context
    from cost_models.training.stage import vocab_parallel_comm
    from dataclasses import replace
    from planner.inputs.models import load_model
    from topologies.standard import homogeneous_cluster

    with_mtp = load_model("deepseek-v3")
    assert with_mtp.mtp_layers == 1
    cluster = homogeneous_cluster("H100-SXM5-80GB", 4)
    cfg = TrainingConfig(degrees=Degrees(tp=2, pp=2, dp=8, ep=8), micro_batch=1)
    views = stage_views(cluster, cfg.degrees, None)
    out = {}
    for model in (with_mtp, replace(with_mtp, mtp_layers=0)):
        ctx = make_context(model, cluster, Workload(4096, 64), cfg, Profile(), views)
        out[model.mtp_layers] = [vocab_parallel_comm(ctx.on_stage(s), views[s], s)
                                 for s in range(2)]
    assert [calls for _, calls in out[1]] == [1, 4 + 5]
    assert [calls for _, calls in out[0]] == [1, 4]
    embedding, head_and_loss = out[0][0][0], out[0][1][0]  # one activation collective, and
    assert out[1][0][0] == embedding                       # one plus the loss's three
    assert embedding > 0 and head_and_loss > embedding
    assert out[1][1][0] == pytest.approx(head_and_loss + embedding + head_and_loss)
