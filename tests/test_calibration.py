"""planner calibrate / check-run: the fits recover known parameters, and the whole loop
(calibrate -> solve on the measured machine -> launch -> check-run) runs on CPU with gloo."""
from __future__ import annotations

import itertools
import json
import random
import socket
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cost_models import fitting
from cost_models.compute import (Gemm, GpuRates, LayerTime, Shard, backward_time_s, gemm_time_s,
                                  layer_forward_time, layer_work)
from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile
from planner.cli.app import app
from planner.inputs.clusters import load_cluster

ROOT = Path(__file__).resolve().parents[1]

RUNNER = CliRunner()


@pytest.mark.parametrize("efficiency,half_keys", [(0.2, 0.0), (0.65, 0.0),
                                                   (0.2, fitting.ATTENTION_HALF_KEYS_GRID[12]),
                                                   (0.65, fitting.ATTENTION_HALF_KEYS_GRID[20])])
def test_attention_fit_recovers_the_efficiency_the_step_model_times_with(efficiency, half_keys):
    """Timings made by the cost model itself - a layer's attention forward from ``compute``
    (its attention FLOPs at ``attention_efficiency`` on the curve of ``attention_half_keys``)
    plus its backward as the step model adds it (``forward + compute.backward_time_s``) - must
    give that efficiency and knee back: the fit counts attention FLOPs, keys per query and the
    backward as the models it calibrates do (a fit with another backward ratio, FLOP count or
    key count recovers other numbers)."""
    peak = 50e9
    rates = GpuRates(peak, 1e12, False, 4)
    prof = Profile(attention_efficiency=efficiency, attention_half_keys=half_keys)
    cases = []
    for b, heads, s, d in ((1, 4, 64, 16), (2, 8, 256, 32), (4, 2, 512, 64)):
        model = ModelSpec(name="attn", num_layers=1, hidden_size=heads * d, num_heads=heads,
                          num_kv_heads=heads, head_dim=d, ffn_hidden_size=4 * heads * d,
                          vocab_size=128)
        shard = Shard(batch=b, seq_len=s, tp=1, cp=1, ep=1, etp=1, sequence_parallel=False,
                      unfused_attention=False, dropout=False, elem_bytes=4)
        forward = layer_forward_time(layer_work(model, 0, shard), rates, prof)
        attention = LayerTime(gemm_s=0.0, attention_s=forward.attention_s, elementwise_s=0.0,
                              overhead_s=0.0)
        cases.append({"batch": b, "heads": heads, "seq": s, "head_dim": d,
                      "time_s": attention.total_s + backward_time_s(attention)})
    fit = fitting.fit_attention(cases, peak)
    assert (fit.efficiency, fit.half_keys) == pytest.approx((efficiency, half_keys), rel=1e-9)
    assert fit.call_s == pytest.approx(0.0, abs=1e-12)
    # the same calls, each also paying a fixed time (the launches of small calls on a GPU):
    # the curve comes back, and the fixed time with it
    launched = [{**c, "time_s": c["time_s"] + 2e-4} for c in cases]
    fit = fitting.fit_attention(launched, peak)
    assert (fit.efficiency, fit.half_keys, fit.call_s) == pytest.approx(
        (efficiency, half_keys, 2e-4), rel=1e-6)


@pytest.mark.parametrize("seed", range(20))
def test_nonneg_lstsq2_matches_a_brute_force_grid(seed):
    rng = random.Random(seed)
    rows = [(rng.uniform(-1, 2), rng.uniform(-1, 2)) for _ in range(6)]
    target = [rng.uniform(-1, 2) for _ in rows]

    def loss(x):
        return sum((a * x[0] + b * x[1] - y) ** 2 for (a, b), y in zip(rows, target))
    got = fitting.nonneg_lstsq2(rows, target)
    assert min(got) >= 0
    grid = [i / 200 for i in range(0, 801)]
    best = min(((x, y) for x in grid[::4] for y in grid[::4]), key=loss)
    assert loss(got) <= loss(best) + 1e-9


@pytest.mark.parametrize("seed", range(20))
def test_nonneg_lstsq_agrees_with_the_two_unknown_closed_form(seed):
    # nonneg_lstsq2 is nonneg_lstsq's closed form for two unknowns (no numpy): same optimum
    rng = random.Random(100 + seed)
    rows = [(rng.uniform(-1, 2), rng.uniform(-1, 2)) for _ in range(6)]
    target = [rng.uniform(-1, 2) for _ in rows]
    assert fitting.nonneg_lstsq(rows, target) == pytest.approx(
        fitting.nonneg_lstsq2(rows, target), abs=1e-9)


def test_gemm_fit_recovers_the_curve_it_was_made_with():
    prof = Profile(gemm_efficiency=0.8, gemm_half_dim=40.0, hbm_efficiency=1.0)
    rates = GpuRates(100e9, 1e15, False, 4)  # memory never binds
    cases = [{"m": m, "n": n, "k": k, "time_s": gemm_time_s(Gemm(m, n, k), rates, prof)}
             for m, n, k in itertools.product((16, 64, 256, 1024), (32, 512), (64, 2048))]
    fit = fitting.fit_gemm(cases)
    assert fit.peak_flops * fit.efficiency == pytest.approx(80e9, rel=1e-9)
    assert fit.half_dim == pytest.approx(40.0, rel=1e-9)
    assert fit.efficiency <= 1.0


def test_link_fit_recovers_latency_bandwidth_and_per_op_factors():
    truth = fitting.LinkFit(2e9, 50e-6, {"all_gather": 0.5, "send_recv": 2.0},
                            {"all_gather": 1.5, "all_to_all": 0.25})
    cases = [{"op": op, "group_size": g, "bytes": b}
             for op in fitting.COLLECTIVES for g in (2, 4) for b in (2**10, 2**16, 2**22)
             if op != "send_recv" or g == 2]
    for c in cases:
        c["time_s"] = fitting.predict_collective(c, truth)
    fit = fitting.fit_link_per_op(cases)
    assert fit.bw_bytes_per_s == pytest.approx(2e9, rel=1e-6)
    assert fit.latency_s == pytest.approx(50e-6, rel=1e-6)
    for op in fitting.COLLECTIVES:
        assert fit.latency_factor.get(op, 1.0) == pytest.approx(
            truth.latency_factor.get(op, 1.0), rel=1e-6)
        assert fit.bw_factor.get(op, 1.0) == pytest.approx(truth.bw_factor.get(op, 1.0),
                                                           rel=1e-6)


@pytest.mark.parametrize("hbm_eff, cold", [(0.3, 0.0), (1.0, 0.0), (0.3, 9e-11), (1.0, 9e-11)])
def test_layer_fit_recovers_elementwise_efficiency_kernel_overhead_and_cold_weights(hbm_eff,
                                                                                    cold):
    prof = Profile(gemm_efficiency=0.9, gemm_half_dim=20.0, attention_efficiency=0.3,
                   hbm_efficiency=hbm_eff, kernel_overhead_s=7e-6, cold_weight_s_per_byte=cold)
    rates = GpuRates(5e9, 10e9, False, 4)  # element-wise kernels weigh; GEMMs stay compute-bound
    cases = []
    for b, s, h in ((1, 16, 32), (2, 64, 64), (1, 128, 128), (4, 128, 256), (1, 32, 384)):
        case = {"batch": b, "seq": s, "hidden": h, "heads": 4, "ffn": 4 * h}
        work, kernels = fitting.layer_train_parts_s(case, rates, prof)
        cases.append({**case, "time_s": work + kernels * 7e-6})
    eff, overhead, got_cold = fitting.fit_layer_overheads(cases, rates, Profile(**{
        **prof.__dict__, "hbm_efficiency": 0.5, "kernel_overhead_s": 0.0,
        "cold_weight_s_per_byte": 1e-9}))
    assert eff == pytest.approx(hbm_eff, rel=1e-4)
    assert overhead == pytest.approx(7e-6, rel=1e-4)
    assert got_cold == pytest.approx(cold, rel=1e-4, abs=1e-16)
    # a GEMM's weight load is a fixed cost: the same layer at 4x the tokens pays it once
    one = {"batch": 1, "seq": 128, "hidden": 256, "heads": 4, "ffn": 1024}
    four = {**one, "batch": 4}
    base = Profile(**{**prof.__dict__, "cold_weight_s_per_byte": 0.0})
    extra = [fitting.layer_case_s(c, rates, prof) - fitting.layer_case_s(c, rates, base)
             for c in (one, four)]
    weights = 4 * (3 * 256 * 256 + 256 * 256 + 2 * 256 * 1024)  # fp32 qkv, proj, fc1, fc2
    assert extra == pytest.approx([3 * cold * weights] * 2, rel=1e-9, abs=1e-15)


def test_nonneg_least_squares_is_the_best_non_negative_point():
    """Against nonneg_lstsq2's closed form on two unknowns, and a grid on three."""
    import itertools

    import numpy as np

    rng = np.random.default_rng(3)
    for _ in range(200):
        a = rng.normal(size=(6, 2))
        y = rng.normal(size=6)
        rows = [tuple(r) for r in a]
        assert fitting.nonneg_lstsq(rows, y) == pytest.approx(
            fitting.nonneg_lstsq2(rows, list(y)), abs=1e-9)
    grid = np.linspace(0.0, 2.0, 41)
    for _ in range(20):
        a = rng.normal(size=(7, 3))
        y = a @ rng.uniform(-1.0, 1.5, size=3) + 0.1 * rng.normal(size=7)
        x = np.asarray(fitting.nonneg_lstsq([tuple(r) for r in a], y))
        assert np.all(x >= 0)
        best = min(float(np.sum((a @ np.asarray(p) - y) ** 2))
                   for p in itertools.product(grid, repeat=3))
        assert float(np.sum((a @ x - y) ** 2)) <= best + 1e-12


def test_bandwidth_fit_uses_the_copies_larger_than_a_cache():
    cases = [{"bytes": b, "moved_bytes": 3 * b, "time_s": 3 * b / bw}
             for b, bw in ((2**20, 90e9), (16 * 2**20, 60e9), (64 * 2**20, 20e9))]
    assert fitting.fit_bandwidth(cases) == pytest.approx(20e9)
    assert fitting.fit_bandwidth(cases[:2]) == pytest.approx(60e9)  # else the largest


def test_link_fit_takes_bandwidth_from_large_messages_and_latency_from_small_ones():
    """Medium messages off the alpha-beta line (here 5x slower, as a cache or protocol switch
    can make them) must not drag the fit: the large messages set the bandwidth, the small ones
    the latency, and both come back exactly."""
    truth = fitting.LinkFit(1e9, 300e-6, {}, {})
    cases = []
    for b in (2**10, 2**12, 2**14, 2**16, 2**17, 2**18, 2**19, 2**20, 2**22, 2**24):
        case = {"op": "all_reduce", "group_size": 2, "bytes": b}
        t = fitting.predict_collective(case, truth)
        cases.append({**case, "time_s": t * (5 if 2**16 < b < 2**20 else 1)})
    bw, latency = fitting.fit_link(cases)
    assert bw == pytest.approx(1e9, rel=1e-6)
    assert latency == pytest.approx(300e-6, rel=1e-6)


def test_profile_rejects_unknown_collectives():
    with pytest.raises(ValueError, match="collective_bw_factor"):
        Profile(collective_bw_factor={"broadcast": 2.0})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_calibrate_solve_launch_check_run(tmp_path):
    """The loop on this machine: every file is written and read back, every command exits 0."""
    pytest.importorskip("torch")
    cal, machine = tmp_path / "cal.json", tmp_path / "cal.cluster.yaml"
    result = RUNNER.invoke(app, ["calibrate", "--quick", "--nproc", "2", "--out", str(cal),
                                 "--master-port", str(_free_port())])
    assert result.exit_code == 0, result.output
    assert "gemm_efficiency" in result.output and "all_reduce" in result.output
    doc = json.loads(cal.read_text())
    assert doc["schema"] == "planner.calibration/v1"
    assert doc["raw"]["world_size"] == 2
    assert {c["op"] for c in doc["raw"]["collectives"]} >= {"all_reduce", "all_to_all",
                                                            "send_recv"}
    prof = doc["profile"]
    assert 0 < prof["gemm_efficiency"] <= 1 and prof["kernel_overhead_s"] >= 0
    # every compute case and collective ran in two passes and keeps their median
    # (calibrate_job.merge_passes)
    for case in doc["raw"]["collectives"]:
        assert case["time_s"] == pytest.approx(sum(case["pass_times_s"]) / 2)
    for bench in ("gemm", "attention", "layer", "copy", "decode_gemm", "eager"):
        for case in doc["raw"]["compute"][0][bench]:
            first, second = case["pass_times_s"]
            assert case["time_s"] == pytest.approx((first + second) / 2)
    # the ping-pong of one pair: the waiting rank's forward and the message's one-way time
    (pair,) = doc["raw"]["resume"]
    assert pair["pair"] == [0, 1] and pair["reps"] == 20
    assert 0 < pair["hot_s"] and 0 < pair["after_wait_s"] and 0 < pair["one_way_s"]
    assert prof["p2p_latency_s"] == pair["one_way_s"]
    assert prof.get("resume_s", 0.0) == max(0.0, pair["after_wait_s"] - pair["hot_s"])
    # the late read: a message that came while the receiver computed, waited for afterwards
    assert pair["late_wait_s"] >= 0 and prof.get("late_read_s", 0.0) == pair["late_wait_s"]
    # posting an isend / irecv: timed on both ranks, their mean the profile's post cost
    assert pair["post_s"] > 0 and prof["p2p_post_s"] == pair["post_s"]
    # every gloo transport thread of the measurement ran idle (planner.run.transport_threads)
    assert doc["raw"]["conditions"]["idle_transport_threads"] >= 1
    # the serving fit: the decode benchmarks ran and set the KV read efficiency
    assert "kv_read_efficiency" in result.output and "decode_attention" in result.output
    assert 0 < doc["serving"]["kv_read_efficiency"] <= 1
    assert {r["kind"] for r in doc["fit"]["serving"]["residuals"]} == {"decode_gemm",
                                                                        "decode_attention"}
    cluster = load_cluster(str(machine))
    assert cluster.num_gpus == 2 and cluster.node_groups[0].fabric == "host"
    assert yaml.safe_load(machine.read_text())["node_groups"][0]["gpu"]["peak_tflops"]["fp32"] > 0

    model = tmp_path / "model.yaml"
    model.write_text(yaml.safe_dump({
        "name": "ref-small", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
        "num_kv_heads": 4, "head_dim": 16, "ffn_hidden_size": 256, "vocab_size": 128,
        "glu": False, "activation": "gelu", "norm": "layernorm", "qkv_bias": True,
        "attn_out_bias": True, "mlp_bias": True}))
    plan = tmp_path / "plan.json"
    result = RUNNER.invoke(app, ["solve", "--cluster", str(machine), "--calibration", str(cal),
                                 "--model", str(model), "--precision", "fp32", "--optimizer",
                                 "sgd", "--global-batch", "4", "--seq-len", "32", "--pp", "2",
                                 "--schedule", "1f1b", "--out", str(plan)])
    assert result.exit_code == 0, result.output
    record = tmp_path / "run.json"
    result = RUNNER.invoke(app, ["launch", str(plan), "--record", str(record),
                                 "--master-port", str(_free_port()), "--script-arg=--size",
                                 "--script-arg=plan", "--script-arg=--steps", "--script-arg=3",
                                 "--script-arg=--device", "--script-arg=cpu"])
    assert result.exit_code == 0, result.output
    result = RUNNER.invoke(app, ["check-run", str(record), "--calibration", str(cal),
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    # stdout alone: a loaded machine adds condition warnings on stderr
    rows = {r["what"]: r for r in json.loads(result.stdout)}
    assert rows["step"]["predicted_s"] > 0 and rows["step"]["measured_s"] > 0
    assert any(w.startswith("stage 1: pipeline wait") for w in rows)
    result = RUNNER.invoke(app, ["check-run", str(record), "--calibration", str(cal)])
    assert result.exit_code == 0 and "predicted vs measured" in result.output


def test_check_run_names_what_a_record_lacks(tmp_path):
    bad = tmp_path / "rec.json"
    bad.write_text(json.dumps({"schema": "planner.run-record/v1", "plan": {}}))
    result = RUNNER.invoke(app, ["check-run", str(bad)])
    assert result.exit_code == 2
    assert "shape" in result.output and str(bad) in result.output
    bad.write_text("[1, 2]")
    result = RUNNER.invoke(app, ["check-run", str(bad)])
    assert result.exit_code == 2 and "schema" in result.output


def test_fp32_sgd_workload_costs_four_byte_states_and_no_optimizer_moments():
    from cost_models.parallel import Degrees
    from cost_models.training.config import TrainingConfig, Workload
    from cost_models.training.step import estimate
    from planner.inputs.models import load_model
    from topologies.spec import cluster_from_dict

    model = load_model("llama-3.1-8b")
    cluster = cluster_from_dict({"node_groups": [{
        "name": "box", "count": 1, "gpus_per_node": 8, "fabric": "host", "intra_bw_GBps": 10,
        "gpu": {"name": "test-device", "memory_gb": 512, "memory_bw_GBps": 1000,
                "peak_tflops": {"bf16": 400, "fp32": 50}}}]})
    cfg = TrainingConfig(degrees=Degrees(tp=8), zero=0)
    mixed = estimate(model, cluster, Workload(2048, 8), cfg, Profile())
    fp32 = estimate(model, cluster, Workload(2048, 8, "fp32", "sgd"),
                    cfg, Profile())
    assert fp32.memory.weights_bytes == pytest.approx(2 * mixed.memory.weights_bytes)
    assert fp32.memory.optimizer_bytes == 0
    assert fp32.memory.activations_bytes == pytest.approx(2 * mixed.memory.activations_bytes)
    assert Workload(1, 1, "fp32", "sgd").optimizer_bytes_per_param == 12
    assert Workload(1, 1).optimizer_bytes_per_param == 30


def _gpu_layer_cases(rates, prof) -> list[dict]:
    """Layer cases timed as the step model prices a layer on a GPU (launches overlap the
    device's work), from launch-bound to GEMM-bound."""
    cases = []
    for b, s, h, a in ((1, 128, 256, 4), (1, 512, 512, 8), (2, 1024, 1024, 16),
                       (3, 2048, 1536, 12), (2, 4096, 3072, 24), (1, 4096, 4096, 32)):
        case = {"batch": b, "seq": s, "hidden": h, "heads": a, "ffn": 4 * h}
        cases.append({**case, "time_s": fitting.layer_case_s(case, rates, prof)})
    return cases


def test_gpu_layer_fit_recovers_the_gap_the_cpus_issue_time_and_the_efficiency():
    # a GPU of 700 TFLOP/s and 4 TB/s in bf16; values on the fit's grids
    rates = GpuRates(700e12, 4e12, False, 2)
    truth = Profile(gemm_efficiency=0.9, gemm_half_dim=150.0, attention_efficiency=0.6,
                    hbm_efficiency=1 / 1.5, kernel_overhead_s=2.5e-6, host_launch_s=30e-6)
    cases = _gpu_layer_cases(rates, truth)
    # both regimes present: the smallest case waits on the CPU, the largest on the GPU
    small, large = fitting._layer_forward(cases[0], rates, truth)[0], \
        fitting._layer_forward(cases[-1], rates, truth)[0]
    assert small.host_s > small.gpu_s and large.gpu_s > large.host_s
    start = Profile(**{**truth.__dict__, "hbm_efficiency": 0.9, "kernel_overhead_s": 0.0,
                       "host_launch_s": 0.0})
    eff, gap, issue = fitting.fit_layer_launches(cases, rates, start)
    assert eff == pytest.approx(1 / 1.5, rel=1e-9)
    assert gap == pytest.approx(2.5e-6, rel=1e-9)
    assert issue == pytest.approx(30e-6, rel=1e-9)


def test_on_overlapped_launches_the_additive_fit_is_wrong_and_the_gpu_fit_exact():
    rates = GpuRates(700e12, 4e12, False, 2)
    truth = Profile(gemm_efficiency=0.9, gemm_half_dim=150.0, attention_efficiency=0.6,
                    hbm_efficiency=1 / 1.5, kernel_overhead_s=2.5e-6, host_launch_s=30e-6)
    layers = _gpu_layer_cases(rates, truth)
    gpu = fitting.fit_layer_launches(layers, rates, truth)
    cpu = fitting.fit_layer_overheads(layers, rates, truth)
    # the additive fit reads the CPU's issue time as GPU time per kernel: far above the gap
    assert cpu[1] > 4 * gpu[1]
    additive = [fitting.layer_case_s(c, rates, Profile(**{
        **truth.__dict__, "hbm_efficiency": cpu[0], "kernel_overhead_s": cpu[1],
        "cold_weight_s_per_byte": cpu[2], "host_launch_s": 0.0})) / c["time_s"] - 1
                for c in layers]
    overlapped = [fitting.layer_case_s(c, rates, Profile(**{
        **truth.__dict__, "hbm_efficiency": gpu[0], "kernel_overhead_s": gpu[1],
        "host_launch_s": gpu[2]})) / c["time_s"] - 1 for c in layers]
    assert max(map(abs, overlapped)) < 1e-9 < 0.05 < max(map(abs, additive))


def test_refit_of_a_lent_h200_overlaps_launches_and_explains_its_layers():
    """The raw timings of ``planner calibrate --backend nccl`` on the lent H200 (2026-11-28,
    ``tests/fixtures/h200-calibration-raw.json``): fit_all takes the GPU's layer model, and
    it explains the layer cases (median residual 24% with the additive model)."""
    raw = json.loads((ROOT / "tests" / "fixtures" / "h200-calibration-raw.json").read_text())
    assert raw["backend"] == "nccl"
    fit = fitting.fit_all(raw, tier="nvswitch", elem_bytes=2)
    assert fit.profile.host_launch_s > 10 * fit.profile.kernel_overhead_s > 0
    layer = sorted(abs(r.error) for r in fit.residuals if r.kind == "layer")
    assert layer[len(layer) // 2] < 0.05
    cpu = fitting.fit_all({**raw, "backend": "gloo"}, tier="nvswitch", elem_bytes=2)
    assert cpu.profile.host_launch_s == 0.0  # a CPU's kernels run on the issuing core
    additive = sorted(abs(r.error) for r in cpu.residuals if r.kind == "layer")
    assert additive[len(additive) // 2] > 0.15


def test_the_gpu_layer_grid_pins_the_element_wise_efficiency_under_noise():
    """planner calibrate's GPU layer grid (``calibrate_job.GPU``), timed by the step model
    with 3% noise: the fitted ``hbm_efficiency`` stays within 20% of the truth in every one
    of 8 noise draws (the grid has a GPU-bound case where element-wise kernels weigh; without
    it the fit wandered over 0.60-1.0 for a true 0.7)."""
    from planner.run.calibrate_job import GPU

    rates = GpuRates(720e12, 4.2e12, False, 2)
    truth = Profile(gemm_efficiency=1.0, gemm_half_dim=180.0, attention_efficiency=0.7,
                    hbm_efficiency=0.7, kernel_overhead_s=3e-6, host_launch_s=40e-6)
    for seed in range(8):
        rng = random.Random(seed)
        cases = []
        for b, s, h, a in GPU[False]["layer"]:
            case = {"batch": b, "seq": s, "hidden": h, "heads": a, "ffn": 4 * h}
            cases.append({**case, "time_s": fitting.layer_case_s(case, rates, truth)
                          * (1 + rng.uniform(-0.03, 0.03))})
        eff, _, issue = fitting.fit_layer_launches(cases, rates, truth)
        assert abs(eff / 0.7 - 1) <= 0.2, (seed, eff)
        assert abs(issue / 40e-6 - 1) <= 0.1, (seed, issue)


def test_refit_of_a_one_gpu_calibration_reports_and_writes_a_solvable_machine(tmp_path):
    """``planner calibrate --refit`` on the lent H200's raw timings (one process, NCCL): the
    table shows the CPU's launch time and says no link was measured, and its cluster file is
    one ``planner solve`` accepts (it refused the first one written: fabric without a link)."""
    raw = json.loads((ROOT / "tests" / "fixtures" / "h200-calibration-raw.json").read_text())
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema": "planner.calibration/v1", "raw": raw}))
    out = tmp_path / "cal.json"
    result = RUNNER.invoke(app, ["calibrate", "--refit", str(old), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "host_launch_s" in result.output and "not measured (one process)" in result.output
    assert "link bandwidth" not in result.output
    doc = json.loads(out.read_text())
    assert doc["profile"]["host_launch_s"] > 10 * doc["profile"]["kernel_overhead_s"]
    assert set(doc["serving"]) == {"kv_read_efficiency", "weight_read_efficiency"}
    solved = RUNNER.invoke(app, [
        "solve", "--cluster", str(tmp_path / "cal.cluster.yaml"), "--calibration", str(out),
        "--model", str(ROOT / "benchmarks" / "data" / "reference-gpt-gpu.yaml"),
        "--precision", "bf16", "--optimizer", "sgd", "--global-batch", "8", "--seq-len",
        "2048", "--tp", "1", "--pp", "1", "--schedule", "1f1b", "--out",
        str(tmp_path / "plan.json")])
    assert solved.exit_code == 0, solved.output


def test_compute_passes_merge_into_each_cases_median_pass():
    """A pass that fell in a slow second is outvoted by the other two, case by case; passes
    that do not hold the same cases are refused."""
    from planner.run.calibrate_job import merge_passes

    def pass_(*times):
        return [{"m": 32 * (i + 1), "time_s": t} for i, t in enumerate(times)]
    merged = merge_passes([pass_(1e-3, 4e-3), pass_(2.2e-3, 4.1e-3), pass_(1.1e-3, 9e-3)])
    assert [c["m"] for c in merged] == [32, 64]
    assert [c["time_s"] for c in merged] == [1.1e-3, 4.1e-3]
    assert merged[0]["pass_times_s"] == [1e-3, 2.2e-3, 1.1e-3]
    (one,) = merge_passes([pass_(3e-3)])
    assert one["time_s"] == 3e-3 and one["pass_times_s"] == [3e-3]
    with pytest.raises(ValueError):
        merge_passes([pass_(1e-3, 2e-3), pass_(1e-3)])


def test_resume_chunks_merge_into_one_case_per_pair_averaging_each_mean():
    from planner.run.calibrate_job import merge_resume_chunks

    def case(pair, hot, late, post=None, reps=5):
        c = {"pair": pair, "batch": 1, "seq": 16, "hidden": 96, "heads": 4, "reps": reps,
             "hot_s": hot, "after_wait_s": 2 * hot, "one_way_s": 1e-4, "late_wait_s": late}
        return c if post is None else {**c, "post_s": post}
    chunks = [[case([0, 1], 1e-4, 2e-4, 3e-5), case([2, 3], 5e-4, 1e-4, 4e-5)],
              [case([2, 3], 7e-4, 3e-4, 6e-5), case([0, 1], 3e-4, 4e-4, 5e-5)]]
    a, b = merge_resume_chunks(chunks)
    assert a["pair"] == [0, 1] and b["pair"] == [2, 3]
    assert a["reps"] == 10 and a["chunks"] == 2
    assert a["hot_s"] == pytest.approx(2e-4) and a["after_wait_s"] == pytest.approx(4e-4)
    assert a["late_wait_s"] == pytest.approx(3e-4) and a["post_s"] == pytest.approx(4e-5)
    assert b["hot_s"] == pytest.approx(6e-4) and b["post_s"] == pytest.approx(5e-5)
    # a chunk without post times counts for the other means only
    (c,) = merge_resume_chunks([[case([0, 1], 1e-4, 2e-4)], [case([0, 1], 3e-4, 2e-4, 3e-5)]])
    assert c["post_s"] == 3e-5 and c["hot_s"] == pytest.approx(2e-4)
