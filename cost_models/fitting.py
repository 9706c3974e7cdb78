"""Fit profile parameters to microbenchmark timings (``planner calibrate``).

Every fit uses the cost model's own formulas, so a fitted parameter means what the model means
by it. Each formula is linear in a pair of unknowns, so each fit is a least-squares problem in
*relative* error (every case counts alike, a 10 us case as much as a 10 ms one), solved in
closed form with both unknowns kept non-negative:

* GEMM (``compute.gemm_time_s``): t = F / (P * e * n / (n + h)) = (F/P) * (1/e) + (F/(P n)) * (h/e),
  unknowns 1/e and h/e; P is the best throughput measured, and P, e are rescaled so e <= 1.
* Attention (``compute.layer_forward_time``; backward = ``compute.BWD_ATTN`` x forward): causal
  forward + backward t = (1 + BWD_ATTN) * F_attn / (P * a), one unknown 1/a.
* Memory bandwidth (the roofline's memory side): t = bytes / B, one unknown 1/B, fitted on the
  copies larger than any cache (:data:`STREAM_MIN_BYTES`): an optimizer step streams every
  weight from memory, and smaller copies run from cache at several times that speed.
* Collectives (``communication``, Hockney's alpha-beta): every formula there is
  latency * c_lat + bytes * c_bw / bandwidth on a one-tier group, unknowns latency and
  1/bandwidth; c_lat and c_bw come from evaluating the formula itself at unit values. Fitted
  in two stages, as Hockney (1994) measures r_inf and n_1/2: the bandwidth on the large
  messages, the latency on the small ones, alternating until both settle; one joint fit in
  relative error would let the many small messages set the bandwidth too.
* Memory-bound kernels and per-kernel overhead: a transformer layer's forward + backward minus
  what the fitted GEMM and attention figures predict for it is its element-wise traffic at
  ``hbm_efficiency`` of the fitted bandwidth plus its kernel launches
  (``LayerWork.launches``, forward and backward: ``compute.backward_time_s``) at
  ``kernel_overhead_s`` each: two unknowns, 1/efficiency and the overhead, fitted over layers
  from launch-bound (tiny) to the sizes jobs run. That is a CPU's arithmetic, where a "kernel"
  runs on the core that issues it. On a GPU the CPU queues kernels ahead of the device, so a
  launch costs the GPU only a short gap between kernels while the CPU's time to issue it
  overlaps the device's work: a layer's forward takes max(GPU work + launches x gap, launches
  x issue time), its backward likewise (``compute.LayerTime.total_s``,
  ``compute.backward_time_s``), and the fit has three unknowns, 1/efficiency, the gap
  (``kernel_overhead_s``) and the issue time (``host_launch_s``), found by grid search
  (:func:`fit_layer_launches`). On the lent H200 the additive fit put 27.6 us on every launch
  and predicted the reference job 9-41% too slow, the most at the smallest micro-batch
  (``docs/runtime.md``, "The reference job on a GPU").
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from cost_models import communication as comm
from cost_models.compute import (BWD_ELEM, BWD_GEMM, Gemm, GpuRates, Shard,
                                  backward_time_s, fused_attention_efficiency, gemm_time_s,
                                  layer_forward_time, layer_work, weight_bytes)
from cost_models.model_spec import ModelSpec
from cost_models.profile import Profile
from cost_models.compute import BWD_ATTN  # the step model's attention backward / forward
from topologies.cluster import GroupView, LinkTier


def nonneg_lstsq2(rows: Sequence[tuple[float, float]], target: Sequence[float]) -> tuple[float, float]:
    """argmin ||A x - y||^2 over x >= 0 for two unknowns (closed form, then the faces):
    :func:`nonneg_lstsq` for two unknowns, without numpy (a test checks they agree)."""
    a11 = sum(a * a for a, _ in rows)
    a12 = sum(a * b for a, b in rows)
    a22 = sum(b * b for _, b in rows)
    y1 = sum(a * y for (a, _), y in zip(rows, target))
    y2 = sum(b * y for (_, b), y in zip(rows, target))
    det = a11 * a22 - a12 * a12
    if det > 1e-12 * max(a11 * a22, 1e-300):
        x1, x2 = (a22 * y1 - a12 * y2) / det, (a11 * y2 - a12 * y1) / det
        if x1 >= 0 and x2 >= 0:
            return x1, x2

    def loss(x1: float, x2: float) -> float:
        return sum((a * x1 + b * x2 - y) ** 2 for (a, b), y in zip(rows, target))
    faces = [(max(0.0, y1 / a11) if a11 else 0.0, 0.0), (0.0, max(0.0, y2 / a22) if a22 else 0.0)]
    return min(faces, key=lambda x: loss(*x))


@dataclass(frozen=True)
class Residual:
    """One benchmark case: what was measured, what the fitted model predicts."""

    kind: str
    case: str
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


@dataclass(frozen=True)
class GemmFit:
    peak_flops: float
    efficiency: float
    half_dim: float


def fit_gemm(cases: Sequence[dict]) -> GemmFit:
    """Cases: ``m``, ``n``, ``k``, ``time_s``."""
    flops = [2.0 * c["m"] * c["n"] * c["k"] for c in cases]
    peak = max(f / c["time_s"] for f, c in zip(flops, cases))
    rows = [(f / (peak * c["time_s"]), f / (peak * min(c["m"], c["n"], c["k"]) * c["time_s"]))
            for f, c in zip(flops, cases)]
    inv_e, h_over_e = nonneg_lstsq2(rows, [1.0] * len(rows))
    eff = 1.0 / inv_e if inv_e > 0 else 1.0
    half = h_over_e * eff
    if eff > 1.0:  # the fitted asymptote beats every measured case: make it the peak
        peak, eff = peak * eff, 1.0
    return GemmFit(peak, eff, half)


def attention_flops(batch: int, heads: int, seq: int, head_dim: int) -> float:
    """Causal forward FLOPs as ``compute.attention_core_flops`` counts them with a fused kernel:
    2 * tokens * (s/2 keys) * heads * (qk + v dims)."""
    return 2.0 * batch * seq * (seq / 2.0) * heads * 2 * head_dim


# Knees tried for the attention curve (keys per query): none, then 8 to ~8k by factors of 1.25.
ATTENTION_HALF_KEYS_GRID = (0.0, *(round(8 * 1.25 ** i, 1) for i in range(32)))


@dataclass(frozen=True)
class AttentionFit:
    """The attention curve fitted to causal forward + backward calls (:func:`fit_attention`)."""

    efficiency: float  # ``Profile.attention_efficiency``
    half_keys: float  # ``Profile.attention_half_keys``
    call_s: float  # per call, whatever its size: the CPU's launches and autograd (reported only)


def fit_attention(cases: Sequence[dict], peak_flops: float) -> AttentionFit:
    """``attention_efficiency`` and ``attention_half_keys`` from causal forward + backward
    cases: each call's time is its FLOPs at the curve of
    :func:`cost_models.compute.fused_attention_efficiency` (keys per query = s/2) plus a time
    per call that does not grow with the work, least squares in relative residual. For each
    knee of :data:`ATTENTION_HALF_KEYS_GRID` the efficiency (capped at 1) and the per-call
    time (at least 0) are the least-squares ones (:func:`nonneg_lstsq2`). A knee of 0 (a
    constant efficiency) is on the grid, so the curve never fits worse.

    The per-call time is what small calls cost on the CPU that issues them: on a GPU a causal
    SDPA forward + backward is a handful of kernels (the forward, the backward's, the gradient
    accumulations), each launched by eager PyTorch at tens of microseconds, so calls under
    about 1 GFLOP took 0.13-0.28 ms whatever their size on the lent H100 and H200 (b1 a8 s512
    d64; b1 a16 s1024 d128; 2026-11-26 to 28). Fitted without it, such calls bent the curve:
    the knee went to 1,700-2,100 keys and the residuals to a median of 22-34%. The step model
    prices those launches per kernel (``kernel_overhead_s``, ``host_launch_s``), so the
    per-call time is fitted here only to keep them out of the curve, and reported."""
    best = None
    for half in ATTENTION_HALF_KEYS_GRID:
        curve = Profile(attention_efficiency=1.0, attention_half_keys=half)
        work = [(1 + BWD_ATTN) * attention_flops(c["batch"], c["heads"], c["seq"], c["head_dim"])
                / fused_attention_efficiency(curve, c["seq"] / 2) / peak_flops for c in cases]
        rows = [(w / c["time_s"], 1.0 / c["time_s"]) for w, c in zip(work, cases)]
        inv_a, call = nonneg_lstsq2(rows, [1.0] * len(rows))  # work / eff + call = time
        if inv_a < 1.0:  # an efficiency above 1: cap it and refit the per-call time alone
            inv_a = 1.0
            call = _fit_one(rows, inv_a)
        sse = sum((w * inv_a + b * call - 1) ** 2 for w, b in rows)
        if best is None or sse < best[0] - 1e-12:
            best = (sse, AttentionFit(1.0 / inv_a, half, call))
    return best[1]


STREAM_MIN_BYTES = 48 * 2**20  # copies this large stream from memory on any CPU or GPU cache


def fit_bandwidth(cases: Sequence[dict]) -> float:
    """Streaming bytes/s from ``bytes``, ``moved_bytes``, ``time_s`` cases (least squares in
    relative error) over the copies of at least :data:`STREAM_MIN_BYTES`, or over the largest
    copy if none is that large."""
    large = [c for c in cases if c["bytes"] >= STREAM_MIN_BYTES]
    if not large:
        large = [max(cases, key=lambda c: c["bytes"])]
    rows = [c["moved_bytes"] / c["time_s"] for c in large]  # each row: bytes/t * (1/B) = 1
    inv_b = sum(rows) / sum(r * r for r in rows)
    return 1.0 / inv_b


COLLECTIVES: dict[str, Callable[[GroupView, float, Profile], float]] = {
    "all_reduce": comm.all_reduce_s, "all_gather": comm.all_gather_s,
    "reduce_scatter": comm.reduce_scatter_s, "all_to_all": comm.all_to_all_s,
    "send_recv": comm.send_recv_s,
}


def one_tier_view(size: int, tier: str, bw_bytes_per_s: float, latency_s: float) -> GroupView:
    """A group of ``size`` members in one domain whose fast tier is ``tier``."""
    return GroupView(size, size, 1, LinkTier(tier, bw_bytes_per_s, latency_s), None)


def _unit_coefficients(op: str, size: int, nbytes: float, prof: Profile) -> tuple[float, float]:
    f = COLLECTIVES[op]
    c_lat = f(one_tier_view(size, "host", math.inf, 1.0), nbytes, prof)
    c_bw = f(one_tier_view(size, "host", 1.0, 0.0), nbytes, prof)
    return c_lat, c_bw


LARGE_MESSAGE_BYTES = 2**20  # bandwidth-bound: the bandwidth is fitted on these
SMALL_MESSAGE_BYTES = 2**16  # latency-bound: the latency is fitted on these


def _fit_one(rows: Sequence[tuple[float, float]], fixed: float,
             target: Sequence[float] | None = None) -> float:
    """argmin_x>=0 sum((fixed_coef * fixed + coef * x) - y)^2 over rows (fixed_coef, coef)
    and targets y (1 unless given): both coefficients already divided by the measured time."""
    target = [1.0] * len(rows) if target is None else target
    num = sum(b * (y - a * fixed) for (a, b), y in zip(rows, target))
    den = sum(b * b for _, b in rows)
    return max(0.0, num / den) if den > 0 else 0.0


def fit_link(cases: Sequence[dict], tier: str = "host") -> tuple[float, float]:
    """(bandwidth bytes/s, latency s) of a one-tier link from collective cases (``op``,
    ``group_size``, ``bytes``, ``time_s``), with the tier's efficiency taken as 1: the
    bandwidth from the messages of at least :data:`LARGE_MESSAGE_BYTES`, the latency from those
    of at most :data:`SMALL_MESSAGE_BYTES`, alternating (each stage keeps the other's current
    value); one joint fit over all cases when either set is empty."""
    prof = Profile(link_efficiency={tier: 1.0})
    rows, large, small = [], [], []
    for c in cases:
        c_lat, c_bw = _unit_coefficients(c["op"], c["group_size"], c["bytes"], prof)
        row = (c_lat / c["time_s"], c_bw / c["time_s"])
        rows.append(row)
        if c["bytes"] >= LARGE_MESSAGE_BYTES:
            large.append(row)
        elif c["bytes"] <= SMALL_MESSAGE_BYTES:
            small.append(row)
    if large and small:
        latency, inv_bw = 0.0, 0.0
        for _ in range(20):
            inv_bw = _fit_one(large, latency)
            new = _fit_one([(b, a) for a, b in small], inv_bw)
            if abs(new - latency) <= 1e-9 * max(latency, 1e-12):
                latency = new
                break
            latency = new
    else:
        latency, inv_bw = nonneg_lstsq2(rows, [1.0] * len(rows))
    return (1.0 / inv_bw if inv_bw > 0 else math.inf), latency


@dataclass(frozen=True)
class LinkFit:
    """A tier's bandwidth and latency (those of all-reduce), and each other collective's
    factors on them (``Profile.collective_latency_factor`` / ``collective_bw_factor``)."""

    bw_bytes_per_s: float
    latency_s: float
    latency_factor: dict
    bw_factor: dict


def fit_link_per_op(cases: Sequence[dict], tier: str = "host",
                    reference: str = "all_reduce") -> LinkFit:
    """One alpha-beta fit per collective; the reference op's figures become the tier's."""
    fits = {}
    for op in COLLECTIVES:
        mine = [c for c in cases if c["op"] == op]
        if mine:
            fits[op] = fit_link(mine, tier)
    if not fits:
        return LinkFit(math.inf, 0.0, {}, {})
    ref = reference if reference in fits else next(iter(fits))
    bw, lat = fits[ref]
    lat_f = {op: (l / lat if lat > 0 else 1.0) for op, (_, l) in fits.items() if op != ref}
    bw_f = {op: (b / bw if math.isfinite(b) and math.isfinite(bw) else 1.0)
            for op, (b, _) in fits.items() if op != ref}
    return LinkFit(bw, lat, {k: v for k, v in lat_f.items() if v > 0},
                   {k: v for k, v in bw_f.items() if v > 0})


def collective_tables(cases: Sequence[dict], tier: str = "host") -> dict[str, list]:
    """``Profile.collective_tables`` from the collective cases: per op and group size, the
    measured ``[bytes, seconds]`` rows (at least two sizes)."""
    out: dict[str, list] = {}
    for c in cases:
        out.setdefault(f"{tier}:{c['op']}:{c['group_size']}", []).append(
            [float(c["bytes"]), float(c["time_s"])])
    return {k: sorted(v) for k, v in sorted(out.items()) if len(v) >= 2}


def fit_collective_switch(cases: Sequence[dict], link: LinkFit, tier: str = "host",
                          tables: dict | None = None) -> tuple[float, float, float]:
    """(``Profile.collective_switch_s``, ``collective_skew_sqrt_s``, ``collective_burst_s``):
    what a blocking collective adds, when compute and collectives take turns, beyond the
    compute alone and the collective's calibrated time. Cases
    (``planner.run.calibrate_job.interleave_cases``): ``compute_s`` (the segment before each
    collective) and ``interleaved_s`` per round, the collective's ``op``, ``group_size``,
    ``bytes``, and ``burst_s`` (the burst the tables were timed after). The extra of each case
    is fitted as ``switch + skew * max(0, sqrt(compute_s) - sqrt(burst_s))`` by least squares
    with both at least 0 (``communication.arrival_skew_s``), each case weighted by the inverse
    square of ``compute_s + burst_s``: an extra is the difference of two timings of its
    segment, so its error grows with the segment (the box's speed moves a few percent from
    one second to the next), and unweighted the longest segments' differences set the fit
    (:func:`_interleave_weight`). Cases without ``burst_s`` (calibrations written before it):
    the median extra, at least 0, and no skew."""
    extra = [c["interleaved_s"] - c["compute_s"] - predict_collective(c, link, tier, tables)
             for c in cases]
    if not extra:
        return 0.0, 0.0, 0.0
    if any("burst_s" not in c for c in cases):
        return max(0.0, sorted(extra)[len(extra) // 2]), 0.0, 0.0
    burst = statistics.median(c["burst_s"] for c in cases)
    w = [math.sqrt(_interleave_weight(c["compute_s"], burst)) for c in cases]
    rows = [(wi, wi * max(0.0, math.sqrt(c["compute_s"]) - math.sqrt(burst)))
            for wi, c in zip(w, cases)]
    switch, skew = nonneg_lstsq2(rows, [wi * e for wi, e in zip(w, extra)])
    return switch, skew, burst


def _interleave_weight(compute_s: float, burst_s: float) -> float:
    """Least-squares weight of an interleave case's extra: 1 / (its segment + the burst)^2,
    the inverse variance of an error proportional to the compute it is the difference of
    (the burst keeps the shortest segments' weight finite: their collectives' own jitter).
    Measured on the 2-vCPU box, in the twelve calibrations the executor benchmark stored
    (2026-11-28/29): the extras at 2-4 ms segments ranged -0.0..+1.2 ms, at 18-30 ms
    -1.1..+3.4 ms, at 83-133 ms -2.4..+12.0 ms."""
    return 1.0 / (compute_s + burst_s) ** 2


def fit_dispatch(cases: Sequence[dict]) -> tuple[float, float]:
    """(``Profile.dispatch_solve_s``, ``dispatch_solve_per_expert_s``): one dispatch's host
    time as a + b * experts, least squares with both at least 0, over the cases of
    ``planner.run.calibrate_job.dispatch_cases`` (``experts``, ``time_s``); (0, 0) without
    cases."""
    if not cases:
        return 0.0, 0.0
    return nonneg_lstsq2([(1.0, float(c["experts"])) for c in cases],
                         [c["time_s"] for c in cases])


def eager_math_s(rows: int, width: int, rates: GpuRates, prof: Profile) -> float:
    """The math of one ``planner.run.calibrate_job.eager_cases`` sequence as the cost models
    price it (two experts of ``rows / 2`` rows each: ``width -> 2 width -> width`` Linears by
    :func:`gemm_time_s`, and the element-wise passes at the memory rate: the zeroed
    accumulator, and per expert the row gather, GELU, gate multiply and ``index_add_``:
    ``12 rows width`` values of 4 bytes), as ``planner.serving.afd_run_prediction`` prices the
    AFD job's expert loop."""
    half = rows / 2.0
    gemms = (gemm_time_s(Gemm(half, 2 * width, width, 2), rates, prof)
             + gemm_time_s(Gemm(half, width, 2 * width, 2), rates, prof))
    return gemms + 4.0 * 12 * rows * width / (rates.hbm_bytes_per_s * prof.hbm_efficiency)


def fit_eager_call(cases: Sequence[dict], rates: GpuRates | None = None,
                   prof: Profile | None = None) -> float:
    """``Profile.eager_call_s``: the median over ``planner.run.calibrate_job.eager_cases`` of
    a sequence's time beyond its math (:func:`eager_math_s`, with ``rates`` and ``prof``) over
    its torch calls, at least 0; 0 without cases. Without ``rates`` the math is taken as
    negligible. The prediction prices each call's math apart, so the call's own cost must
    not hold it: on the 2-vCPU box (2026-11-28) the 4 x 32 case took 5.9 us a call and the
    32 x 128 case 10-11 us, 4.6-5.4 us of which its math."""
    if not cases:
        return 0.0
    def beyond(c: dict) -> float:
        math_s = eager_math_s(c["rows"], c["width"], rates, prof) if rates and prof else 0.0
        return max(0.0, c["time_s"] - math_s) / c["calls"]
    return statistics.median(beyond(c) for c in cases)


def fit_resume(cases: Sequence[dict]) -> tuple[float, float]:
    """(``Profile.resume_s``, ``Profile.p2p_latency_s``) from the ping-pong cases
    (``planner.run.calibrate_job.resume_cases``): the median over pairs of what the forward
    after a blocking receive took beyond the same forward back to back (at least 0), and of
    the one-way latency of a message whose receiver waits. (0, 0) without cases."""
    if not cases:
        return 0.0, 0.0
    extra = statistics.median(c["after_wait_s"] - c["hot_s"] for c in cases)
    return max(0.0, extra), statistics.median(c["one_way_s"] for c in cases)


def fit_late_read(cases: Sequence[dict]) -> float:
    """``Profile.late_read_s``: the median over pairs of the wait for a message that arrived
    while its receiver computed (``planner.run.calibrate_job.resume_cases``' ``late_wait_s``);
    0 without such cases (calibrations before it)."""
    waits = [c["late_wait_s"] for c in cases if "late_wait_s" in c]
    return max(0.0, statistics.median(waits)) if waits else 0.0


def fit_p2p_post(cases: Sequence[dict]) -> float:
    """``Profile.p2p_post_s``: the median over pairs of the mean time of posting one
    non-blocking send or receive (``planner.run.calibrate_job.resume_cases``' ``post_s``); 0
    without such cases (calibrations before it)."""
    posts = [c["post_s"] for c in cases if "post_s" in c]
    return max(0.0, statistics.median(posts)) if posts else 0.0


def predict_collective(case: dict, link: LinkFit, tier: str = "host",
                       tables: dict | None = None) -> float:
    """The collective of ``case`` priced by the fitted link (alpha-beta with the op's
    factors), or by the measured ``tables`` where given (``Profile.collective_tables``)."""
    view = one_tier_view(case["group_size"], tier, link.bw_bytes_per_s, link.latency_s)
    prof = Profile(link_efficiency={tier: 1.0}, collective_latency_factor=link.latency_factor,
                   collective_bw_factor=link.bw_factor, collective_tables=tables or {})
    return COLLECTIVES[case["op"]](view, case["bytes"], prof)


def block_model(hidden: int, heads: int, ffn: int) -> ModelSpec:
    """The reference job's transformer block as a ModelSpec (GELU MLP, LayerNorm, biases)."""
    return ModelSpec(name="block", num_layers=1, hidden_size=hidden, num_heads=heads,
                     num_kv_heads=heads, head_dim=hidden // heads, ffn_hidden_size=ffn,
                     vocab_size=1, glu=False, activation="gelu", norm="layernorm", qkv_bias=True,
                     attn_out_bias=True, mlp_bias=True)


def _layer_case_work(case: dict, rates: GpuRates):
    """The ``LayerWork`` of a layer case (one of the reference job's blocks)."""
    model = block_model(case["hidden"], case["heads"], case["ffn"])
    shard = Shard(case["batch"], case["seq"], 1, 1, 1, 1, False, False, False,
                  elem_bytes=rates.elem_bytes)
    return layer_work(model, 0, shard)


def _layer_forward(case: dict, rates: GpuRates, prof: Profile):
    """(``LayerTime``, kernel launches forward and backward) of a layer case."""
    work = _layer_case_work(case, rates)
    return layer_forward_time(work, rates, prof), work.launches.fwd + work.launches.bwd


def layer_train_parts_s(case: dict, rates: GpuRates, prof: Profile) -> tuple[float, int]:
    """(forward + backward time without launch overheads, kernel launches forward and
    backward) of a layer case."""
    t, kernels = _layer_forward(case, rates, prof)
    work = (t.gemm_s * 3 + t.attention_s * (1 + BWD_ATTN) + t.elementwise_s * 3)
    return work, kernels


def nonneg_lstsq(rows: Sequence[Sequence[float]], target: Sequence[float]) -> tuple[float, ...]:
    """argmin ||A x - y||^2 over x >= 0 (few unknowns): the least-squares solution on every
    subset of free unknowns (the others 0), the best one that is non-negative. The optimum
    is one of them (at it, the positive unknowns solve the unconstrained problem restricted to
    themselves: the KKT conditions)."""
    import itertools

    import numpy as np

    a, y = np.asarray(rows, dtype=float), np.asarray(target, dtype=float)
    n = a.shape[1]
    best, best_loss = (0.0,) * n, float(np.sum(y * y))
    for size in range(1, n + 1):
        for free in itertools.combinations(range(n), size):
            sol, *_ = np.linalg.lstsq(a[:, free], y, rcond=None)
            if np.any(sol < 0):
                continue
            x = np.zeros(n)
            x[list(free)] = sol
            loss = float(np.sum((a @ x - y) ** 2))
            if loss < best_loss - 1e-15 * max(best_loss, 1e-300):
                best, best_loss = tuple(float(v) for v in x), loss
    return best


def fit_layer_overheads(cases: Sequence[dict], rates: GpuRates, prof: Profile
                        ) -> tuple[float, float, float]:
    """(``hbm_efficiency``, ``kernel_overhead_s``, ``cold_weight_s_per_byte``): what the
    layers' time beyond their GEMMs and attention says about their element-wise kernels, their
    launches and the loading of their weights (each GEMM's weight, three times: forward and
    the backward's two GEMMs; ``compute.cold_weights_s``), least squares in relative error,
    the efficiency at most 1, the others at least 0. ``prof``'s own three values are
    ignored."""
    base = Profile(**{**prof.__dict__, "hbm_efficiency": 1.0, "kernel_overhead_s": 0.0,
                      "cold_weight_s_per_byte": 0.0})
    rows, rest = [], []
    for c in cases:
        work = _layer_case_work(c, rates)
        t, kernels = _layer_forward(c, rates, base)
        dense = t.gemm_s * 3 + t.attention_s * (1 + BWD_ATTN)  # as layer_train_parts_s
        loads = 3 * weight_bytes(work.gemms, rates.elem_bytes)  # forward, backward's two
        rows.append((3 * t.elementwise_s / c["time_s"], kernels / c["time_s"],
                     loads / c["time_s"]))
        rest.append(1.0 - dense / c["time_s"])
    inv_eff, overhead, cold = nonneg_lstsq(rows, rest)
    if inv_eff < 1.0:  # faster than streaming (in cache): keep efficiency 1, refit the rest
        inv_eff = 1.0
        overhead, cold = nonneg_lstsq([r[1:] for r in rows],
                                      [y - r[0] for r, y in zip(rows, rest)])
    return 1.0 / inv_eff, overhead, cold


# Grids of fit_layer_launches: 1/hbm_efficiency, the GPU's gap per kernel and the CPU's time to
# issue one (seconds); steps of a few percent of the values a GPU lands on (gap 2-10 us,
# issue 10-40 us) so that the grid does not limit the fit.
INV_EFF_GRID = tuple(1.0 + 0.02 * i for i in range(201))
GAP_GRID_S = tuple(0.25e-6 * i for i in range(81))
ISSUE_GRID_S = tuple(0.5e-6 * i for i in range(201))


def layer_case_s(case: dict, rates: GpuRates, prof: Profile) -> float:
    """A layer case's forward + backward time as the step model prices a layer: each pass the
    GPU's work (its launches' gaps included) or the CPU's launches, whichever is longer."""
    t, _ = _layer_forward(case, rates, prof)
    return t.total_s + backward_time_s(t)


def fit_layer_launches(cases: Sequence[dict], rates: GpuRates, prof: Profile
                       ) -> tuple[float, float, float]:
    """(``hbm_efficiency``, ``kernel_overhead_s``, ``host_launch_s``) on a GPU, where the CPU
    queues kernels ahead of the device (module docstring): least squares in relative error
    over :data:`INV_EFF_GRID` x :data:`GAP_GRID_S` x :data:`ISSUE_GRID_S`. ``prof``'s own three
    values are ignored."""
    import numpy as np

    base = Profile(**{**prof.__dict__, "hbm_efficiency": 1.0, "kernel_overhead_s": 0.0,
                      "host_launch_s": 0.0})
    inv = np.asarray(INV_EFF_GRID)[:, None, None]
    gap = np.asarray(GAP_GRID_S)[None, :, None]
    issue = np.asarray(ISSUE_GRID_S)[None, None, :]
    loss = np.zeros((len(INV_EFF_GRID), len(GAP_GRID_S), len(ISSUE_GRID_S)))
    for c in cases:
        work = _layer_case_work(c, rates)
        t, n = layer_forward_time(work, rates, base), work.launches
        dense = t.gemm_s + t.attention_s
        fwd = np.maximum(dense + t.elementwise_s * inv + n.fwd * gap, n.host_fwd * issue)
        bwd_dense = BWD_GEMM * t.gemm_s + BWD_ATTN * t.attention_s
        bwd = np.maximum(bwd_dense + BWD_ELEM * t.elementwise_s * inv + n.bwd * gap,
                         n.host_bwd * issue)
        loss += ((fwd + bwd) / c["time_s"] - 1.0) ** 2
    i, j, k = np.unravel_index(int(np.argmin(loss)), loss.shape)
    return 1.0 / INV_EFF_GRID[i], GAP_GRID_S[j], ISSUE_GRID_S[k]


def median_cases(per_rank: Sequence[Sequence[dict]]) -> list[dict]:
    """One list of cases: each case's median time over the ranks that ran it together."""
    out = []
    for cases in zip(*per_rank):
        out.append({**cases[0], "time_s": statistics.median(c["time_s"] for c in cases)})
    return out


@dataclass(frozen=True)
class CalibrationFit:
    """What the microbenchmarks say about one device and its link tier."""

    peak_flops: float
    memory_bw_bytes_per_s: float
    profile: Profile
    link: LinkFit
    residuals: tuple[Residual, ...]
    attention_call_s: float = 0.0  # AttentionFit.call_s: reported, not in the profile


def fit_all(raw: dict, tier: str = "host", elem_bytes: int = 4) -> CalibrationFit:
    """Fit every parameter from a ``planner.calibration-raw/v1`` record (see module doc)."""
    compute = raw["compute"]
    gemm_cases = median_cases([r["gemm"] for r in compute])
    attn_cases = median_cases([r["attention"] for r in compute])
    layer_cases = median_cases([r["layer"] for r in compute])
    copy_cases = median_cases([r["copy"] for r in compute])
    dispatch_cases = median_cases([r.get("dispatch", []) for r in compute])
    eager_cases = median_cases([r.get("eager", []) for r in compute])
    g = fit_gemm(gemm_cases)
    attn = fit_attention(attn_cases, g.peak_flops)
    bw = fit_bandwidth(copy_cases)
    prof = Profile(gemm_efficiency=g.efficiency, gemm_half_dim=g.half_dim,
                   attention_efficiency=attn.efficiency, attention_half_keys=attn.half_keys,
                   hbm_efficiency=1.0, kernel_overhead_s=0.0,
                   link_efficiency={tier: 1.0})
    rates = GpuRates(g.peak_flops, bw, False, elem_bytes)
    host_launch = 0.0
    cold = 0.0
    if raw.get("backend", "gloo") == "gloo":  # a CPU: every kernel runs on the issuing core
        hbm_eff, overhead, cold = fit_layer_overheads(layer_cases, rates, prof)
    else:  # a GPU: launches overlap the device's work (module docstring)
        hbm_eff, overhead, host_launch = fit_layer_launches(layer_cases, rates, prof)
    comm_cases = raw.get("collectives", [])
    link = fit_link_per_op(comm_cases, tier)
    interleave = raw.get("interleave", [])
    tables = collective_tables(comm_cases, tier)
    resume_s, p2p_latency_s = fit_resume(raw.get("resume", []))
    switch, skew, burst = fit_collective_switch(interleave, link, tier, tables)
    solve_s, solve_per_expert_s = fit_dispatch(dispatch_cases)
    prof = Profile(**{**prof.__dict__, "kernel_overhead_s": overhead, "hbm_efficiency": hbm_eff,
                      "cold_weight_s_per_byte": cold,
                      "host_launch_s": host_launch, "resume_s": resume_s,
                      "p2p_latency_s": p2p_latency_s,
                      "late_read_s": fit_late_read(raw.get("resume", [])),
                      "p2p_post_s": fit_p2p_post(raw.get("resume", [])),
                      "collective_latency_factor": link.latency_factor,
                      "collective_bw_factor": link.bw_factor,
                      "collective_switch_s": switch, "collective_skew_sqrt_s": skew,
                      "collective_burst_s": burst, "collective_tables": tables,
                      # the bandwidth is the stream copies' own rate (fit_bandwidth)
                      "stream_efficiency": 1.0, "dispatch_solve_s": solve_s,
                      "dispatch_solve_per_expert_s": solve_per_expert_s})
    # the calls' own cost, beyond the math this profile prices for them
    prof = Profile(**{**prof.__dict__, "eager_call_s": fit_eager_call(eager_cases, rates, prof)})
    residuals = _residuals(gemm_cases, attn_cases, layer_cases, copy_cases, comm_cases, g,
                           rates, prof, link, tier, attn.call_s)
    residuals += tuple(
        Residual("interleave", f"x{c['group_size']} {c['dim']}^3 + {c['bytes']} B",
                 c["interleaved_s"], c["compute_s"] + predict_collective(c, link, tier, tables)
                 + prof.collective_switch_s + comm.arrival_skew_s(c["compute_s"], prof))
        for c in interleave)
    residuals += tuple(
        Residual("dispatch", f"E{c['experts']} ep{c['ep']} n{c['assignments']}", c["time_s"],
                 solve_s + solve_per_expert_s * c["experts"]) for c in dispatch_cases)
    return CalibrationFit(g.peak_flops, bw, prof, link, residuals, attn.call_s)


def _residuals(gemm_cases, attn_cases, layer_cases, copy_cases, comm_cases, g: GemmFit,
               rates: GpuRates, prof: Profile, link: LinkFit, tier: str,
               attention_call_s: float = 0.0) -> tuple[Residual, ...]:
    from cost_models.compute import gemm_time_s

    out = []
    for c in gemm_cases:
        pred = gemm_time_s(Gemm(c["m"], c["n"], c["k"]), rates, prof)
        out.append(Residual("gemm", f"{c['m']}x{c['n']}x{c['k']}", c["time_s"], pred))
    for c in attn_cases:
        pred = (1 + BWD_ATTN) * attention_flops(c["batch"], c["heads"], c["seq"], c["head_dim"]) / (
            g.peak_flops * fused_attention_efficiency(prof, c["seq"] / 2)) + attention_call_s
        out.append(Residual("attention", f"b{c['batch']} a{c['heads']} s{c['seq']} "
                                         f"d{c['head_dim']}", c["time_s"], pred))
    for c in layer_cases:
        out.append(Residual("layer", f"b{c['batch']} s{c['seq']} h{c['hidden']}", c["time_s"],
                            layer_case_s(c, rates, prof)))
    for c in copy_cases:
        out.append(Residual("memory", f"{c['bytes'] // 2**10} KiB", c["time_s"],
                            c["moved_bytes"] / rates.hbm_bytes_per_s))  # streaming, eff. 1
    for c in comm_cases:
        out.append(Residual(c["op"], f"x{c['group_size']} {c['bytes']} B", c["time_s"],
                            predict_collective(c, link, tier)))
    return tuple(out)
