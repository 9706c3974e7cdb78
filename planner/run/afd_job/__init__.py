"""AFD decode reference job: attention ranks and FFN ranks as an attention/FFN disaggregated
serving plan says, a tiny MoE decoder with a KV cache, micro-batches ping-ponging between
them (plain torch; gloo on CPU, NCCL on GPU).

Run under torchrun (``python -m torch.distributed.run --standalone --nproc-per-node A+F -m
planner.run.afd_job PLAN --out RUN.json``, or ``planner launch PLAN``). The world is the plan's
attention GPUs then its FFN GPUs (:func:`planner.run.runtime.afd_role`: ranks ``0 .. A-1``
attention, ``A .. A+F-1`` FFN); the prefill pool is not run. The modules:

* :mod:`.shape`: the model and work (:class:`AfdShape`): the plan's dense/MoE layer pattern on
  at most 4 layers, its expert count and top-k capped (8, 2), one shared expert if it has any,
  hidden 64; ``batch`` sequences per attention rank, ``context``-token prompts, ``steps``
  decode steps, the plan's micro-batch count ``m``;
* :mod:`.model`: the seeded decoder cut where AFD cuts it (attention side: embedding,
  attention over the KV cache, dense layers, router, shared experts, head; FFN side: the
  routed experts) and :func:`reference_decode` (one process, every sequence: the ids and
  logits a distributed run must reproduce);
* :mod:`.link`: the messages (counts, then tokens once per destination FFN rank with their
  expert ids and gates; results back), non-blocking ``isend`` / ``irecv``;
* :mod:`.job`: one rank's job: attention ranks run each micro-batch up to its next MoE
  layer's router, post its dispatch and go on with the next micro-batch (MegaScale-Infer's
  ping-pong, Zhu et al. 2025, sec. 4); FFN ranks take micro-batch ``j`` of every attention
  rank of their unit together, run their experts and send the results back; greedy decode;
  rank 0's run record (``planner.afd-run-record/v1``);
* :mod:`.timers`: per-rank busy time (attention, experts, message building) and waiting time
  (dispatch, combine, send waits) per decode step;
* :mod:`.cli`: the command line.

Experts sit in contiguous blocks over a unit's FFN ranks (:func:`planner.run.runtime.afd_expert_homes`,
the plan's placement when the job keeps the plan's expert count). Not implemented: attention
TP > 1 (refused with a clear message), redundant expert replicas, fp8/bf16 wire formats.
"""
from planner.run.afd_job.cli import main
from planner.run.afd_job.job import RECORD_SCHEMA, attention_step, ffn_step, job_experts, run
from planner.run.afd_job.model import (AttentionSide, ExpertBank, KVCache, Layer, prompts,
                                       reference_decode, run_experts)
from planner.run.afd_job.shape import AfdShape, afd_shape, sample_layers
from planner.run.afd_job.timers import AFD_KINDS, AFD_STEP_KINDS, AfdTimers, busy_idle

__all__ = ["AFD_KINDS", "AFD_STEP_KINDS", "AfdShape", "AfdTimers", "AttentionSide", "ExpertBank",
           "KVCache", "Layer", "RECORD_SCHEMA", "afd_shape", "attention_step", "busy_idle",
           "ffn_step", "job_experts", "main", "prompts", "reference_decode", "run", "run_experts",
           "sample_layers"]
