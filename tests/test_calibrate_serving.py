"""planner calibrate's serving fit: ``kv_read_efficiency`` comes back from decode-attention
timings the serving model itself makes (with noise), the skinny-GEMM check measures the weight
reads the model prices, and the calibration file's ``serving`` object is what
``planner serve --calibration`` applies. (The end-to-end ``planner calibrate --quick`` run is
``tests/test_calibration.py::test_calibrate_solve_launch_check_run``.)"""
from __future__ import annotations

import json
import math
import random

import pytest
from typer.testing import CliRunner

from cost_models.fitting import STREAM_MIN_BYTES, CalibrationFit, LinkFit, Residual
from cost_models.profile import Profile, profile_to_dict
from cost_models.serving.calibration import (decode_attention_s, decode_gemm_s, fit_kv_read,
                                             fit_serving)
from cost_models.serving.profile import ServingProfile, default_serving_profile, serving_overrides
from planner.cli.app import app
from planner.run.calibrate import calibration_document, residual_summary

PEAK, BW = 5e11, 50e9  # FLOP/s, bytes/s: a made-up device (ridge at 16 to 50 rows)
ATTENTION = ((1, 8, 256, 64), (1, 8, 4096, 64), (4, 8, 4096, 64), (8, 8, 4096, 64),
             (16, 8, 4096, 64), (32, 8, 2048, 64))
ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _attention_cases(elem_bytes: int) -> list[dict]:
    return [{"batch": b, "heads": h, "context": ctx, "head_dim": d, "elem_bytes": elem_bytes,
             "kv_bytes": 2 * b * h * ctx * d * elem_bytes} for b, h, ctx, d in ATTENTION]


def _gemm_cases(dim: int, elem_bytes: int) -> list[dict]:
    return [{"m": m, "n": dim, "k": dim, "elem_bytes": elem_bytes} for m in ROWS]


def _noisy(seconds: float, rng: random.Random, sigma: float = 0.03) -> float:
    return seconds * math.exp(rng.gauss(0.0, sigma))


@pytest.mark.parametrize("elem_bytes", [2, 4])
@pytest.mark.parametrize("kv_eff", [0.35, 0.9])
def test_kv_read_fit_recovers_the_efficiency_the_serving_model_was_timed_with(kv_eff, elem_bytes):
    """Timings from the serving model's decode attention at ``kv_eff`` (3% log-normal noise;
    caches below STREAM_MIN_BYTES run 3x faster, from cache) give ``kv_eff`` back: the fit
    counts the bytes the model reads (KV in ``elem_bytes`` elements) and skips cached cases."""
    rng = random.Random(7)
    sprof = ServingProfile(kv_read_efficiency=kv_eff)
    cases = []
    for c in _attention_cases(elem_bytes):
        t = decode_attention_s(c, PEAK, BW, Profile(), sprof)
        cases.append({**c, "time_s": _noisy(t, rng) / (3 if c["kv_bytes"] < STREAM_MIN_BYTES
                                                          else 1)})
    rate, eff = fit_kv_read(cases, BW)
    assert eff == pytest.approx(kv_eff, rel=0.04)
    assert rate == pytest.approx(kv_eff * BW, rel=0.04)


def test_kv_read_efficiency_is_at_most_one():
    """KV reads faster than the bandwidth the copies measured: efficiency 1, as the profile
    requires (0, 1]."""
    cases = [{**c, "time_s": c["kv_bytes"] / (1.3 * BW)} for c in _attention_cases(4)]
    rate, eff = fit_kv_read(cases, BW)
    assert rate == pytest.approx(1.3 * BW) and eff == 1.0


def _raw(prof: Profile, kv_eff: float, seed: int) -> dict:
    """A two-rank raw record of decode benchmarks timed by the serving model (3% noise)."""
    rng = random.Random(seed)
    sprof = ServingProfile(kv_read_efficiency=kv_eff)
    ranks = []
    for _ in range(2):
        ranks.append({
            "decode_gemm": [{**c, "time_s": _noisy(decode_gemm_s(c, PEAK, BW, prof), rng)}
                            for c in _gemm_cases(4096, 4)],
            "decode_attention": [
                {**c, "time_s": _noisy(decode_attention_s(c, PEAK, BW, prof, sprof), rng)}
                for c in _attention_cases(4)]})
    return {"compute": ranks}


def _training(prof: Profile) -> CalibrationFit:
    return CalibrationFit(PEAK, BW, prof, LinkFit(math.inf, 0.0, {}, {}), ())


@pytest.mark.parametrize("hbm_eff", [0.3, 0.85])
def test_fit_serving_measures_weight_reads_and_prices_the_gemms_with_them(hbm_eff):
    """Skinny GEMMs timed by the serving model's ``gemm_s`` reading weights at ``hbm_eff``,
    while the training fit's layers put ``hbm_efficiency`` elsewhere (as on a GPU, where eager
    element-wise kernels reach less of the bandwidth than a weight read): the fit gives
    ``hbm_eff`` back as ``weight_read_efficiency`` and applies it, so every GEMM residual is
    within the noise, the crossover to compute-bound is inside the sweep, and
    ``kv_read_efficiency`` is fitted as above."""
    prof = Profile(gemm_efficiency=0.7, hbm_efficiency=hbm_eff)
    layers = Profile(gemm_efficiency=0.7, hbm_efficiency=hbm_eff / 1.6)
    fit = fit_serving(_raw(prof, 0.6, seed=3), _training(layers))
    assert fit.weight_read_efficiency == pytest.approx(hbm_eff, rel=0.06)
    assert fit.kv_read_efficiency == pytest.approx(0.6, rel=0.04)
    assert fit.profile_fields() == {"kv_read_efficiency": fit.kv_read_efficiency,
                                    "weight_read_efficiency": fit.weight_read_efficiency}
    gemm = [r for r in fit.residuals if r.kind == "decode_gemm"]
    assert len(gemm) == len(ROWS) and max(abs(r.error) for r in gemm) < 0.15
    flat = [r.predicted_s for r in gemm]
    assert flat[0] == pytest.approx(flat[3], rel=0.01) and flat[-1] > 2 * flat[0]
    streaming = [r for r in fit.residuals if r.kind == "decode_attention"
                 and r.measured_s > 1e-3]
    assert streaming and max(abs(r.error) for r in streaming) < 0.15
    # priced at the layers' efficiency instead, the memory-bound GEMMs miss by the ratio
    at_layers = decode_gemm_s({**_gemm_cases(4096, 4)[0]}, PEAK, BW, layers)
    assert at_layers > 1.4 * gemm[0].measured_s


def test_fit_serving_without_decode_benchmarks_is_none():
    """A raw record written before the decode benchmarks existed fits no serving block."""
    assert fit_serving({"compute": [{"gemm": []}, {"gemm": []}]},
                       _training(Profile())) is None


def _document(kv_eff: float) -> dict:
    prof = Profile(gemm_efficiency=0.7, hbm_efficiency=0.8)
    serving = fit_serving(_raw(prof, kv_eff, seed=5), _training(prof))
    link = LinkFit(1e9, 1e-5, {}, {})
    training = CalibrationFit(PEAK, BW, prof, link, (Residual("gemm", "64x64x64", 1.0, 1.1),))
    raw = {"device": "test device", "backend": "nccl", "threads": 1, "torch": "x",
           "world_size": 2, "quick": True, "memory_bytes": 80 * 2**30}
    return calibration_document(training, profile_to_dict(prof), raw, 2, serving)


def test_calibration_document_has_the_serving_block_serve_applies(tmp_path):
    """The document's ``serving`` holds only measured fields, ``serving_overrides`` applies
    it, and the residual summary lists the serving benchmarks after the training ones."""
    doc = _document(0.45)
    assert set(doc["serving"]) == {"kv_read_efficiency", "weight_read_efficiency"}
    assert doc["serving"]["kv_read_efficiency"] == pytest.approx(0.45, rel=0.04)
    assert doc["fit"]["serving"]["weight_read_efficiency"] == pytest.approx(0.8, rel=0.06)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(doc))
    base = default_serving_profile("H100-SXM5-80GB")
    applied = serving_overrides(base, path)
    assert applied.kv_read_efficiency == doc["serving"]["kv_read_efficiency"]
    assert applied.weight_read_efficiency == doc["serving"]["weight_read_efficiency"]
    assert applied.decode_step_overhead_s == base.decode_step_overhead_s  # the rest untouched
    kinds = [kind for kind, *_ in residual_summary(doc)]
    assert kinds == ["gemm", "decode_gemm", "decode_attention"]


def test_serve_with_the_calibration_prices_decode_at_its_kv_read_efficiency(tmp_path):
    """``planner serve estimate --calibration`` reads the file (profile and serving object):
    KV reads at a lower efficiency than the default make a long-context decode step slower."""
    args = ["serve", "estimate", "--model", "llama-3.1-8b", "--gpu", "H100-SXM5-80GB",
            "--colocated", "tp=1,batch=64", "--concurrency", "64", "--isl", "4096", "--osl", "256",
            "--format", "json"]
    tpot = {}
    for kv_eff in (0.2, 1.0):
        path = tmp_path / f"cal-{kv_eff}.json"
        path.write_text(json.dumps(_document(kv_eff)))
        result = CliRunner().invoke(app, args + ["--calibration", str(path)])
        assert result.exit_code == 0, result.output
        tpot[kv_eff] = json.loads(result.output)["tpot_s"]
    assert tpot[0.2] > 1.5 * tpot[1.0]
