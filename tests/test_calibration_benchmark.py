"""The calibration benchmark's data and bookkeeping (benchmarks/calibration*.py): every extra
row keeps its origin, rows the cost model cannot handle are named with a reason, and the
ranking statistics are right on hand-checked cases. Fast: no fit is run."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import calibration  # noqa: E402
import calibration_report as report  # noqa: E402
import published_runs as pr  # noqa: E402

EXTRA = json.loads(pr.EXTRA.read_text())


def test_every_extra_row_names_its_source_and_configuration():
    ids = [r["id"] for r in EXTRA]
    assert len(ids) == len(set(ids))
    for r in EXTRA:
        assert r["source"].startswith("github:") and r["source_url"].startswith("https://")
        assert r["source_table"] and r["confidence"] in ("A", "B", "C")
        assert pr.source_name(r) != "other"
        c = r["config"]
        assert c["global_batch"] and c["micro_batch"] and r["model"]["seq_len"]
        assert c["tp"] * c["pp"] * c["cp"] * c["dp"] == r["cluster"]["num_gpus"] or \
            "FSDP" in str(c["zero"])
        assert (r["measured"].get("tokens_per_sec_per_gpu")
                or r["measured"].get("tflops_per_gpu")) > 0


def _flops_per_token_published(row: dict) -> float:
    me = row["measured"]
    if me.get("step_time_s"):  # the MoE model zoo's H100 table: step time and TFLOP/s
        c = row["config"]
        tokens = c["global_batch"] * row["model"]["seq_len"]
        return me["tflops_per_gpu"] * 1e12 * me["step_time_s"] * row["cluster"]["num_gpus"] / tokens
    return me["model_tflops_per_gpu"] * 1e12 / me["tokens_per_sec_per_gpu"]


def test_zoo_tflops_are_counted_with_causal_attention():
    """The zoo's H100 rows publish step time and TFLOP/s: the pair fixes their FLOP count,
    which is Megatron-LM's from March 2025 (causal attention halved), not the earlier one."""
    rows = [r for r in pr.load_all_rows() if r["id"].startswith("modelzoo-qwen3-235b-h100-256")]
    assert len(rows) == 5
    for r in rows:
        model, seq = pr.row_model(r), r["model"]["seq_len"]
        published = _flops_per_token_published(r)
        assert pr.megatron_causal_flops(model, 1, seq) / seq == pytest.approx(published, rel=0.01)
        assert pr.megatron_flops(model, 1, seq) / seq > 1.1 * published
    gb200 = next(r for r in pr.load_all_rows() if r["id"].startswith("modelzoo-qwen3-235b-gb200"))
    assert pr.row_target(gb200).metric == "tflops_per_gpu"
    assert pr.row_target(gb200).convention == "megatron-causal"


def test_megatron_bridge_deepseek_rows_ran_mtp_from_26_02():
    """Megatron-Bridge's model TFLOP/s per token equal Megatron's count with the MTP layer for
    the releases that built DeepSeek-V3 with it, and without it for 25.11's plain rows; the
    row's model carries MTP exactly then."""
    rows = [r for r in EXTRA if r["model"].get("preset") == "deepseek-v3"
            and r["measured"].get("model_tflops_per_gpu")]
    with_mtp = [r for r in rows if pr._ran_mtp(r)]
    assert len(with_mtp) >= 20 and len(rows) - len(with_mtp) >= 3
    for r in rows:
        model, seq = pr.row_model(r), r["model"]["seq_len"]
        assert model.mtp_layers == (1 if r in with_mtp else 0)
        assert pr.megatron_causal_flops(model, 1, seq) / seq == pytest.approx(
            _flops_per_token_published(r), rel=0.005)


def test_kimi_k2_rows_are_the_preset_and_run_their_release_config():
    """Megatron-Bridge's Kimi_K2 rows: their published model TFLOP/s per token equal Megatron's
    causal count for the kimi-k2 preset (no MTP module) within 0.5%, which checks the preset's
    dimensions against NVIDIA's own count; and they run what KIMI_K2_PRETRAIN_CONFIG_GB300
    sets (flex dispatcher, no all-to-all overlap, selective recompute, no CUDA graphs)."""
    rows = [r for r in EXTRA if r["model"]["name"] == "Kimi_K2"]
    assert len(rows) == 4
    for r in rows:
        model, seq = pr.row_model(r), r["model"]["seq_len"]
        assert model.name == "kimi-k2" and model.mtp_layers == 0 and model.num_moe_layers == 60
        assert pr.megatron_causal_flops(model, 1, seq) / seq == pytest.approx(
            _flops_per_token_published(r), rel=0.005)
        cfg = pr.row_config(r, 1)
        assert cfg.moe_dispatcher == "flex" and not cfg.moe_a2a_overlap
        assert cfg.cuda_graphs == "none" and pr._published_recompute(r) == "selective"
        res = calibration.evaluate_row(r, calibration.default_profile("GB300"))
        assert res["scored"] and res["fits"] and res["moe"]


def test_a_row_that_differs_only_in_global_batch_runs_its_constants_settings():
    """``exact_but_gbs`` rows: a row of the same release, system, precision and layout that
    matched exactly, differing in the global batch alone, carries the same launch settings,
    and the row's training config follows them (not the planner's defaults)."""
    import re
    rows = json.loads(pr.MB_SETTINGS.read_text())["rows"]
    loose = [r for r in rows if r["match"] == "exact_but_gbs"]
    assert loose
    for r in loose:
        stem = re.sub(r"gbs\d+$", "", r["id"])
        sibling = next(x for x in rows if x["match"] == "exact" and x["id"] != r["id"]
                       and re.sub(r"gbs\d+$", "", x["id"]) == stem)
        keys = ("dispatcher", "a2a_overlap", "recompute_modules", "cuda_graph_impl",
                "fp8_dot_product_attention", "cutedsl_fused_grouped_mlp", "config_constant")
        assert {k: r[k] for k in keys} == {k: sibling[k] for k in keys}
        row = next(x for x in EXTRA if x["id"] == r["id"])
        twin = next(x for x in EXTRA if x["id"] == sibling["id"])
        cfg, twin_cfg = pr.row_config(row, 1), pr.row_config(twin, 1)
        assert cfg == twin_cfg and cfg.moe_dispatcher == "flex" and cfg.cuda_graphs == "full"
        assert row["config"]["global_batch"] != twin["config"]["global_batch"]


def test_megatron_lm_guide_row_runs_its_launch_script_settings():
    row = next(r for r in EXTRA if r["id"].startswith("megatron-lm-dsv3-guide"))
    assert pr.source_name(row) == "megatron-lm-dsv3-guide"
    cfg = pr.row_config(row, 1)
    assert cfg.moe_dispatcher == "flex" and cfg.cuda_graphs == "attn+moe_router"
    assert not cfg.moe_a2a_overlap and pr._published_recompute(row) == "selective"
    assert pr.row_model(row).mtp_layers == 0 and pr._moment_bytes(row) == 2
    res = calibration.evaluate_row(row, calibration.default_profile("GB200"))
    assert res["metric"] == "tflops_per_gpu" and res["convention"] == "megatron-causal"
    assert res["fits"] and res["scored"]


def test_unpredictable_rows_are_listed_with_a_reason_not_dropped():
    nemotron = [r for r in EXTRA if "Nemotron_3" in r["model"]["name"]][:1]  # hybrid Mamba
    usable, reasons = calibration.predictable(nemotron)
    assert not usable and len(reasons) == 1
    assert all("preset" in why for why in reasons.values())


def test_nvfp4_rows_are_predicted_in_nvfp4():
    """Megatron-Bridge's NVFP4 rows of preset models run the nvfp4 workload (4-bit GEMMs and
    weights), and every one of them fits."""
    rows = [r for r in EXTRA if r["config"]["precision"] == "NVFP4" and r["model"].get("preset")]
    usable, reasons = calibration.predictable(rows)
    assert len(usable) == len(rows) >= 18 and not reasons
    for r in usable:
        assert pr.row_workload(r).precision == "nvfp4"
        res = calibration.evaluate_row(r, calibration.default_profile(r["cluster"]["gpu_key"]))
        assert res["fits"] and res["scored"]


def test_a_preset_row_is_predicted():
    row = next(r for r in EXTRA if r["model"].get("preset") == "qwen3-30b-a3b"
               and r["cluster"]["gpu_key"] == "B200")
    usable, reasons = calibration.predictable([row])
    assert usable and not reasons
    res = calibration.evaluate_row(row, calibration.default_profile(row["cluster"]["gpu_key"]))
    assert res["moe"] and res["source"] == "megatron-bridge" and res["family"] == "Blackwell"
    assert res["predicted"] > 0 and res["metric"] == "tokens_per_s_per_gpu"


def test_kendall_tau_on_hand_checked_orders():
    assert report._kendall([1, 2, 3], [10, 20, 30]) == 1
    assert report._kendall([1, 2, 3], [30, 20, 10]) == -1
    assert report._kendall([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)


def _r(layout, published, predicted, metric="tokens_per_s_per_gpu"):
    return {"id": layout, "source": "s", "table": "T", "model": "m", "gpu": "g", "gpus": 8,
            "seq_len": 4096, "precision": "bf16", "metric": metric, "global_batch": 64,
            "layout": layout, "published": published, "predicted": predicted}


def test_sweep_top1_uses_the_published_value_of_the_predicted_best():
    sw = report.sweeps([_r("a", 100, 90), _r("b", 98, 95), _r("c", 80, 70)])
    assert len(sw) == 1 and sw[0]["predicted_best"] == "b" and sw[0]["top1"]
    assert sw[0]["published_of_predicted_best"] == pytest.approx(0.98)
    sw = report.sweeps([_r("a", 100, 90), _r("b", 90, 95)])
    assert not sw[0]["top1"] and sw[0]["kendall_tau"] == -1


def test_step_time_sweeps_rank_the_shortest_step_first():
    sw = report.sweeps([_r("a", 10.0, 11.0, "step_time_s"), _r("b", 12.0, 12.5, "step_time_s")])
    assert sw[0]["published_best"] == "a" and sw[0]["top1"] and sw[0]["kendall_tau"] == 1


def test_megatron_bridge_deepseek_plain_pipelines_run_the_recipes_layout():
    """DeepSeek-V3 rows of Megatron-Bridge without interleaving hold fewer layers on the last
    stage (MTP and loss there), as the recipe's layout map cuts them; interleaved rows and
    other models keep the even split."""
    rows = [r for r in EXTRA if r["model"].get("preset") == "deepseek-v3"]
    plain = [r for r in rows if (r["config"].get("vpp") or 1) == 1 and r["config"]["pp"] > 1]
    assert plain
    for r in plain:
        counts = pr.row_config(r).stage_layer_counts
        assert sum(counts) == 61 and len(counts) == r["config"]["pp"]
        assert counts[-1] < counts[0]
    interleaved = next(r for r in rows if (r["config"].get("vpp") or 1) > 1)
    assert pr.row_config(interleaved).stage_layer_counts is None
    qwen = next(r for r in EXTRA if r["model"].get("preset") == "qwen3-235b-a22b"
                and (r["config"].get("vpp") or 1) == 1 and r["config"]["pp"] > 1)
    assert pr.row_config(qwen).stage_layer_counts is None


def test_rows_their_source_marks_a_regression_are_predicted_but_not_scored():
    """Megatron-Bridge's 26.06.01 GPT-OSS rows cite a footnote calling them a known performance
    regression (cudnn-frontend#256: a grouped-GEMM kernel 10x slower); they stay in the table
    with the footnote, out of the scored rows, the fit and the layout sweeps."""
    marked = [r for r in EXTRA if r.get("known_regression")]
    assert sorted(r["id"] for r in marked) == [
        "mbridge-26.06.01-gptoss120b-gb200-64-mxfp8-tp1pp1cp1vp1ep64mbs4gbs1280",
        "mbridge-26.06.01-gptoss120b-gb300-64-mxfp8-tp1pp1cp1vp1ep16mbs4gbs1280"]
    for r in marked:
        assert "cudnn-frontend/issues/256" in r["known_regression"]
        t = pr.row_target(r)
        assert not t.scored and t.metric == "tokens_per_s_per_gpu" and "regression" in t.note
        usable, _ = calibration.predictable([r])
        assert usable and not calibration.scored_rows(usable)
    same_layout = next(r for r in EXTRA if r["id"] == marked[0]["id"].replace("26.06.01", "26.06"))
    assert pr.row_target(same_layout).scored
    # in a sweep the regressed row neither counts as a layout nor moves the average
    fast, slow = _r("a", 100, 100), {**_r("b", 10, 100), "note": pr.row_target(marked[0]).note}
    assert report.sweeps([fast, slow, _r("c", 50, 40)])[0]["layouts"] == 2


def test_the_builder_marks_only_lines_citing_a_regression_footnote():
    sys.path.insert(0, str(ROOT / "benchmarks" / "data"))
    import build_published_runs_extra as build
    page = ("| GB300 | 64 | 20288 | 661[^oss] |\n| GB200 | 8 | 40960 | 937[^moe] |\n\n"
            "[^oss]: Performance regression in GPT-OSS is a known issue.\n"
            "[^moe]: MoE benchmarks force-balance tokens.\n")
    notes = build._footnotes(page)
    assert set(notes) == {"oss", "moe"}
    lines = page.splitlines()
    assert build.regression_notes(lines[0], notes) == ["Performance regression in GPT-OSS is "
                                                       "a known issue."]
    assert build.regression_notes(lines[1], notes) == []


def _dense_mb(fragment: str) -> dict:
    return next(r for r in EXTRA if r["id"].startswith("mbridge-") and fragment in r["id"])


def test_dense_megatron_bridge_rows_run_their_release_settings():
    """The dense Llama rows take TP overlap, recompute and host offloading from their
    release's config (``megatron_bridge_dense_settings.json``), each value with its evidence:
    TP overlap on with TP > 1 but off in NVFP4, no recompute where the config sets none, the
    8B H100 row's full block recompute of 5 layers, 40 layers offloaded on the 70B GB200 FSDP
    rows; every such row fits."""
    rows = json.loads(pr.MB_DENSE_SETTINGS.read_text())["rows"]
    matched = [r for r in rows if r["match"] in pr.MATCHED]
    assert len(matched) >= 60
    for r in matched:
        assert r["evidence"] and all(line.startswith("v0.") for line in r["evidence"])
    h100 = pr.row_config(_dense_mb("26.04-llama370b-h100-64-fp8-tp4pp8"), 1)
    assert h100.tp_comm_overlap and h100.degrees.tp == 4 and h100.vpp == 5
    assert pr._published_recompute(_dense_mb("26.04-llama370b-h100-64-fp8-tp4pp8")) == "none"
    fp4 = pr.row_config(_dense_mb("26.04-llama370b-gb200-64-nvfp4-tp2pp4"), 1)
    assert not fp4.tp_comm_overlap and fp4.degrees.tp == 2
    small = _dense_mb("25.11-llama38b-h100-8-fp8-cs")
    assert pr._published_recompute(small) == "full"
    assert pr.row_config(small, 1).recompute_layers == 5
    fsdp = pr.row_config(_dense_mb("26.04-llama370b-gb200-64-fp8-tp1pp1cp1vp1ep1mbs2gbs256-fsdp"),
                         1)
    assert fsdp.offload_layers == 40 and fsdp.zero == 3
    usable, reasons = calibration.predictable(
        [x for x in EXTRA if x["id"] in {r["id"] for r in matched}])
    assert not reasons
    for row in usable:
        assert calibration.evaluate_row(
            row, calibration.default_profile(row["cluster"]["gpu_key"]))["fits"], row["id"]


def test_nemo_nemotron_rows_have_their_nemo_shapes():
    """The NeMo 24.07 Nemotron rows (8B, 22B, 340B) carry the shapes of NeMo's
    ``nemotron.py`` configs: squared ReLU, LayerNorm, untied embeddings, the 256,000-token
    vocabulary; Megatron's FLOP count of those shapes equals the table's model TFLOP/s per
    token within 0.1%, and each row is predicted and fits."""
    rows = [r for r in EXTRA if r["id"].startswith("nemo-2407-nemotron")]
    assert len(rows) == 3
    usable, reasons = calibration.predictable(rows)
    assert not reasons and len(usable) == 3
    for r in rows:
        model, seq = pr.row_model(r), r["model"]["seq_len"]
        assert model.activation == "relu2" and not model.glu and model.norm == "layernorm"
        assert not model.tied_embeddings and model.vocab_size == 256000
        published = r["measured"]["model_tflops_per_gpu"] / r["measured"]["tokens_per_sec_per_gpu"]
        assert pr.megatron_flops(model, 1, seq) / seq == pytest.approx(published * 1e12,
                                                                       rel=0.001)
        res = calibration.evaluate_row(r, calibration.default_profile("H100-SXM5-80GB"))
        assert res["fits"] and res["scored"]


def test_nemo_2407_rows_take_tp_overlap_where_the_attribution_holds():
    """NeMo 24.07 rows: TP overlap as NeMo-Framework-Launcher's configs of the time set it on
    the rows attributed with high or medium confidence (Llama 2/3 70B, GPT3-175B on 512 GPUs);
    a low-confidence row (GPT3-175B on 128 GPUs) keeps the rules. The attributed rows whose
    launcher turned cuDNN attention off (NVTE_FUSED_ATTN=0) run FlashAttention-2: the 24.07
    container's TransformerEngine 1.8 has no other flash backend."""
    rows = {r["id"]: r for r in EXTRA if r["id"].startswith("nemo-2407-")}
    settings = {r["id"]: r for r in json.loads(pr.NEMO_SETTINGS.read_text())["rows"]}
    assert set(settings) == set(rows)
    for rid, known in settings.items():
        cfg = pr.row_config(rows[rid], 1)
        fa2 = known["match"] == "exact" and known["other"]["NVTE_FUSED_ATTN"] == 0
        assert cfg.attention == ("flash2" if fa2 else "flash")
        if known["match"] == "exact":
            assert known["confidence"] in ("high", "medium") and known["evidence"]
            assert cfg.tp_comm_overlap == bool(known["tp_comm_overlap"])
        else:
            assert known["confidence"] == "low" and not cfg.tp_comm_overlap
    for rid in ("nemo-2407-llama2-70b-h100-64", "nemo-2407-llama3-70b-h100-64",
                "nemo-2407-gpt3-175b-h100-512"):
        assert pr.row_config(rows[rid], 1).tp_comm_overlap
    assert not pr.row_config(rows["nemo-2407-gpt3-175b-h100-128"], 1).tp_comm_overlap


def test_feature_steps_end_at_the_calibration_row():
    """The DeepSeek-V3 GB200 optimisation history (benchmarks/feature_steps.py) accumulates its
    steps' settings into exactly the configuration the calibration row runs with, so its last
    prediction is the row's; each modelled step names a setting the TrainingConfig has."""
    import feature_steps
    data = json.loads(feature_steps.DATA.read_text())
    fields = set(pr.TrainingConfig.__dataclass_fields__)
    for step in data["steps"]:
        assert ("options" in step) != ("not_modelled" in step)
        assert set(step.get("options", {})) <= fields
    out = feature_steps.feature_steps()
    assert out["final_config_matches_row"]
    row = next(r for r in pr.load_all_rows() if r["id"] == data["row"])
    prof = calibration.default_profile(row["cluster"]["gpu_key"])
    assert out["steps"][-1]["predicted"] == pytest.approx(
        calibration.evaluate_row(row, prof)["predicted"], rel=1e-12)
    assert out["steps"][-1]["published"] == pr.row_target(row).value


def test_shipped_parameters_sit_inside_their_grids_at_fine_resolution():
    """Every fitted value in profiles.json is a point of its fit grid with a neighbour on each
    side (a value at the edge means the grid, not the data, stopped the fit), and the step
    next to it is at most 7% of the value (shipped: attention 0.01 at 0.34, kernel overhead
    1 us at 16 us; with 0.05 steps the attention level could only be 0.30 or 0.35, and every
    row at 16k tokens and more was predicted too slow)."""
    shipped = json.loads(calibration.PROFILES_JSON.read_text())
    values = {k: v for k, v in shipped["common"].items() if k in calibration.GRIDS}
    values.update({f"gemm_efficiency[{gpu}]": entry["gemm_efficiency"]
                   for gpu, entry in shipped["gpus"].items()})
    assert len(values) == len(calibration.GRIDS) - 1 + len(set(calibration.FAMILIES.values()))
    for name, value in values.items():
        grid = calibration.GRIDS[name.split("[")[0]]
        i = min(range(len(grid)), key=lambda j: abs(grid[j] - value))
        assert abs(grid[i] - value) <= 1e-9 * max(1.0, abs(value)), (name, value)
        assert 0 < i < len(grid) - 1, f"{name} = {value} is at the edge of its grid"
        step = max(grid[i + 1] - grid[i], grid[i] - grid[i - 1])
        assert step <= 0.07 * value, (name, value, step)


DGXC = json.loads(pr.DGXC.read_text())
DGXC_SETTINGS = {e["id"]: e for e in json.loads(pr.DGXC_SETTINGS.read_text())["rows"]}


def test_every_dgxc_row_has_its_source_and_its_launch_settings():
    """The DGX Cloud Benchmarking rows (dgxc_runs.json) name the README, commit and table
    they come from, a step time, a layout that covers the GPUs, and one entry of launch
    settings read from their release's code (dgxc_settings.json), each value with evidence."""
    ids = [r["id"] for r in DGXC]
    assert len(ids) == len(set(ids)) == len(DGXC_SETTINGS)
    for r in DGXC:
        assert pr.source_name(r) == "dgxc-benchmarking"
        assert r["source"].startswith("github:NVIDIA/dgxc-benchmarking ")
        assert r["source_url"].startswith("https://github.com/NVIDIA/dgxc-benchmarking/blob/")
        assert r["measured"]["step_time_s"] > 0 and r["container"].startswith("nvcr.io/")
        c = r["config"]
        assert c["tp"] * c["pp"] * c["cp"] * c["dp"] == r["cluster"]["num_gpus"]
        known = DGXC_SETTINGS[r["id"]]
        assert known["match"] == "exact" or known["notes"]
        assert known["evidence"] and all(":" in line for line in known["evidence"])


def test_dgxc_rows_run_what_their_launch_code_ran():
    """Where a published table and its release's launch code disagree, the row runs the
    launch code's value and records both (as_launched): Nemotron-4 340B in v25.04 ("VP NA",
    launch.sh -vp 12), GPT-3 175B in v25.02 (title VP=12, code 6), v25.04's GPT-3 at 512
    GPUs (GBS "1204", code 1024) and Grok-1's unpublished expert TP (Megatron-Core's default,
    TP). Nothing else moves."""
    launched = {r["id"]: pr.as_launched(r) for r in DGXC}
    moved = {rid: r["config_from_launch"] for rid, r in launched.items()
             if "config_from_launch" in r}
    assert launched["dgxc-25.04-nemotron4-340b-h100-bf16-512g"]["config"]["vpp"] == 12
    assert moved["dgxc-25.04-nemotron4-340b-h100-bf16-512g"] == {
        "vpp": {"published": 1, "launched": 12}}
    assert launched["dgxc-25.02-gpt3-175b-h100-fp8-128g"]["config"]["vpp"] == 6
    assert launched["dgxc-25.04-gpt3-175b-h100-bf16-512g"]["config"]["global_batch"] == 1024
    rows = {r["id"]: r for r in pr.load_all_rows() if r["id"].startswith("dgxc-")}
    grok = rows["dgxc-24.11.1-grok1-314b-h100-fp8-512g"]
    assert pr.row_config(grok).degrees.expert_tp == grok["config"]["tp"] == 4
    assert {f for change in moved.values() for f in change} == {"vpp", "global_batch",
                                                                 "expert_tp"}
    assert all(rid.split("-")[2] in ("nemotron4", "gpt3", "grok1") for rid in moved)
    untouched = next(r for r in DGXC if r["id"] == "dgxc-24.11.1-llama3.1-405b-h100-bf16-576g")
    assert "config_from_launch" not in rows[untouched["id"]]
    assert rows[untouched["id"]]["config"] == untouched["config"]


def test_dgxc_rows_that_republish_a_run_are_folded():
    """v25.04 republished GPT-3 175B's v25.02 step times under a table that prints the VP 6
    the v25.02 code ran (v25.02's title said 12): read as launched they are the same runs,
    so they count once (fold_republished); nothing else folds."""
    rows = {r["id"]: r for r in pr.load_all_rows() if r["id"].startswith("dgxc-")}
    folded = {rid: r["republished_as"] for rid, r in rows.items() if "republished_as" in r}
    assert len(rows) == len(DGXC) - 10
    assert sorted(folded) == sorted(rid.replace("25.04", "25.02") for rid in
                                    (x for ids in folded.values() for x in ids))
    assert all(rid.startswith("dgxc-25.02-gpt3-175b-") for rid in folded)
    twin = rows["dgxc-25.02-gpt3-175b-h100-bf16-512g"]
    assert twin["republished_as"] == ["dgxc-25.04-gpt3-175b-h100-bf16-512g"]


def test_dgxc_launch_settings_reach_the_training_config():
    """Settings read from the launch code become the cost model's options: cuDNN attention
    turned off where only FlashAttention-2 could replace it; Megatron-Core's per-layer CUDA
    graphs capture the layer's launches; the DeepSeek-V3 recipe's MTP layer
    and uneven pipeline (first stage one layer fewer, last two fewer); TP overlap and the
    gradient dtype as the recipe set them."""
    rows = {r["id"]: r for r in pr.load_all_rows() if r["id"].startswith("dgxc-")}
    # NVTE_FUSED_ATTN=0 (cuDNN attention off) runs FlashAttention-2 where the container's
    # TransformerEngine has no other flash backend (up to v1.10: NeMo 24.05-24.09); Grok-1's
    # unversioned nemo:dev image and the 24.12 container (TE 1.11+, FlashAttention-3 when
    # installed) keep the fused kernel's price
    assert pr.row_config(rows["dgxc-24.11.1-gpt3-175b-h100-bf16-512g"]).attention == "flash2"
    assert rows["dgxc-24.11.1-gpt3-175b-h100-bf16-512g"]["container"].endswith(":24.05")
    grok_old = pr.row_config(rows["dgxc-24.11.1-grok1-314b-h100-bf16-512g"])
    assert grok_old.attention == "flash" and grok_old.tp_comm_overlap
    assert pr.row_config(rows["dgxc-25.02-grok1-314b-h100-bf16-512g"]).attention == "flash"
    for rid in ("dgxc-24.11.1-grok1-314b-h100-bf16-512g", "dgxc-25.02-grok1-314b-h100-bf16-512g"):
        assert str(DGXC_SETTINGS[rid]["other"]["NVTE_FUSED_ATTN"]) == "0"
    llama = pr.row_config(rows["dgxc-24.11.1-llama3.1-405b-h100-bf16-576g"])
    assert llama.attention == "flash" and llama.tp_comm_overlap and not llama.grad_reduce_in_fp32
    graphs = [rid for rid, r in rows.items() if pr.row_config(r).cuda_graphs == "full"]
    assert graphs and all("-gb200-" in rid for rid in graphs)
    ds = rows["dgxc-25.05-deepseek-v3-671b-h100-bf16-1024g"]
    assert pr.row_model(ds).mtp_layers == 1
    assert pr.row_config(ds).stage_layer_counts == (3,) + (4,) * 14 + (2,)
    assert pr.row_config(ds).grad_reduce_in_fp32  # the recipe ran without performance mode
