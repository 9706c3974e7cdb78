"""Kernel timings behind issue 22's MoE and attention terms, on one GPU (torch only).

Run on a lent GPU machine from the repository root:
    python3 benchmarks/device/kernel_probe.py --out "$OUT/kernels.json"
and on a laptop with ``--device cpu --smoke`` (tiny shapes, to check the script runs).

What it times, each the median of three trials of a back-to-back loop timed by CUDA events
(after warm-ups; operands rotated through copies so a GEMM's weights come from HBM, not L2):
* ``attention``: PyTorch SDPA, causal, bf16, with the FLASH backend (FlashAttention-2, what
  ``attention="flash2"`` prices) and the CUDNN backend (cuDNN fused attention, Hopper-native,
  what Transformer Engine runs), forward and forward+backward, sequences 1k-32k; and an MLA-like
  shape (q/k head dim 192, v head dim 128) on the backends that accept it;
  ``attention_shapes``: head dims 64-256, grouped-query attention and calls with few tiles.
* ``gemm``: bf16 ``torch.mm`` at the projection shapes of fine-grained MoE experts and of dense
  layers, for token counts M 64-16384: the forward (M x K @ K x N) and the weight gradient
  (N x M @ M x K, whose reduction dimension is M).
* ``grouped``: ``torch._grouped_mm`` (one grouped GEMM over G local experts, as Megatron's
  grouped MLP runs) at the same shapes and tokens per expert, and the same work as G plain
  ``torch.mm`` calls.
* ``permute``: MoE token permutation (``index_select`` of each routed copy) and un-permutation
  (probability-weighted ``index_add_`` back, and the same as a gather and a weighted sum), bf16.
* ``fp8``: ``torch._scaled_mm`` (e4m3, per-tensor scales) against bf16 ``torch.mm`` on the same
  shapes; and the current-scaling cast of a bf16 activation (amax, scaled cast, and the
  transposed copy Hopper's fp8 weight-gradient GEMM needs).
* ``stream``: ``c = a + b`` over 1 GiB, the bandwidth reference.

Nothing here imports planner: the report (``benchmarks/device/kernel_report.py``) sets the
timings beside the cost model's prices on the machine that has planner.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

BF16 = torch.bfloat16
MiB = 2**20


class Timer:
    """Median of ``trials`` timings of a loop of ``fn`` calls, seconds per call."""

    def __init__(self, device: str, min_loop_s: float, trials: int = 3):
        self.device, self.min_loop_s, self.trials = device, min_loop_s, trials

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def _loop(self, fn, n: int) -> float:
        if self.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return time.perf_counter() - t0

    def __call__(self, fn) -> float:
        fn()
        self._sync()
        one = max(self._loop(fn, 1), 1e-6)
        n = max(1, min(200, math.ceil(self.min_loop_s / one)))
        self._loop(fn, min(n, 3))  # warm-up at the loop's pace
        return statistics.median(self._loop(fn, n) / n for _ in range(self.trials))


def _rotating(make, nbytes: int, l2_bytes: int):
    """Copies of an operand, enough that cycling them defeats the L2 (at most 8)."""
    copies = max(1, min(8, math.ceil(4 * l2_bytes / max(nbytes, 1))))
    return [make() for _ in range(copies)]


def attention_cases(timer: Timer, dev: str, smoke: bool) -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    if dev != "cuda":
        backends = {"math": SDPBackend.MATH}
    tokens = 256 if smoke else 32768
    seqs = [64, 128] if smoke else [1024, 2048, 4096, 8192, 16384, 32768]
    shapes = [("mha", 32, 128, 128)] + ([] if smoke else [("mla", 128, 192, 128)])
    rows = []
    for label, heads, d_qk, d_v in shapes:
        for s in seqs:
            if label == "mla" and s not in (4096, 16384):
                continue
            b = max(1, tokens // s)
            h = heads if label == "mha" else (heads // 4)  # MLA: 32 of 128 heads (TP4 shard)
            q = torch.randn(b, h, s, d_qk, device=dev, dtype=BF16, requires_grad=True)
            k = torch.randn(b, h, s, d_qk, device=dev, dtype=BF16, requires_grad=True)
            v = torch.randn(b, h, s, d_v, device=dev, dtype=BF16, requires_grad=True)
            for name, backend in backends.items():
                row = {"shape": label, "backend": name, "batch": b, "heads": h, "seq": s,
                       "head_dim_qk": d_qk, "head_dim_v": d_v}
                try:
                    with sdpa_kernel(backend):
                        def fwd():
                            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        out = fwd()
                        grad = torch.randn_like(out)

                        def fwd_bwd():
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            torch.autograd.grad(o, (q, k, v), grad)
                        row["fwd_s"] = timer(fwd)
                        row["fwd_bwd_s"] = timer(fwd_bwd)
                except Exception as exc:  # a backend that refuses the shape: record why
                    row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                rows.append(row)
            del q, k, v
    return rows


# (label, batch, query heads, kv heads, sequence, qk head dim, v head dim): head dims 64-256,
# grouped-query attention, and calls with few (batch x head) tiles, as TP-sharded runs make.
ATTENTION_SHAPES = (
    ("d64", 8, 32, 32, 4096, 64, 64), ("d64", 32, 32, 32, 1024, 64, 64),
    ("d64", 2, 32, 32, 16384, 64, 64), ("d256", 8, 16, 16, 4096, 256, 256),
    ("d128", 8, 32, 32, 4096, 128, 128), ("gqa4", 8, 32, 8, 4096, 128, 128),
    ("few-tiles", 1, 8, 8, 4096, 128, 128), ("few-tiles", 1, 4, 4, 8192, 128, 128),
    ("few-tiles", 1, 8, 8, 2048, 128, 128), ("few-tiles", 1, 16, 16, 4096, 128, 128),
    ("few-tiles", 2, 8, 8, 4096, 128, 128), ("few-tiles", 1, 8, 8, 8192, 128, 128),
    ("few-tiles", 1, 2, 2, 32768, 128, 128), ("few-tiles", 1, 32, 8, 4096, 128, 128),
    ("few-tiles", 1, 4, 4, 4096, 128, 128), ("mla-tp8", 1, 16, 16, 4096, 192, 128),
    ("mla-tp8", 1, 16, 16, 8192, 192, 128),
)


def attention_shape_cases(timer: Timer, dev: str, smoke: bool) -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    shapes = ATTENTION_SHAPES
    if dev != "cuda":
        backends = {"math": SDPBackend.MATH}
    if smoke:
        shapes = (("d64", 1, 4, 2, 64, 64, 64),)
    rows = []
    for label, b, hq, hkv, s, d_qk, d_v in shapes:
        q = torch.randn(b, hq, s, d_qk, device=dev, dtype=BF16, requires_grad=True)
        k = torch.randn(b, hkv, s, d_qk, device=dev, dtype=BF16, requires_grad=True)
        v = torch.randn(b, hkv, s, d_v, device=dev, dtype=BF16, requires_grad=True)
        gqa = hkv != hq
        for name, backend in backends.items():
            row = {"shape": label, "backend": name, "batch": b, "heads": hq, "kv_heads": hkv,
                   "seq": s, "head_dim_qk": d_qk, "head_dim_v": d_v}
            try:
                with sdpa_kernel(backend):
                    def fwd():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                              enable_gqa=gqa)
                    grad = torch.randn_like(fwd())

                    def fwd_bwd():
                        o = fwd()
                        torch.autograd.grad(o, (q, k, v), grad)
                    row["fwd_s"] = timer(fwd)
                    row["fwd_bwd_s"] = timer(fwd_bwd)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            rows.append(row)
        del q, k, v
    return rows


def gemm_cases(timer: Timer, dev: str, smoke: bool, l2: int) -> list[dict]:
    # (name, N, K): expert fc1 (GLU: 2 x ffn) / fc2 of DeepSeek-V3 (h 7168, ffn 2048),
    # Qwen3-235B-A22B (h 4096, ffn 1536), GPT-OSS (h 2880, ffn 2880); a dense 8192 square.
    shapes = [("dsv3_fc1", 4096, 7168), ("dsv3_fc2", 7168, 2048),
              ("qwen3_fc1", 3072, 4096), ("qwen3_fc2", 4096, 1536),
              ("gptoss_fc1", 5760, 2880), ("gptoss_fc2", 2880, 2880),
              ("dense_8192", 8192, 8192)]
    ms = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    if smoke:
        shapes, ms = [("tiny", 64, 96)], [16, 64]
    rows = []
    for name, n, k in shapes:
        ws = _rotating(lambda: torch.randn(k, n, device=dev, dtype=BF16), 2 * k * n, l2)
        for m in ms:
            x = torch.randn(m, k, device=dev, dtype=BF16)
            dy = torch.randn(m, n, device=dev, dtype=BF16)
            it = {"i": 0}

            def fwd():
                it["i"] += 1
                return x @ ws[it["i"] % len(ws)]

            def wgrad():  # dW = dY^T X: N x M @ M x K
                return dy.t() @ x
            rows.append({"shape": name, "m": m, "n": n, "k": k,
                         "fwd_s": timer(fwd), "wgrad_s": timer(wgrad)})
        del ws
    return rows


def grouped_cases(timer: Timer, dev: str, smoke: bool, l2: int) -> list[dict]:
    shapes = [("dsv3_fc1", 4096, 7168), ("dsv3_fc2", 7168, 2048),
              ("qwen3_fc1", 3072, 4096), ("qwen3_fc2", 4096, 1536)]
    groups, per_expert = [8, 32], [64, 128, 256, 512, 1024, 2048, 4096]
    if smoke:
        shapes, groups, per_expert = [("tiny", 64, 96)], [2], [16, 32]
    rows = []
    for name, n, k in shapes:
        for g in groups:
            w = torch.randn(g, k, n, device=dev, dtype=BF16)
            for m in per_expert:
                if g * m > 65536:
                    continue
                x = torch.randn(g * m, k, device=dev, dtype=BF16)
                offs = torch.arange(m, g * m + 1, m, device=dev, dtype=torch.int32)
                row = {"shape": name, "groups": g, "m_per_expert": m, "n": n, "k": k}

                def loop():
                    for e in range(g):
                        x[e * m:(e + 1) * m] @ w[e]
                row["loop_s"] = timer(loop)
                try:
                    row["grouped_s"] = timer(lambda: torch._grouped_mm(x, w, offs=offs))
                except Exception as exc:
                    row["grouped_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                rows.append(row)
            del w
    return rows


def permute_cases(timer: Timer, dev: str, smoke: bool) -> list[dict]:
    cases = [(8192, 7168, 8), (8192, 4096, 8), (8192, 2880, 4), (16384, 2048, 8)]
    if smoke:
        cases = [(64, 32, 2)]
    rows = []
    gen = torch.Generator(device=dev).manual_seed(0)
    for tokens, h, top_k in cases:
        x = torch.randn(tokens, h, device=dev, dtype=BF16)
        # each token's top_k experts; permutation groups the copies by expert (a sort)
        idx = torch.arange(tokens, device=dev).repeat_interleave(top_k)
        expert = torch.randint(0, 64, (tokens * top_k,), device=dev, generator=gen)
        order = torch.argsort(expert, stable=True)
        src = idx[order]
        probs = torch.rand(tokens * top_k, 1, device=dev, dtype=BF16, generator=gen)
        permuted = x.index_select(0, src)
        out = torch.zeros_like(x)

        def unpermute():
            out.zero_()
            out.index_add_(0, src, permuted * probs)
        inverse = torch.argsort(order)  # copy j of token t sits at inverse[t * top_k + j]
        probs_tk = probs[inverse].view(tokens, top_k, 1)

        def unpermute_gather():  # gather each token's copies back, then a weighted sum
            return (permuted.index_select(0, inverse).view(tokens, top_k, h) * probs_tk).sum(1)
        rows.append({"tokens": tokens, "hidden": h, "top_k": top_k,
                     "permute_s": timer(lambda: x.index_select(0, src)),
                     "unpermute_s": timer(unpermute),
                     "unpermute_gather_s": timer(unpermute_gather)})
    return rows


def fp8_cases(timer: Timer, dev: str, smoke: bool, l2: int) -> list[dict]:
    e4m3 = getattr(torch, "float8_e4m3fn", None)
    if dev != "cuda" or e4m3 is None:
        return []
    shapes = [(8192, 8192, 8192), (16384, 4096, 7168), (16384, 7168, 2048),
              (4096, 3072, 4096), (2048, 4096, 1536), (1024, 4096, 7168)]
    rows = []
    one = torch.ones((), device=dev, dtype=torch.float32)
    for m, n, k in shapes:
        a = torch.randn(m, k, device=dev, dtype=BF16)
        bs = _rotating(lambda: torch.randn(n, k, device=dev, dtype=BF16), 2 * n * k, l2)
        a8 = a.to(e4m3)
        b8s = [b.to(e4m3) for b in bs]
        it = {"i": 0}

        def bf16():
            it["i"] += 1
            return a @ bs[it["i"] % len(bs)].t()

        def fp8():
            it["i"] += 1
            return torch._scaled_mm(a8, b8s[it["i"] % len(b8s)].t(), scale_a=one, scale_b=one,
                                    out_dtype=BF16)
        row = {"m": m, "n": n, "k": k, "bf16_s": timer(bf16)}
        try:
            row["fp8_s"] = timer(fp8)
        except Exception as exc:
            row["fp8_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        rows.append(row)
    casts = []
    for tokens, h in [(16384, 7168), (16384, 4096), (8192, 8192)]:
        x = torch.randn(tokens, h, device=dev, dtype=BF16)

        def amax():
            return x.abs().amax()

        def cast():
            scale = 448.0 / x.abs().amax().float()
            return (x.float() * scale).to(e4m3)
        y = cast()
        casts.append({"tokens": tokens, "hidden": h, "amax_s": timer(amax), "cast_s": timer(cast),
                      "transpose_s": timer(lambda: y.t().contiguous())})
    return [{"gemm": rows, "cast": casts}]


def stream_case(timer: Timer, dev: str, smoke: bool) -> dict:
    n = (1 << 12) if smoke else (1 << 29)  # elements of bf16: 1 GiB per operand
    a = torch.randn(n, device=dev, dtype=BF16)
    b = torch.randn(n, device=dev, dtype=BF16)
    c = torch.empty_like(a)
    return {"elements": n, "bytes_moved": 3 * 2 * n,
            "add_s": timer(lambda: torch.add(a, b, out=c))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--smoke", action="store_true", help="tiny shapes (a check the script runs)")
    p.add_argument("--only", default="", help="comma-separated sections to run")
    args = p.parse_args(argv)
    dev = args.device
    torch.manual_seed(0)
    l2 = 60 * MiB
    info = {"torch": torch.__version__, "python": platform.python_version(), "device": dev}
    if dev == "cuda":
        props = torch.cuda.get_device_properties(0)
        l2 = getattr(props, "L2_cache_size", l2)
        info.update(gpu=props.name, sms=props.multi_processor_count, l2_bytes=l2,
                    memory_bytes=props.total_memory, cuda=torch.version.cuda,
                    cudnn=torch.backends.cudnn.version())
    timer = Timer(dev, min_loop_s=0.002 if args.smoke else 0.02)
    sections = {
        "stream": lambda: stream_case(timer, dev, args.smoke),
        "attention": lambda: attention_cases(timer, dev, args.smoke),
        "attention_shapes": lambda: attention_shape_cases(timer, dev, args.smoke),
        "gemm": lambda: gemm_cases(timer, dev, args.smoke, l2),
        "grouped": lambda: grouped_cases(timer, dev, args.smoke, l2),
        "permute": lambda: permute_cases(timer, dev, args.smoke),
        "fp8": lambda: fp8_cases(timer, dev, args.smoke, l2),
    }
    wanted = [s for s in args.only.split(",") if s] or list(sections)
    result = {"info": info}
    for name in wanted:
        t0 = time.perf_counter()
        try:
            result[name] = sections[name]()
        except Exception as exc:  # keep what the other sections measured
            result[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        result.setdefault("section_s", {})[name] = round(time.perf_counter() - t0, 2)
        print(f"{name}: {result['section_s'][name]} s", file=sys.stderr, flush=True)
        with open(args.out, "w") as f:  # after each section, so a cut run keeps what it has
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
