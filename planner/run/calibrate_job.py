"""Microbenchmarks of ``planner calibrate``, one process per device, under torchrun.

Training kernels (GEMMs by shape, causal attention forward + backward, a transformer layer,
memory bandwidth) and a decode step's kernels (skinny GEMMs against a weight larger than the
caches, one query per sequence against its KV cache), then collectives.

Every rank runs the same compute benchmarks at the same time (so shared caches, memory
bandwidth and cores are contended as in a real job), then the collectives run over the whole
world and over every power-of-two group size below it. Rank 0 gathers the timings and writes
them as one JSON object (``planner.calibration-raw/v1``); the cost models' fit (``fitting.fit_all``, called by
``planner calibrate``) turns them into profile parameters.

Timings: each case runs once to warm up, then repeats until ``min_time_s`` has passed (at
least ``min_reps`` times); we keep the median of the repeats (robust to a descheduled
repeat). The compute cases run in ``compute_passes`` passes over all of them, each pass a
share of that time, and keep the median of their passes (robust to a pass that fell in a slow
second of a shared host); the collectives alike in ``collective_passes``. Collectives are
timed as a job meets them: each repeat starts at a barrier, runs a short compute burst
(:func:`_burst`, untimed), then the collective; we keep the *mean* of the repeats, since a
step pays every collective's time, its stalls included (on a host whose cores all compute, a
gloo collective's mean is several times its median), on the slowest rank (the collective is
done when the last rank is done), as nccl-tests reports.

Rank 0 prints ``@@progress DONE TOTAL LABEL`` lines that ``planner calibrate`` turns into a
progress bar.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from planner.files import write_atomic
from planner.run.affinity import Pinning, pin_rank_for
from planner.run.speed_probe import machine_probes, probe_record
from planner.run.transport_threads import idle_transport_threads


@dataclass(frozen=True)
class Sizes:
    """What to measure; ``quick`` is for tests (seconds, not minutes)."""

    gemm: tuple[tuple[int, int, int], ...]
    attention: tuple[tuple[int, int, int, int], ...]  # batch, heads, seq, head_dim
    layer: tuple[tuple[int, int, int, int], ...]  # batch, seq, hidden, heads
    copy_bytes: tuple[int, ...]
    comm_bytes: tuple[int, ...]
    min_time_s: float
    min_reps: int
    decode_rows: tuple[int, ...] = ()  # M of the skinny GEMMs x[M, K] @ W[K, N]
    decode_dim: int = 0  # K = N of their weight (fp32: 4 * K * N bytes, beyond the caches)
    decode_attention: tuple[tuple[int, int, int, int], ...] = ()  # batch, heads, context, head_dim
    # compute and a blocking all-reduce over the world taking turns: (GEMM dim, message bytes)
    interleave: tuple[tuple[int, int], ...] = ()
    # the ping-pong of resume_cases: the block forward timed (batch, seq, hidden, heads), reps
    resume: tuple[int, int, int, int] = (1, 16, 96, 4)
    resume_reps: int = 200
    # host-side work of one expert dispatch (the reference job's quota solve and bookkeeping):
    # (logical experts, EP ranks, this rank's token-expert assignments)
    dispatch: tuple[tuple[int, int, int], ...] = ()
    # eager no-grad torch calls on tiny tensors, as a decode step's expert loop makes them:
    # (rows, width)
    eager: tuple[tuple[int, int], ...] = ()
    # the compute cases, and the collectives, run this many times over, each pass a share of
    # min_time_s, and each case keeps the median of its passes (merge_passes)
    compute_passes: int = 1
    collective_passes: int = 1


# A grid of shapes, not the jobs it is checked on: benchmarks/executor_prediction.py's
# reference GPTs (hidden 192 to 384, sequences 96 to 192, 3 to 6 heads, 128 to 512 tokens a
# micro-batch) fall between these points, never on one (a calibration that measured the
# job's own shapes would validate nothing). The layer grid reaches activations of 1.2 MB a
# tensor, past the jobs' 0.5 MB: elementwise kernels on cache-resident tensors run faster
# than the memory bandwidth, so a grid of small layers alone fits hbm_efficiency at its cap.
FULL = Sizes(
    gemm=((32, 32, 32), (64, 64, 64), (96, 96, 96), (192, 192, 192), (384, 384, 384),
          (768, 768, 768), (1280, 1280, 1280), (192, 48, 192), (192, 1536, 192),
          (384, 192, 1536), (1536, 576, 192), (2048, 192, 192), (96, 2048, 384),
          (16, 384, 384)),
    attention=((1, 3, 48, 64), (2, 3, 96, 64), (2, 6, 192, 32), (1, 8, 384, 32),
               (3, 6, 160, 48)),
    layer=((1, 16, 32, 4), (1, 24, 48, 4), (2, 48, 96, 4), (1, 96, 192, 6), (3, 96, 192, 6),
           (2, 160, 320, 5), (4, 160, 320, 5), (3, 224, 448, 7)),
    copy_bytes=(2**20, 4 * 2**20, 16 * 2**20, 64 * 2**20),
    comm_bytes=tuple(2**k for k in range(10, 27, 2)),  # 1 KiB to 64 MiB (gradient buckets)
    min_time_s=0.15, min_reps=5,
    # decode: a 64 MiB fp32 weight (two ranks: 128 MiB, beyond a server CPU's L3); KV caches
    # of 1 to 256 MiB per rank (4 KiB per token), from cache-resident to streaming
    decode_rows=(1, 2, 4, 8, 16, 32, 64, 128, 256), decode_dim=4096,
    decode_attention=((1, 8, 256, 64), (1, 8, 1024, 64), (1, 8, 4096, 64), (4, 8, 2048, 64),
                      (4, 8, 4096, 64), (8, 8, 4096, 64), (16, 8, 4096, 64)),
    # segments of 0.05 to 90 ms on the 2-vCPU box; the 1 to 6 ms the reference jobs compute
    # between blocking collectives hold four of them, since an extra's error grows with its
    # segment and the fit weights it so (cost_models.fitting.fit_collective_switch)
    interleave=((96, 16 * 2**10), (192, 48 * 2**10), (192, 320 * 2**10), (288, 160 * 2**10),
                (384, 96 * 2**10), (384, 2**20), (512, 640 * 2**10), (768, 256 * 2**10),
                (1280, 2**20)),
    # On the 2-vCPU EPYC a case's 0.15 s could fall in a slow second: three calibrations
    # minutes apart (2026-11-29 03:20 UTC) timed the same cases 1.0-2.4x the committed
    # calibration's, case by case (a layer case 1.1x on one rank and 2.0x on the other), so
    # a fit on one pass mixes the machine's states; three passes spread over the compute
    # phase and their median hold its usual state (docs/runtime.md, "Compute in passes").
    compute_passes=3,
    # The link too: gloo's loopback between the two vCPUs had two speeds, each held 3 to 30 s
    # (an all-reduce of 16 MiB 6.3 or 11.8 ms, docs/runtime.md), and a collective's size was
    # timed in one of them; three passes over the sizes, each case's median pass mean.
    collective_passes=3,
    # the MoE reference job runs 8 experts on 2 ranks with 256 assignments: none of these
    dispatch=((4, 2, 128), (16, 2, 1024), (32, 4, 512), (64, 4, 2048)),
    # the AFD job decodes 8 rows of hidden 64 per rank: neither of these
    eager=((4, 32), (32, 128)))
QUICK = Sizes(
    gemm=((32, 32, 32), (128, 128, 128), (256, 256, 256), (256, 1024, 256)),
    attention=((1, 4, 64, 64), (2, 4, 128, 64)),
    layer=((1, 16, 32, 4), (1, 32, 64, 4)),
    copy_bytes=(2**20,),
    comm_bytes=(2**10, 2**16, 2**20),
    min_time_s=0.01, min_reps=2,
    decode_rows=(1, 16, 64), decode_dim=3072,  # a 36 MiB weight
    decode_attention=((1, 8, 1024, 64), (2, 8, 4096, 64), (4, 8, 4096, 64)),  # 4 to 64 MiB
    interleave=((192, 48 * 2**10),), resume_reps=20, dispatch=((4, 2, 64), (16, 2, 256)),
    eager=((4, 32),), compute_passes=2, collective_passes=2)
# On a GPU (bf16) the shapes must reach the tensor cores' plateau and the buffers must leave a
# 50-60 MiB L2 (H100, H200) by far, with bytes that dwarf a launch (~10 us at 4 TB/s is 40 MB):
# GEMMs 128 to 16384 per side, FlashAttention shapes of 512 to 8192 tokens, blocks from
# launch-bound (hidden 256) to GEMM-bound (hidden 4096), copies of 4 MiB (in L2) to 1 GiB, a
# 128 MiB bf16 decode weight, KV caches of 2 MiB to 2 GiB (4 KiB per token).
GPU = {
    False: {"gemm": ((128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
                     (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
                     (16384, 4096, 4096), (4096, 16384, 4096), (8192, 1024, 8192),
                     (8192, 8192, 1024), (512, 8192, 8192), (256, 4096, 4096),
                     (4096, 128, 4096), (16384, 1536, 7168), (4096, 5120, 14336)),
            "attention": ((1, 8, 512, 64), (1, 16, 1024, 128), (2, 32, 2048, 128),
                          (1, 32, 4096, 128), (1, 16, 8192, 128), (4, 8, 2048, 64)),
            # launch-bound to GEMM-bound; on a GPU the CPU's launches overlap the device's
            # work, so the fit (fitting.fit_layer_launches) needs cases on both sides, and one
            # GPU-bound case whose element-wise kernels weigh (hidden 512, 65k tokens) to tell
            # hbm_efficiency from the per-kernel gap (with 3% noise, 0.60-1.0 for a true 0.7
            # without it, 0.61-0.81 with it: tests/test_calibration.py)
            "layer": ((1, 128, 256, 4), (1, 512, 512, 8), (2, 1024, 1024, 16),
                      (1, 2048, 2048, 16), (3, 2048, 1536, 12), (2, 4096, 3072, 24),
                      (2, 2048, 4096, 32), (1, 4096, 4096, 32), (16, 4096, 512, 8)),
            "copy_bytes": (4 * 2**20, 64 * 2**20, 256 * 2**20, 2**30),
            "min_time_s": 0.2, "min_reps": 10,
            "interleave": ((2048, 256 * 2**10), (4096, 2**20), (4096, 16 * 2**20)),
            "decode_rows": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512), "decode_dim": 8192,
            "decode_attention": ((1, 8, 512, 128), (1, 8, 4096, 128), (8, 8, 8192, 128),
                                 (32, 8, 8192, 128), (64, 8, 8192, 128), (128, 8, 8192, 128))},
    True: {"gemm": ((256, 256, 256), (1024, 1024, 1024), (4096, 4096, 4096), (512, 4096, 4096)),
           "attention": ((1, 16, 1024, 128), (1, 16, 4096, 128)),
           "layer": ((1, 128, 256, 4), (1, 1024, 1024, 16)),
           "copy_bytes": (64 * 2**20,),
           "interleave": ((2048, 2**20),),
           "decode_rows": (1, 16, 64), "decode_dim": 8192,
           "decode_attention": ((1, 8, 4096, 128), (16, 8, 8192, 128))},
}


DEVICE = torch.device("cpu")  # set by main(): this rank's GPU with nccl
DTYPE = torch.float32  # set by main(): bf16 on a GPU (what training and serving run in)


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def _rand(*shape: int, requires_grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE, dtype=DTYPE, requires_grad=requires_grad)


GPU_REPEAT_S = 2e-3  # on a GPU one timed repeat queues calls for about this long


def _timeit(fn, min_time_s: float, min_reps: int) -> float:
    """Median seconds of ``fn()`` (after one warm-up call), the device synchronised. On a GPU a
    timed repeat queues ``inner`` calls back to back and divides, as a job queues its kernels:
    a synchronisation per call would add the host's round trip (~10 us) to every kernel."""
    fn()
    _sync()
    inner = 1
    if DEVICE.type == "cuda":
        t0 = time.perf_counter()
        fn()
        _sync()
        inner = max(1, min(1000, int(GPU_REPEAT_S / max(time.perf_counter() - t0, 1e-7))))
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_time_s:
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        _sync()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def gemm_cases(sizes: Sizes) -> list[dict]:
    out = []
    for m, n, k in sizes.gemm:
        a, b = _rand(m, k), _rand(k, n)
        out.append({"m": m, "n": n, "k": k,
                    "time_s": _timeit(lambda: torch.mm(a, b), sizes.min_time_s, sizes.min_reps)})
    return out


def attention_cases(sizes: Sizes) -> list[dict]:
    """Causal SDPA forward + backward (what a training layer runs)."""
    out = []
    for b, h, s, d in sizes.attention:
        q, k, v = (_rand(b, h, s, d, requires_grad=True) for _ in range(3))
        grad = _rand(b, h, s, d)

        def run():
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
        out.append({"batch": b, "heads": h, "seq": s, "head_dim": d,
                    "time_s": _timeit(run, sizes.min_time_s, sizes.min_reps)})
    return out


# Blocks timed as one stack, each layer's time being the stack's over this count: in a model
# the other layers' work evicts a layer's weights from the caches before its next forward or
# backward, which a block timed alone on repeat never sees (its 3 MB of fp32 weights at hidden
# 256 stay in a 4 MB L2). On the 2-vCPU Xeon, two processes at once, hidden 256, 128 tokens
# (2026-11-28): 6.4 ms a block alone on repeat, 6.8 ms a block in a stack of 4.
LAYER_STACK = 4


def layer_cases(sizes: Sizes) -> list[dict]:
    """Forward + backward of a stack of :data:`LAYER_STACK` small transformer blocks (the
    reference job's, each with weights of its own), per block: dominated by per-kernel
    overheads at small sizes, from which the fit takes ``kernel_overhead_s``."""
    from planner.run.reference_job.model import Block

    out = []
    for b, s, h, heads in sizes.layer:
        blocks = [Block(h, heads).to(DEVICE, DTYPE) for _ in range(LAYER_STACK)]
        x = _rand(b, s, h, requires_grad=True)

        def run():
            y = x
            for block in blocks:
                y = block(y)
            y.sum().backward()
        out.append({"batch": b, "seq": s, "hidden": h, "heads": heads, "ffn": 4 * h,
                    "stack": LAYER_STACK,
                    "time_s": _timeit(run, sizes.min_time_s, sizes.min_reps) / LAYER_STACK})
    return out


def copy_cases(sizes: Sizes) -> list[dict]:
    """``c = a + b`` over tensors of each size (fp32 on CPU, bf16 on GPU): reads 2, writes 1."""
    out = []
    for nbytes in sizes.copy_bytes:
        a, b = (_rand(nbytes * 8 // torch.finfo(DTYPE).bits) for _ in range(2))
        c = torch.empty_like(a)
        out.append({"bytes": nbytes, "moved_bytes": 3 * nbytes,
                    "time_s": _timeit(lambda: torch.add(a, b, out=c), sizes.min_time_s,
                                      sizes.min_reps)})
    return out


def dispatch_cases(sizes: Sizes) -> list[dict]:
    """The host-side work of one expert dispatch of the MoE reference job
    (:func:`planner.run.reference_job.ep.dispatch_bookkeeping`: the real-time quotas, the
    dispatch matrix, each assignment's slot, the splits) for E experts on ``ep`` ranks, each
    GPU holding E / ep experts and one replica of the next GPU's first, with ``n`` skewed
    assignments per rank (seeded). CPU work whatever the backend. As in a job, each timed call
    follows compute that displaced its caches (a GEMM and a 4 MiB element-wise pass, untimed):
    back to back, the same calls ran 30% faster on the 2-vCPU box than between compute."""
    import numpy as np

    from planner.run.reference_job.ep import dispatch_bookkeeping

    out = []
    rng = np.random.default_rng(0)
    a = _rand(BURST_DIM, BURST_DIM)
    big = torch.ones(2**20)
    spill = torch.empty_like(big)
    for experts, ep, n in sizes.dispatch:
        per = experts // ep
        phy2log = np.array([e for g in range(ep) for e in
                            [*range(g * per, (g + 1) * per), ((g + 1) * per) % experts]])
        weights = 1.0 / np.arange(1, experts + 1)  # Zipf-like loads
        counts = np.stack([rng.multinomial(n, weights / weights.sum()) for _ in range(ep)])
        mine = rng.permutation(np.repeat(np.arange(experts), counts[0]))
        dispatch_bookkeeping(counts, mine, phy2log, per + 1, ep, 0)  # warm-up
        times: list[float] = []
        start = time.perf_counter()
        while len(times) < sizes.min_reps or time.perf_counter() - start < sizes.min_time_s:
            a @ a
            torch.add(big, big, out=spill)
            _sync()
            t0 = time.perf_counter()
            dispatch_bookkeeping(counts, mine, phy2log, per + 1, ep, 0)
            times.append(time.perf_counter() - t0)
        out.append({"experts": experts, "ep": ep, "assignments": n,
                    "time_s": statistics.median(times)})
    return out


EAGER_CALLS = 19  # torch calls of one eager_cases sequence (counted in its body)


def eager_cases(sizes: Sizes) -> list[dict]:
    """What one eager torch call costs without autograd on tiny tensors (the dispatcher, not
    the math): a decode step's expert loop as the AFD job runs it, two experts of
    ``rows x width`` (a zeros buffer; per expert a compare, nonzero, row gather, linear, GELU,
    linear, gate gather, multiply, index_add_: 1 + 2 x 9 = :data:`EAGER_CALLS` calls) under
    ``torch.no_grad``. The layer cases' ``kernel_overhead_s`` includes autograd's recording
    and the backward's calls, which a no-grad decode does not pay."""
    out = []
    for rows, width in sizes.eager:
        x = _rand(rows, width)
        gates = _rand(rows, 1)
        ids = torch.arange(rows, device=DEVICE) % 2
        fc1 = torch.nn.Linear(width, 2 * width).to(DEVICE, DTYPE)
        fc2 = torch.nn.Linear(2 * width, width).to(DEVICE, DTYPE)

        def sequence() -> torch.Tensor:
            acc = torch.zeros_like(x)
            for e in range(2):
                picked = (ids == e).nonzero(as_tuple=True)[0]
                y = fc2(F.gelu(fc1(x[picked])))
                acc.index_add_(0, picked, y * gates[picked])
            return acc
        with torch.no_grad():
            t = _timeit(sequence, sizes.min_time_s, sizes.min_reps)
        out.append({"rows": rows, "width": width, "calls": EAGER_CALLS, "time_s": t})
    return out


def decode_gemm_cases(sizes: Sizes) -> list[dict]:
    """A decode step's weight GEMMs: ``x[M, K] @ W[K, N]`` with M the batch's tokens (few) and a
    weight larger than the caches, so that few rows stream the weight from memory and many rows
    are compute-bound (the roofline of ``cost_models/serving/latency.py``'s ``gemm_s``)."""
    if not sizes.decode_rows:
        return []
    k = n = sizes.decode_dim
    w = _rand(k, n)
    out = []
    for m in sizes.decode_rows:
        x = _rand(m, k)
        out.append({"m": m, "n": n, "k": k, "elem_bytes": w.element_size(),
                    "time_s": _timeit(lambda: torch.mm(x, w), sizes.min_time_s,
                                      sizes.min_reps)})
    return out


def decode_attention_cases(sizes: Sizes) -> list[dict]:
    """Decode attention: one query per sequence, ``q[B, H, 1, D]``, against its KV cache
    ``k, v[B, H, L, D]`` (SDPA without a mask: the query sees every cached key). Memory-bound:
    it reads every KV byte once (``kv_bytes``) for 4 * B * H * L * D FLOPs."""
    out = []
    for b, h, ctx, d in sizes.decode_attention:
        q, k, v = _rand(b, h, 1, d), _rand(b, h, ctx, d), _rand(b, h, ctx, d)
        out.append({"batch": b, "heads": h, "context": ctx, "head_dim": d,
                    "elem_bytes": k.element_size(),
                    "kv_bytes": 2 * k.numel() * k.element_size(),
                    "time_s": _timeit(lambda: F.scaled_dot_product_attention(q, k, v),
                                      sizes.min_time_s, sizes.min_reps)})
    return out


# every compute benchmark, in the order a pass runs them: (name in the raw record, cases)
COMPUTE_BENCHES = (("gemm", gemm_cases), ("attention", attention_cases),
                   ("layer", layer_cases), ("copy", copy_cases),
                   ("decode_gemm", decode_gemm_cases),
                   ("decode_attention", decode_attention_cases),
                   ("dispatch", dispatch_cases), ("eager", eager_cases))


def _supported(op) -> bool:
    try:
        op()
        return True
    except (RuntimeError, NotImplementedError, ValueError):
        return False


def _collective_ops(group, size: int, nbytes: int, me: int):
    """name -> callable for the collectives of one group; sizes follow nccl-tests (all-reduce,
    all-to-all: the per-rank buffer; all-gather, reduce-scatter: the gathered result)."""
    n = nbytes // 4
    buf = torch.ones(n, device=DEVICE)
    part = torch.ones(max(1, n // size), device=DEVICE)
    full = torch.ones(part.numel() * size, device=DEVICE)
    a2a_out = torch.empty(part.numel() * size, device=DEVICE)
    a2a_in = torch.ones(part.numel() * size, device=DEVICE)
    ops = {
        "all_reduce": lambda: dist.all_reduce(buf, group=group),
        "all_gather": lambda: dist.all_gather_into_tensor(full, part, group=group),
        "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, full, group=group),
        "all_to_all": lambda: dist.all_to_all_single(a2a_out, a2a_in, group=group),
    }
    if size == 2:  # one way: the first member sends, the second receives (a pipeline hop)
        peer = dist.get_global_rank(group, 1 - me)
        ops["send_recv"] = ((lambda: dist.send(buf, dst=peer)) if me == 0
                            else (lambda: dist.recv(buf, src=peer)))
    return ops


def collective_cases(sizes: Sizes, rank: int, world: int, report) -> list[dict]:
    """Every collective over the world and over groups of 2, 4, ... ranks (the first ones), in
    ``sizes.collective_passes`` passes over all of them (each a share of ``min_time_s``); each
    case keeps the median of its passes' means (:func:`merge_passes`)."""
    groups = []
    for g in _group_sizes(world):
        members = list(range(g))
        group = dist.new_group(members)  # every rank creates every group, in the same order
        _idle_transport()  # the new group's transport thread too
        groups.append((g, group, members.index(rank) if rank in members else -1))
    passes = max(1, sizes.collective_passes)
    one_pass = pass_sizes(sizes, passes)
    timed = []
    for _ in range(passes):
        timed.append([])
        for g, group, me in groups:
            for nbytes in sizes.comm_bytes:
                timed[-1] += _collectives_of(one_pass, group, g, me, nbytes, world, report)
            dist.barrier()
    return merge_passes(timed)


def _collectives_of(sizes: Sizes, group, g: int, me: int, nbytes: int, world: int,
                    report) -> list[dict]:
    """Each collective the members of ``group`` (``g`` ranks; this rank's index ``me``, -1
    outside it) all run at ``nbytes``, timed once (:func:`_timed_collective`), on the slowest
    member: the collective is done when the last member is."""
    out = []
    names = _agree(list(_collective_ops(group, g, nbytes, me)) if me >= 0 else [])
    for name in names:
        elapsed = -1.0
        if me >= 0:
            op = _collective_ops(group, g, nbytes, me)[name]
            elapsed = _timed_collective(op, group, sizes) if _supported(op) else -1.0
        times = [0.0] * world
        dist.all_gather_object(times, elapsed)
        if min(times[:g]) >= 0:
            out.append({"op": name, "group_size": g, "bytes": nbytes, "time_s": max(times[:g])})
        report(f"{name} x{g} {nbytes} B")
    return out


def _agree(names: list[str]) -> list[str]:
    """The union of every rank's collective names, in a fixed order."""
    lists: list = [None] * dist.get_world_size()
    dist.all_gather_object(lists, names)
    order = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
    return [n for n in order if any(n in l for l in lists)]


INTERLEAVE_ROUNDS = 3  # alternating (compute alone, compute + all-reduce) measurements


def interleave_cases(sizes: Sizes, world: int, report) -> list[dict]:
    """Compute and a blocking all-reduce over the world taking turns, as TP and EP layers run
    them: ``k`` rounds of two GEMMs of ``dim`` followed by an all-reduce of ``bytes``, against
    the same ``k`` GEMM pairs alone (each the slowest rank's time, the median of
    :data:`INTERLEAVE_ROUNDS` alternating measurements). What the interleaved run costs beyond
    the compute alone and the calibrated all-reduce is the collective's switch cost
    (``cost_models.fitting.fit_collective_switch``). Nothing with one process."""
    if world < 2:
        return []
    out = []
    burst_s = _burst_s()
    for dim, nbytes in sizes.interleave:
        a = _rand(dim, dim)
        buf = torch.ones(nbytes // 4, device=DEVICE)

        def compute():
            a @ a
            a @ a
        compute()
        _sync()
        t0 = time.perf_counter()
        compute()
        _sync()
        probe = torch.tensor([time.perf_counter() - t0])
        dist.all_reduce(probe, op=dist.ReduceOp.MAX)
        k = int(min(400, max(sizes.min_reps, sizes.min_time_s / max(float(probe), 1e-6))))
        alone, mixed = [], []
        for _ in range(INTERLEAVE_ROUNDS):
            for runs, with_comm in ((alone, False), (mixed, True)):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(k):
                    compute()
                    if with_comm:
                        dist.all_reduce(buf)
                _sync()
                elapsed = torch.tensor([time.perf_counter() - t0])
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
                runs.append(float(elapsed) / k)
        out.append({"op": "all_reduce", "group_size": world, "bytes": nbytes, "dim": dim,
                    "rounds": k, "compute_s": statistics.median(alone),
                    "interleaved_s": statistics.median(mixed), "burst_s": burst_s})
        report(f"interleave {dim} {nbytes} B")
    return out


RESUME_GAP_S = 2e-3  # the echoing rank computes this long before it answers
# The ping-pong runs in this many chunks spread over the measurement (before the compute
# cases, amid them, after the collectives, at the end): one ~1.5 s stretch of it measured a
# box's waits 1.3-2.2x apart from one minute to the next (docs/runtime.md, "Posting a
# message"), a calibration should hold their average over its own minute
RESUME_CHUNKS = 4


def pass_sizes(sizes: Sizes, passes: int) -> Sizes:
    """What one of ``passes`` passes measures: a case's ``min_time_s`` shared among them, and
    at least 2 repeats (a median needs more than one)."""
    return replace(sizes, min_time_s=sizes.min_time_s / passes,
                   min_reps=max(2, -(-sizes.min_reps // passes)))


def merge_passes(passes: list[list[dict]]) -> list[dict]:
    """One case per case of a benchmark's passes (the same cases in the same order in each):
    its ``time_s`` the median of the passes' (a pass that fell in a slow second is outvoted),
    the passes' own kept as ``pass_times_s``."""
    out = []
    for cases in zip(*passes, strict=True):
        times = [c["time_s"] for c in cases]
        out.append({**cases[0], "time_s": statistics.median(times), "pass_times_s": times})
    return out


def merge_resume_chunks(chunks: list[list[dict]]) -> list[dict]:
    """One case per pair from :func:`resume_cases`' chunks: every timed mean averaged over
    the chunks that measured it for the pair (equal repeats each), the repeats added."""
    by_pair: dict[tuple[int, ...], list[dict]] = {}
    for chunk in chunks:
        for case in chunk:
            by_pair.setdefault(tuple(case["pair"]), []).append(case)
    timed = ("hot_s", "after_wait_s", "one_way_s", "late_wait_s", "post_s")
    out = []
    for pair in sorted(by_pair):
        cases = by_pair[pair]
        merged = {**cases[0], "reps": sum(c["reps"] for c in cases), "chunks": len(cases)}
        for key in timed:
            values = [c[key] for c in cases if key in c]
            if values:
                merged[key] = statistics.fmean(values)
        out.append(merged)
    return out


def resume_cases(sizes: Sizes, world: int, report, reps: int | None = None) -> list[dict]:
    """What blocking in a receive costs the compute after it, and a small message's latency
    when its receiver already waits: a ping-pong in pairs (ranks ``2i``, ``2i + 1``). Per
    repeat the even rank times a no-grad forward of a small block run right after another one
    (``hot``), sends 4 bytes, blocks in its receive while its peer computes for
    :data:`RESUME_GAP_S` (the peer was blocked too, and resumes), and times the same forward
    right after the answer arrived (``after_wait``). The round trip less the gap is two
    one-way latencies of a message whose receiver waits (both wake-ups included). Then the
    late read (``late_wait_s``): the even rank posts a receive and both ranks compute; the
    odd rank sends halfway through the even rank's compute; the even rank's wait afterwards
    is what reading a message that came while it computed costs (with gloo's transport
    threads idle-priority, as in the jobs). In that loop both ranks time posting their
    non-blocking operation, the even rank's ``irecv`` and the odd rank's ``isend`` into it
    (``post_s``, their mean: the calls' own time, which gloo spends taking the pair's lock and
    writing to its socket). Means over the repeats (a job pays every stall);
    one case per pair, from its even rank. Nothing with one process. ``reps`` repeats of
    each loop (``sizes.resume_reps`` unless given): ``measure`` runs :data:`RESUME_CHUNKS`
    chunks and merges them (:func:`merge_resume_chunks`).
    ``cost_models.fitting.fit_resume`` turns them into ``Profile.resume_s`` and
    ``Profile.p2p_latency_s``, ``fit_late_read`` into ``Profile.late_read_s`` and
    ``fit_p2p_post`` into ``Profile.p2p_post_s``."""
    from planner.run.reference_job.model import Block

    if world < 2:
        return []
    n_reps = sizes.resume_reps if reps is None else reps
    rank = dist.get_rank()
    peer = rank ^ 1
    b, s, h, heads = sizes.resume
    block = Block(h, heads).to(DEVICE, DTYPE)
    x = _rand(b, s, h)
    spin = _rand(32, 32)
    msg = torch.zeros(1, device=DEVICE)

    def forward() -> float:
        t0 = time.perf_counter()
        block(x)
        _sync()
        return time.perf_counter() - t0

    hot, after, trips = [], [], []
    with torch.no_grad():
        for _ in range(3):
            forward()
        dist.barrier()
        for _ in range(n_reps if peer < world else 0):
            if rank % 2 == 0:
                forward()
                hot.append(forward())
                t0 = time.perf_counter()
                dist.send(msg, dst=peer)
                dist.recv(msg, src=peer)
                _sync()
                trips.append(time.perf_counter() - t0 - RESUME_GAP_S)
                after.append(forward())
            else:
                dist.recv(msg, src=peer)
                _sync()
                _spin(spin, RESUME_GAP_S)
                dist.send(msg, dst=peer)
        dist.barrier()
        late, posts = _late_reads(rank, peer, msg, spin, n_reps if peer < world else 0)
    mine = ({"pair": [rank, peer], "batch": b, "seq": s, "hidden": h, "heads": heads,
             "reps": len(hot), "hot_s": statistics.fmean(hot),
             "after_wait_s": statistics.fmean(after),
             "one_way_s": max(0.0, statistics.fmean(trips) / 2.0),
             "late_wait_s": statistics.fmean(late)} if hot else None)
    cases: list = [None] * world
    dist.all_gather_object(cases, (mine, statistics.fmean(posts) if posts else None))
    report("resume after a wait")
    return [_with_posts(c, cases) for c, _ in cases if c is not None]


def _late_reads(rank: int, peer: int, msg: torch.Tensor, spin: torch.Tensor,
                reps: int) -> tuple[list[float], list[float]]:
    """A message that arrives while its receiver computes, ``reps`` times: the even rank
    posts the receive, both compute, the odd rank sends halfway through the even rank's
    compute and computes on; the even rank's wait afterwards is the late read. Returns the
    waits (empty on the odd rank) and this rank's post times (its ``irecv`` or ``isend``
    calls)."""
    late, posts = [], []
    for _ in range(reps):
        if rank % 2 == 0:
            t0 = time.perf_counter()
            work = dist.irecv(msg, src=peer)
            posts.append(time.perf_counter() - t0)
            _spin(spin, 2 * RESUME_GAP_S)
            t0 = time.perf_counter()
            work.wait()
            _sync()
            late.append(time.perf_counter() - t0)
        else:
            _spin(spin, RESUME_GAP_S)
            t0 = time.perf_counter()
            work = dist.isend(msg, dst=peer)  # into the receive posted above
            posts.append(time.perf_counter() - t0)
            _spin(spin, 2 * RESUME_GAP_S)
            work.wait()
        dist.barrier()
    return late, posts


def _with_posts(case: dict, gathered: list) -> dict:
    """``case`` (an even rank's) with ``post_s``: the mean time of posting one non-blocking
    point-to-point operation, over its pair's receives (even rank) and sends (odd rank)."""
    means = [gathered[r][1] for r in case["pair"]
             if r < len(gathered) and gathered[r][1] is not None]
    return {**case, "post_s": statistics.fmean(means)} if means else case


def _spin(spin: torch.Tensor, seconds: float) -> None:
    """Compute (small GEMMs) for ``seconds``."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.mm(spin, spin)
    _sync()


BURST_DIM = 256  # the compute burst before each timed collective: 4 GEMMs of this size


def _burst_s() -> float:
    """Seconds of the compute burst before each timed collective (:func:`_burst`), the median
    of five: the collective tables hold the arrival skew of this much compute
    (``Profile.collective_burst_s``)."""
    a = _rand(BURST_DIM, BURST_DIM)
    _burst(a)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        _burst(a)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _burst(a: torch.Tensor) -> None:
    """A little compute before each timed collective, as a job has between its collectives:
    every core busy, so the collective meets the scheduling a job's collectives meet."""
    for _ in range(4):
        a @ a
    _sync()


def _timed_collective(op, group, sizes: Sizes) -> float:
    """Mean seconds of ``op`` over repeats that every member runs the same number of times
    (a count the members agree on first); the barrier and the compute burst before each repeat
    are not timed."""
    op()
    a = _rand(BURST_DIM, BURST_DIM)
    dist.barrier(group=group)
    t0 = time.perf_counter()
    op()
    _sync()
    probe = torch.tensor([time.perf_counter() - t0])
    dist.all_reduce(probe, op=dist.ReduceOp.MAX, group=group)
    reps = int(min(200, max(sizes.min_reps, sizes.min_time_s / max(float(probe), 1e-6))))
    times = []
    for _ in range(reps):
        dist.barrier(group=group)
        _burst(a)
        t0 = time.perf_counter()
        op()
        _sync()
        times.append(time.perf_counter() - t0)
    return statistics.fmean(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="planner.run.calibrate_job")
    parser.add_argument("--out", required=True)
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.backend == "nccl":
        sizes = replace(sizes, **GPU[args.quick])
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    global DEVICE, DTYPE
    if args.backend == "nccl":
        DEVICE = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        DTYPE = torch.bfloat16
        torch.cuda.set_device(DEVICE)
    # gloo ranks on cores of their own, as the jobs run them (planner.run.affinity)
    pinning = pin_rank_for(args.backend)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    idle = _idle_transport()
    # the machine's compute and link speed now and at the end (planner.run.speed_probe)
    before = machine_probes(DEVICE, DTYPE, _sync)
    total = (max(1, sizes.compute_passes)
             * (len(sizes.gemm) + len(sizes.attention) + len(sizes.layer)
                + len(sizes.copy_bytes) + len(sizes.decode_rows)
                + len(sizes.decode_attention) + len(sizes.dispatch) + len(sizes.eager))
             + _count_comm(sizes, world))
    done = [0]

    def report(label: str) -> None:
        done[0] += 1
        if rank == 0:
            print(f"@@progress {done[0]} {total} {label}", flush=True)

    conditions = {"load_before": _load()}
    chunk_reps = max(1, sizes.resume_reps // RESUME_CHUNKS)
    chunks = [resume_cases(sizes, world, report, chunk_reps)]
    passes = max(1, sizes.compute_passes)
    one_pass = pass_sizes(sizes, passes)
    timed: dict[str, list] = {name: [] for name, _ in COMPUTE_BENCHES}
    for n in range(passes):
        for name, bench in COMPUTE_BENCHES:
            dist.barrier()
            timed[name].append(bench(one_pass))
            for _ in timed[name][-1]:
                report(name)
        if n == passes // 2:  # amid the compute cases
            chunks.append(resume_cases(sizes, world, report, chunk_reps))
    results = {name: merge_passes(p) for name, p in timed.items()}
    per_rank: list = [None] * world
    dist.all_gather_object(per_rank, results)
    comm = collective_cases(sizes, rank, world, report)
    chunks.append(resume_cases(sizes, world, report, chunk_reps))
    interleave = interleave_cases(sizes, world, report)
    chunks.append(resume_cases(sizes, world, report, chunk_reps))
    resume = merge_resume_chunks(chunks)
    conditions.update(probe_record(before, machine_probes(DEVICE, DTYPE, _sync)))
    conditions.update(load_after=_load(), **_machine_conditions(args.backend, world, pinning),
                      idle_transport_threads=idle)
    if rank == 0:
        record = {"schema": "planner.calibration-raw/v1", "world_size": world,
                  "backend": args.backend, "threads": torch.get_num_threads(),
                  "torch": torch.__version__, "quick": args.quick,
                  "device": _device_name(args.backend),
                  "memory_bytes": _memory_bytes(args.backend, world),
                  "conditions": conditions, "compute": per_rank, "collectives": comm,
                  "interleave": interleave, "resume": resume}
        write_atomic(Path(args.out), json.dumps(record, indent=1) + "\n")
    dist.barrier()
    dist.destroy_process_group()


def _idle_transport() -> int:
    """gloo's transport threads under SCHED_IDLE, as the jobs calibrate measures for run
    them (:mod:`planner.run.transport_threads`); the number changed (0 on NCCL)."""
    return idle_transport_threads() if dist.get_backend() == "gloo" else 0


def _load() -> float | None:
    """The host's 1-minute load average (runnable processes), None where unknown."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _machine_conditions(backend: str, world: int, pinning: Pinning) -> dict:
    """What the measurement ran under, for ``check-run`` to compare against a run's."""
    out = {"cpu_count": os.cpu_count(), "processes": world, "threads": torch.get_num_threads(),
           "backend": backend, "torch": torch.__version__, **pinning.record()}
    if backend == "nccl" and torch.cuda.is_available():
        out["cuda"] = torch.version.cuda
        try:
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError, TypeError):
            out["nccl"] = None
    return out


def _group_sizes(world: int) -> list[int]:
    """The group sizes the collectives are timed over: 2, 4, ... below the world, and the
    world (none with one rank)."""
    return [g for g in [*(2 ** i for i in range(1, 16) if 2 ** i < world), world] if g > 1]


def _count_comm(sizes: Sizes, world: int) -> int:
    per_size = 4  # all_reduce, all_gather, reduce_scatter, all_to_all (+ send_recv for 2)
    return (max(1, sizes.collective_passes)
            * sum(len(sizes.comm_bytes) * (per_size + (g == 2)) for g in _group_sizes(world))
            + (len(sizes.interleave) + RESUME_CHUNKS if world > 1 else 0))


def _device_name(backend: str) -> str:
    if backend == "nccl" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    import platform
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _memory_bytes(backend: str, world: int) -> float:
    """Memory one process may use: the GPU's, or the host's RAM split over the processes."""
    if backend == "nccl" and torch.cuda.is_available():
        return float(torch.cuda.get_device_properties(0).total_memory)
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return float(pages) / world
    except (ValueError, OSError):
        return 8.0 * 2**30


if __name__ == "__main__":
    main()
