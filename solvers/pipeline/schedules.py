"""Pipeline schedules as per-device operation orders (the input of :mod:`solvers.pipeline.sim`).

An operation is ``(kind, micro-batch, chunk)`` with kind ``F`` (forward), ``B`` (backward, or
its input-gradient part for ZB-H1) or ``W`` (the weight-gradient part, ZB-H1 only). Virtual
stage ``q = c * p + s`` is chunk ``c`` of device ``s``.

* ``gpipe`` -- Huang et al. 2019, "GPipe": all ``m`` forwards, then all ``m`` backwards.
* ``1f1b`` -- PipeDream-Flush (Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel
  DNN Training", and Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
  on GPU Clusters Using Megatron-LM" §2.2.1): device ``s`` runs ``w = min(p - s - 1, m)``
  warm-up forwards, then alternates one forward and one backward, then drains the ``w``
  remaining backwards.
* ``interleaved-1f1b`` -- Narayanan et al. 2021 (Megatron-LM) §2.2.2, with Megatron-LM's
  ordering (``forward_backward_pipelining_with_interleaving``): the ``k``-th forward of a
  device runs chunk ``(k mod p*v) // p`` on micro-batch ``(k // (p*v)) * p + k mod p``; the
  ``k``-th backward runs chunk ``v - 1 - (k mod p*v) // p`` on the same micro-batch
  formula. Warm-up: ``w = min(v*m, 2*(p - s - 1) + (v - 1)*p)`` forwards, then alternate
  F/B, then drain. ``m`` must be a multiple of ``p`` (``PipelineProblem`` raises ValueError
  otherwise). Megatron special-cases ``m == p`` as "all warm-up" (``w = v*m``); we keep the
  general formula, which gives the same step time in the uniform case (checked in the tests)
  with less memory.
* ``zb-h1`` -- Qi et al. 2023, "Zero Bubble Pipeline Parallelism" (ICLR 2024), handcrafted
  schedule ZB-H1 (Fig. 3, Table 2): the
  1F1B order with each backward split into ``B`` (input gradient, critical path, duration
  ``(1 - weight_grad_fraction) * backward``) and ``W`` (weight gradient, duration
  ``weight_grad_fraction * backward``). Device ``s`` postpones its ``W`` passes so that up
  to ``s`` of them are pending (``W`` of micro-batch ``i`` runs right after ``B`` of
  micro-batch ``i + s``; the last ``s`` run after the last ``B``). This keeps the number of
  micro-batches whose ``B`` is outstanding equal to 1F1B's ``min(p - s, m)`` (the paper's
  "same peak memory as 1F1B": device ``s`` additionally holds ``s`` W-only activations,
  ``M_W < M_B``, Qi et al. Table 2) and fills the 1F1B cool-down bubble with ``W`` passes.
"""
from __future__ import annotations

__all__ = ["SCHEDULES", "KINDS", "Op", "gpipe_order", "one_f_one_b_order", "interleaved_warmup",
           "interleaved_op", "interleaved_order", "zb_h1_order"]

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1")
KINDS = ("F", "B", "W")

Op = tuple[str, int, int]  # (kind, micro-batch, chunk)


def gpipe_order(num_stages: int, num_microbatches: int, stage: int) -> tuple[Op, ...]:
    m = num_microbatches
    return tuple(("F", i, 0) for i in range(m)) + tuple(("B", i, 0) for i in range(m))


def one_f_one_b_order(num_stages: int, num_microbatches: int, stage: int) -> tuple[Op, ...]:
    p, m, s = num_stages, num_microbatches, stage
    warmup = min(p - s - 1, m)
    ops: list[Op] = [("F", i, 0) for i in range(warmup)]
    for i in range(m - warmup):
        ops += [("F", warmup + i, 0), ("B", i, 0)]
    ops += [("B", i, 0) for i in range(m - warmup, m)]
    return tuple(ops)


def interleaved_warmup(num_stages: int, num_microbatches: int, num_chunks: int,
                       stage: int) -> int:
    """Megatron-LM's warm-up forward count of the interleaved schedule (general formula)."""
    p, m, v, s = num_stages, num_microbatches, num_chunks, stage
    return min(v * m, 2 * (p - s - 1) + (v - 1) * p)


def interleaved_op(num_stages: int, num_chunks: int, k: int, forward: bool) -> tuple[int, int]:
    """(micro-batch, chunk) of a device's ``k``-th forward or backward (Megatron's order)."""
    p, v = num_stages, num_chunks
    group, in_group = divmod(k, p * v)
    chunk = in_group // p
    if not forward:
        chunk = v - 1 - chunk
    return group * p + in_group % p, chunk


def interleaved_order(num_stages: int, num_microbatches: int, num_chunks: int,
                      stage: int) -> tuple[Op, ...]:
    p, m, v = num_stages, num_microbatches, num_chunks
    total = v * m
    warmup = interleaved_warmup(p, m, v, stage)

    def fwd(k: int) -> Op:
        return ("F",) + interleaved_op(p, v, k, True)

    def bwd(k: int) -> Op:
        return ("B",) + interleaved_op(p, v, k, False)

    ops: list[Op] = [fwd(k) for k in range(warmup)]
    for k in range(total - warmup):
        ops += [fwd(warmup + k), bwd(k)]
    ops += [bwd(k) for k in range(total - warmup, total)]
    return tuple(ops)


def zb_h1_order(num_stages: int, num_microbatches: int, stage: int) -> tuple[Op, ...]:
    """1F1B with ``W`` of micro-batch ``i`` placed right after ``B`` of ``i + stage``."""
    ops: list[Op] = []
    for op in one_f_one_b_order(num_stages, num_microbatches, stage):
        ops.append(op)
        kind, mb, _ = op
        if kind == "B" and mb - stage >= 0:
            ops.append(("W", mb - stage, 0))
    done = max(0, num_microbatches - stage)
    ops += [("W", i, 0) for i in range(done, num_microbatches)]
    return tuple(ops)
