"""The cost model's prediction of an AFD reference decode job run, from its run record and a
``planner calibrate`` document alone.

``planner check-run`` wires it: this module predicts (it may call the cost models and the
solvers), :mod:`planner.run.afd_check_run` compares the plain numbers of an
:class:`AfdRunPrediction` with what the record measured (that module imports no cost model).

The prediction is of the job *as implemented* (``planner.run.afd_job``: fp32 torch in eager
mode, one decode token per sequence, gloo ``isend`` / ``irecv``), on the machine the
calibration measured, with the job's recorded ``shape`` (layers, hidden size, heads, experts,
top-k, shared experts, batch per attention rank, context, micro-batches, attention and FFN
ranks). It uses only what ``planner calibrate`` measures: the GEMM efficiency curve
(``peak_flops``, ``gemm_efficiency``, ``gemm_half_dim``), attention efficiency, memory
bandwidth (``memory_bw_bytes_per_s`` at ``hbm_efficiency``), the per-kernel overhead
(``kernel_overhead_s``, or ``eager_call_s`` where calibrate measured it: a no-grad call on
tiny tensors, without the autograd recording the training layers' fit includes), the
point-to-point alpha-beta of this machine's link (``send_recv``:
the fitted link latency and bandwidth times their ``send_recv`` factors) and the machine's
cores (calibrate runs one process of ``threads`` threads per core: ``world_size * threads``).
Nothing is fitted to the job's own timings.

Per MoE layer (a *round*) and micro-batch, the four stages of ``cost_models.serving.afd``:

1. **attention** (an attention rank's CPU): every torch call the job makes for this
   micro-batch between taking the previous round's results and posting this round's
   dispatch: the previous MoE layer's result assembly and residual, the attention of each
   layer over the KV cache, dense layers, the router, the shared experts, and building and
   posting the messages. Each call pays ``call_s`` (the eager dispatch; counted
   from the job's code, constants below), each ``isend`` / ``irecv`` among them ``post_s``
   (``Profile.p2p_post_s``, what calibrate measured posting one), each GEMM its FLOPs at
   the calibrated efficiency curve (``cost_models.compute.gemm_time_s``, memory roofline
   included), the decode attention the larger of its FLOPs at ``attention_efficiency`` and
   its KV bytes at the bandwidth, every element-wise kernel its bytes at the bandwidth;
2. **dispatch**: to each FFN rank of the unit, the tokens with at least one chosen expert
   there (``hidden + 2 top_k`` fp32 values each). Under gloo one message carries them behind
   a header row holding their count, into a receive the FFN rank posted before it arrives
   (``planner.run.afd_job.link``): one message at ``send_recv``'s alpha-beta. Under NCCL,
   and in records from before (the record's ``implementation.token_receives``), the count
   (one int64) goes first and the FFN rank posts the tokens' receive only once it has
   arrived: two messages paid one after the other;
3. **experts** (an FFN rank's CPU): receiving every attention rank's counts and tokens,
   unpacking, each (top-k column, held expert) pair of the routed tokens through its expert,
   and posting the results back (calls, GEMMs, as above); the busiest FFN rank;
4. **combine**: the results (``hidden`` fp32 values per token) back, one message.

Expected counts with routing uniform over the experts (the job's seeded router is not
replayed): a token reaches FFN rank ``f`` holding ``E_f`` of ``E`` experts unless all its
``k`` distinct choices miss it, probability ``C(E - E_f, k) / C(E, k)``; a top-k column holds
``E_f (1 - (1 - 1/E)^T)`` distinct experts of ``f`` among ``T`` tokens (the expected distinct
values of ``T`` uniform draws, as ``cost_models.serving.afd.experts_side_s`` counts touched
experts).

The step: the rounds (MoE layers) through :func:`solvers.serving.pingpong.rounds_s`'s event
recursion, then the layers after the last MoE layer and the head (an attention-only round),
then what the attention rank runs once per step (the logits' concatenation, argmax, copy).
When the job's processes outnumber the calibrated machine's cores, the same recursion runs
with the compute stages sharing the cores (:func:`solvers.serving.shared_cores.shared_rounds`,
processor sharing; it equals ``rounds_s`` when the cores suffice): that is what an
oversubscribed CPU does to the job, not a correction fitted to it.

Two measurements of calibrate's ping-pong benchmark (``resume_cases``) price what waiting
does, where the calibration has them: a message whose receiver already waits costs
``Profile.p2p_latency_s`` one way (in place of ``send_recv``'s latency, which calibrate times
after a barrier and a compute burst on both ranks), and a rank that stood idle until its
micro-batch arrived adds ``Profile.resume_s`` to that stage (it resumes on cold caches; on
this 2-vCPU VM a forward after a blocking receive took 1.5-2.8x its back-to-back time). A
third, from the same pairs, prices the opposite case: a rank whose micro-batch arrived while
it was still computing the one before adds ``Profile.late_read_s`` (the job's gloo transport
threads run only on idle cores, ``planner.run.transport_threads``, so the message is read
once the rank blocks for it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from cost_models.communication import send_recv_s
from cost_models.compute import Gemm, GpuRates, gemm_time_s
from cost_models.fitting import one_tier_view
from cost_models.profile import Profile
from solvers.serving.pinned_cores import PinnedRank, pinned_rounds
from solvers.serving.shared_cores import shared_rounds

__all__ = ["AfdRunPrediction", "CalibratedMachine", "JobCosts", "OPS", "job_costs",
           "machine_of", "predict_afd_run", "tokens_to_rank"]

ELEM = 4  # fp32 activations, weights and wire
INDEX = 8  # int64 counts

# Torch calls the job makes (``planner.run.afd_job``), counted from its code: every call into
# torch from Python (functions, tensor methods, indexing, nn.Module forwards' functional
# calls, ``torch.distributed.isend`` / ``irecv``), not attribute reads (``.shape``,
# ``.device``) nor ``numel()``. tests/test_afd_check_run.py counts them again with a
# TorchFunctionMode over the job's own functions.
OPS: Mapping[str, int] = {
    # job.attention_step: ``side.embed(tokens[start:stop])``: the slice, the embedding
    "embed": 2,
    # KVCache.rows (2 slices) + Layer.attend: ln1, qkv linear, split, 3 views, 3 transposes,
    # 2 cache writes, 2 cache slices, sdpa, transpose, reshape, proj linear, residual add
    "attend": 20,
    # Layer.dense: ln2, fc1, gelu, fc2 (Expert), residual add
    "dense": 5,
    # Layer.route without shared experts: ln2, reshape, router linear, topk, softmax
    "route": 5,
    # each shared expert: fc1, gelu, fc2 (+ one add per shared expert beyond the first)
    "shared_expert": 3,
    # AttentionLink.dispatch: ``homes[idx]`` once, then per FFN rank: ``where == i``,
    # pack_tokens (any, nonzero, where, full_like, [rows], cat, flat[rows], to, mul, [rows]),
    # and the message: pre-posted (gloo) with_header (new_full, cat) and isend, else
    # torch.tensor(count) and isend(count), then isend(tokens) where it has tokens
    "dispatch_once": 1,
    "dispatch_per_rank": 11,
    "dispatch_message_preposted": 3,
    "dispatch_message": 2,
    "dispatch_message_tokens": 1,
    # ... and where it has tokens: new_empty(result buffer), irecv(result)
    "dispatch_per_rank_tokens": 2,
    # AttentionLink.combine: torch.zeros, then one index_add_ per FFN rank's part
    "combine_once": 1,
    "combine_per_part": 1,
    # Layer.combine: view_as, residual add (+ shared + routed with shared experts)
    "layer_combine": 2,
    # AttentionSide.logits: x[:, -1], LayerNorm, head linear
    "logits": 3,
    # once per step: torch.cat(logits), argmax, tokens[:, 0], .cpu()
    "step_once": 4,
    # FfnLink.post_next, per attention rank: torch.empty (the message, pre-posted) or
    # torch.zeros (the count), irecv
    "post_per_rank": 2,
    # FfnLink.receive, per attention rank: pre-posted: buf[0, 0], item(), buf[1:n + 1]; else
    # item(), torch.empty and, where non-empty, irecv(tokens)
    "receive_per_rank_preposted": 3,
    "receive_per_rank": 2,
    "receive_per_rank_tokens": 1,
    # ffn_step: torch.cat(bufs) + unpack_tokens (3 slices, round, long); out.split
    "unpack": 6,
    "split": 1,
    # run_experts: zeros_like; per top-k column: ids[:, k], unique, tolist; per held expert
    # of that column: ids[:, k], ==, nonzero, gates[rows, k:k+1], x[rows], fc1, gelu, fc2,
    # mul, index_add_
    "experts_once": 1,
    "experts_per_column": 3,
    "experts_per_pair": 10,
    # FfnLink.reply, per attention rank with tokens: contiguous, isend(results)
    "reply_per_rank": 2,
}
# Of those calls, the non-blocking point-to-point ones (``isend`` / ``irecv``): each costs
# ``CalibratedMachine.post_s`` instead of a call (``Profile.p2p_post_s``: gloo takes the
# pair's lock and writes the notice or the payload to its socket)
POSTS: Mapping[str, int] = {
    "dispatch_message_preposted": 1, "dispatch_message": 1, "dispatch_message_tokens": 1,
    "dispatch_per_rank_tokens": 1, "post_per_rank": 1, "receive_per_rank_tokens": 1,
    "reply_per_rank": 1,
}


@dataclass(frozen=True)
class CalibratedMachine:
    """What ``planner calibrate`` measured (plain numbers): the profile, one device's peak
    FLOP/s and streaming bandwidth, the link's alpha-beta and the cores."""

    profile: Profile
    peak_flops: float
    memory_bw_bytes_per_s: float
    link_bw_bytes_per_s: float
    link_latency_s: float
    cores: float
    device: str = ""
    message_latency_s: float | None = None  # replaces send_recv's latency when given
    eager_call_s: float | None = None  # replaces kernel_overhead_s per torch call when given

    @property
    def call_s(self) -> float:
        """What one torch call of the job costs: the override, else ``kernel_overhead_s``
        (``machine_of`` passes the calibration's ``eager_call_s`` as the override)."""
        return self.profile.kernel_overhead_s if self.eager_call_s is None else self.eager_call_s

    @property
    def post_s(self) -> float:
        """What one ``isend`` / ``irecv`` call of the job costs: ``Profile.p2p_post_s`` where
        calibrate measured it, else a call's (:attr:`call_s`)."""
        return self.profile.p2p_post_s if self.profile.p2p_post_s > 0 else self.call_s

    @property
    def rates(self) -> GpuRates:
        return GpuRates(self.peak_flops, self.memory_bw_bytes_per_s, False, ELEM)

    def message_s(self, nbytes: float) -> float:
        """One point-to-point message: ``send_recv``'s alpha-beta of the link, or its measured
        table (``Profile.collective_tables``); with ``message_latency_s`` that latency plus the
        bytes at ``send_recv``'s bandwidth (the table, timed after a barrier and a compute
        burst, would put the sender's lateness back in)."""
        latency, prof = self.link_latency_s, self.profile
        if self.message_latency_s is not None:
            latency = self.message_latency_s / prof.op_factors("send_recv")[0]
            prof = replace(prof, collective_tables={})
        view = one_tier_view(2, "host", self.link_bw_bytes_per_s, latency)
        return send_recv_s(view, max(nbytes, 1.0), prof)


def machine_of(calibration: Mapping[str, Any], cores: float | None = None,
               message_latency_s: float | None = None,
               eager_call_s: float | None = None) -> CalibratedMachine:
    """The machine of a ``planner.calibration/v1`` document (``planner calibrate``'s JSON):
    cores default to its processes times their threads (one process per core).
    ``message_latency_s`` replaces the point-to-point latency and ``eager_call_s`` the cost
    of a torch call (experiments with measurements calibrate does not make; ``check-run``
    uses the calibration's)."""
    if calibration.get("schema") != "planner.calibration/v1":
        raise ValueError("expected a planner.calibration/v1 document (planner calibrate --out)")
    known = {f.name for f in fields(Profile)}
    prof = replace(Profile(), **{k: v for k, v in calibration["profile"].items() if k in known})
    fit, machine = calibration["fit"], calibration["machine"]
    link = fit["link"]
    if cores is None:
        cores = float(machine["world_size"]) * float(machine.get("threads", 1))
    if message_latency_s is None and prof.p2p_latency_s > 0:
        message_latency_s = prof.p2p_latency_s  # measured as the job meets it: receiver waits
    if eager_call_s is None and prof.eager_call_s > 0:
        eager_call_s = prof.eager_call_s  # the job decodes under no_grad, as calibrate timed it
    return CalibratedMachine(prof, float(fit["peak_flops"]), float(fit["memory_bw_bytes_per_s"]),
                             float(link["bw_bytes_per_s"]), float(link["latency_s"]),
                             float(cores), str(machine.get("device", "")), message_latency_s,
                             eager_call_s)


def tokens_to_rank(num_experts: int, top_k: int, held: int) -> float:
    """Probability a token's ``top_k`` distinct experts include one of ``held`` experts."""
    return 1.0 - math.comb(num_experts - held, top_k) / math.comb(num_experts, top_k)


def _held(num_experts: int, ffn_ranks: int) -> int:
    """Experts of the busiest FFN rank: contiguous blocks, expert ``e`` on ``e * F // E``
    (``planner.run.runtime.afd_expert_homes``)."""
    homes = [e * ffn_ranks // num_experts for e in range(num_experts)]
    return max(homes.count(f) for f in range(ffn_ranks))


@dataclass(frozen=True)
class JobCosts:
    """Work of one micro-batch (seconds at full speed on one core) and the transfers."""

    first_s: float  # embedding and the layers up to the first MoE layer's dispatch
    between_s: tuple[float, ...]  # per later MoE layer: results, residual, layers, dispatch
    tail_s: float  # the last MoE layer's results, the layers after it, the head
    step_once_s: float  # once per step on an attention rank
    dispatch_s: float
    experts_s: float  # the busiest FFN rank, one micro-batch of every attention rank
    combine_s: float
    ops_attention: float  # torch calls per step on an attention rank
    ops_ffn: float  # ... on the busiest FFN rank
    tokens_to_rank: float  # tokens of one attention rank's micro-batch sent to one FFN rank
    pairs: float  # (top-k column, held expert) pairs the busiest FFN rank runs per micro-batch
    attention_pack_s: float  # of ``first_s`` and each ``between_s``: building, posting dispatch
    ffn_pack_s: float  # of ``experts_s``: posting receives, taking counts, posting results


def _shape_get(shape: Mapping[str, Any], key: str, default: Any) -> Any:
    v = shape.get(key)
    return default if v is None else v


@dataclass(frozen=True)
class _MicroBatch:
    """One micro-batch of a job ``shape`` on ``mc`` (the mean ``batch / micro_batches``
    sequences of an attention rank), in a unit of ``A_u`` attention and ``F_u`` FFN ranks:
    the shape's numbers and what the machine charges for a GEMM, a streaming pass and a call."""

    mc: CalibratedMachine
    h: int
    heads: int
    vocab: int
    E: int  # experts
    k: int  # top-k
    S: int  # shared experts
    m: int  # micro-batches
    A_u: int
    F_u: int
    b: float  # sequences of the micro-batch (one token each)
    keys: float  # the decode steps' mean keys: step s (1..steps) attends over context + s
    moe: tuple[bool, ...]
    preposted: bool  # one dispatch message with a header row into a pre-posted receive

    @classmethod
    def of(cls, shape: Mapping[str, Any], units: int, mc: CalibratedMachine,
           preposted: bool) -> _MicroBatch:
        m = int(shape["micro_batches"])
        return cls(mc, int(shape["hidden"]), int(shape["heads"]), int(shape["vocab"]),
                   int(shape["num_experts"]), int(shape["top_k"]),
                   int(_shape_get(shape, "shared_experts", 0)), m,
                   int(shape["attention_ranks"]) // units, int(shape["ffn_ranks"]) // units,
                   float(shape["batch"]) / m,
                   float(shape["context"]) + (int(shape["steps"]) + 1) / 2.0,
                   tuple(bool(x) for x in shape["moe_layers"]), preposted)

    @property
    def op(self) -> float:
        return self.mc.call_s

    @property
    def post_extra(self) -> float:
        """What a post costs beyond a call."""
        return self.mc.post_s - self.mc.call_s

    @property
    def n_f(self) -> float:
        """Tokens of one attention rank's micro-batch bound for one FFN rank."""
        return self.b * tokens_to_rank(self.E, self.k, _held(self.E, self.F_u))

    def gemm(self, rows: float, n: float, kk: float, count: float = 1.0) -> float:
        return (gemm_time_s(Gemm(rows, n, kk, count), self.mc.rates, self.mc.profile)
                if rows > 0 else 0.0)

    def stream(self, nbytes: float) -> float:
        return nbytes / (self.mc.rates.hbm_bytes_per_s * self.mc.profile.hbm_efficiency)


def _attend_s(x: _MicroBatch) -> float:
    """A layer's attention on the attention rank: ln1, QKV, the core over the cached keys
    (compute or KV streaming, whichever is longer), the output projection, cache writes."""
    d = x.h // x.heads
    core = max(4.0 * x.b * x.heads * x.keys * d
               / (x.mc.rates.peak_flops * x.mc.profile.attention_efficiency),
               x.stream(2.0 * x.b * x.heads * x.keys * d * ELEM))
    elementwise = x.stream(ELEM * x.b * x.h * (2 + 2 * 2 + 3))  # ln1, cache writes, residual
    return (OPS["attend"] * x.op + x.gemm(x.b, 3 * x.h, x.h) + x.gemm(x.b, x.h, x.h) + core
            + elementwise)


def _dense_s(x: _MicroBatch) -> float:
    """A dense layer's MLP on the attention rank."""
    h = x.h
    return (OPS["dense"] * x.op + x.gemm(x.b, 4 * h, h) + x.gemm(x.b, h, 4 * h)
            + x.stream(ELEM * x.b * (2 * h + 2 * 4 * h + 3 * h)))


def _route_s(x: _MicroBatch) -> float:
    """A MoE layer's router and shared experts on the attention rank."""
    h = x.h
    shared = x.S * (OPS["shared_expert"] * x.op + x.gemm(x.b, 2 * h, h) + x.gemm(x.b, h, 2 * h))
    return ((OPS["route"] + max(0, x.S - 1)) * x.op + x.gemm(x.b, x.E, h) + shared
            + x.stream(ELEM * x.b * (2 * h + 2 * x.E)))


def _dispatch_ops_posts(x: _MicroBatch) -> tuple[float, float]:
    """(torch calls, posts) of one MoE layer's dispatch on an attention rank."""
    message = (("dispatch_message_preposted",) if x.preposted
               else ("dispatch_message", "dispatch_message_tokens"))
    message_ops = sum(OPS[name] for name in message)
    ops = OPS["dispatch_once"] + x.F_u * (OPS["dispatch_per_rank"] + message_ops
                                          + OPS["dispatch_per_rank_tokens"])
    posts = x.F_u * (sum(POSTS[name] for name in message) + POSTS["dispatch_per_rank_tokens"])
    return ops, posts


def _results_s(x: _MicroBatch) -> float:
    """A MoE layer's results assembled on the attention rank (one part per FFN rank)."""
    parts = x.F_u
    return ((OPS["combine_once"] + parts * OPS["combine_per_part"] + OPS["layer_combine"]
             + (1 if x.S else 0)) * x.op
            + x.stream(ELEM * x.b * x.h * (1 + 2 * parts + 3 + (3 if x.S else 0))))


def _attention_segments(x: _MicroBatch, pack: float) -> tuple[list[float], float]:
    """An attention rank's work cut at each MoE layer's dispatch: (one segment per MoE layer,
    from the previous layer's results to its dispatch posted; the tail after the last)."""
    results = _results_s(x)
    segments: list[float] = []
    cur = OPS["embed"] * x.op + x.stream(ELEM * x.b * x.h)
    for is_moe in x.moe:
        cur += _attend_s(x)
        if is_moe:
            segments.append(cur + _route_s(x) + pack)
            cur = results
        else:
            cur += _dense_s(x)
    logits = OPS["logits"] * x.op + x.gemm(x.b, x.vocab, x.h) + x.stream(ELEM * x.b * 2 * x.h)
    return segments, cur + logits


@dataclass(frozen=True)
class _FfnRound:
    """The busiest FFN rank's work on micro-batch j of every attention rank of the unit."""

    pairs: float  # (top-k column, held expert) pairs it runs
    receive: float  # torch calls taking the dispatches
    post: float  # ... posting the next micro-batch's receives
    reply: float  # ... posting the results
    ops: float  # calls beyond ``post``
    posts: float  # isend / irecv among them
    experts_s: float


def _ffn_round(x: _MicroBatch) -> _FfnRound:
    h, k = x.h, x.k
    T = x.A_u * x.b  # tokens of micro-batch j over the unit's attention ranks
    held = _held(x.E, x.F_u)
    pairs = k * held * (1.0 - (1.0 - 1.0 / x.E) ** T)
    pair_rows = T * k * held / x.E  # (token, chosen expert) rows held here
    per_pair = pair_rows / pairs if pairs > 0 else 0.0
    arrived = x.A_u * x.n_f  # tokens received
    receive = x.A_u * (OPS["receive_per_rank_preposted"] if x.preposted
                       else OPS["receive_per_rank"] + OPS["receive_per_rank_tokens"])
    post = x.A_u * OPS["post_per_rank"]
    run = (OPS["experts_once"] + k * OPS["experts_per_column"] + pairs * OPS["experts_per_pair"])
    reply = x.A_u * OPS["reply_per_rank"]
    ops = receive + OPS["unpack"] + run + OPS["split"] + reply
    posts = x.A_u * ((0 if x.preposted else POSTS["receive_per_rank_tokens"])
                     + POSTS["post_per_rank"] + POSTS["reply_per_rank"])
    expert_math = (x.gemm(per_pair, 2 * h, h, pairs) + x.gemm(per_pair, h, 2 * h, pairs)
                   + x.stream(ELEM * (arrived * (2 * (h + 2 * k) + h)
                                      + pair_rows * (2 * h + 2 * 2 * h + 3 * h))))
    # every round posts the next micro-batch's receives (the first ones are posted before
    # round 0, the last round's last micro-batch posts none: m R posts per step)
    experts = (ops + post) * x.op + posts * x.post_extra + expert_math
    return _FfnRound(pairs, receive, post, reply, ops, posts, experts)


def job_costs(shape: Mapping[str, Any], units: int, mc: CalibratedMachine,
              preposted: bool = True) -> JobCosts:
    """Per micro-batch work and transfers of the job ``shape`` (a recorded ``AfdShape``) on
    ``mc``; the micro-batch is the mean ``batch / micro_batches`` sequences. ``preposted``:
    one dispatch message with a header row into a pre-posted receive (module docstring,
    2.)."""
    x = _MicroBatch.of(shape, units, mc, preposted)
    op = x.op
    dispatch_ops, dispatch_posts = _dispatch_ops_posts(x)
    pack = (dispatch_ops * op + dispatch_posts * x.post_extra
            + x.stream(x.F_u * ELEM * x.n_f * (2 * x.h + 4 * x.k)))
    segments, tail = _attention_segments(x, pack)
    step_once = OPS["step_once"] * op + x.stream(ELEM * float(shape["batch"]) * x.vocab)
    ffn = _ffn_round(x)

    row_bytes = ELEM * (x.h + 2 * x.k)
    dispatch = (mc.message_s(row_bytes * (x.n_f + 1)) if preposted  # + the header row
                else mc.message_s(INDEX) + mc.message_s(row_bytes * x.n_f))
    combine = mc.message_s(ELEM * x.n_f * x.h)
    rounds = len(segments)
    ops_att = x.m * (OPS["embed"] + len(x.moe) * OPS["attend"]
                     + x.moe.count(False) * OPS["dense"]
                     + rounds * ((OPS["route"] + max(0, x.S - 1) + x.S * OPS["shared_expert"])
                                 + dispatch_ops + OPS["combine_once"] + x.F_u
                                 + OPS["layer_combine"] + (1 if x.S else 0))
                     + OPS["logits"]) + OPS["step_once"]
    ops_ffn = x.m * rounds * (ffn.ops + ffn.post)
    return JobCosts(first_s=segments[0] if segments else tail, between_s=tuple(segments[1:]),
                    tail_s=tail, step_once_s=step_once, dispatch_s=dispatch,
                    experts_s=ffn.experts_s, combine_s=combine, ops_attention=ops_att,
                    ops_ffn=ops_ffn, tokens_to_rank=x.n_f, pairs=ffn.pairs,
                    attention_pack_s=pack,
                    ffn_pack_s=((ffn.receive + ffn.post + ffn.reply) * op
                                + ffn.posts * x.post_extra))


@dataclass(frozen=True)
class AfdRunPrediction:
    """The predicted figures ``check-run`` compares (seconds), plain numbers only."""

    step_s: float  # one decode step
    attention_busy_s: float  # per step, an attention rank's wall time in its own work
    ffn_busy_s: float  # per step, the busiest FFN rank's wall time in its own work
    attention_pack_s: float  # of attention_busy_s: building and posting the dispatches
    ffn_pack_s: float  # of ffn_busy_s: posting receives and results
    attention_wait_s: float  # per step, an attention rank blocked (combine and send waits)
    ffn_wait_s: float  # per step, an FFN rank blocked (dispatch and send waits)
    stages: tuple[float, float, float, float]  # a middle MoE round's stages, per micro-batch
    bound: str  # "ring" (too few micro-batches) or the slowest stage
    micro_batches: int
    moe_layers: int
    processes: int
    cores: float
    shared_cores: bool  # processes outnumber the cores: the stages time-share them
    # how: "pinned" (each rank on one core, solvers.serving.pinned_cores), "processor
    # sharing" (unpinned, solvers.serving.shared_cores) or "none"
    sharing: str
    ops_attention: float  # torch calls per step on an attention rank
    ops_ffn: float
    kernel_overhead_s: float
    post_s: float  # one isend / irecv call (Profile.p2p_post_s, else a call's cost)
    message_latency_s: float  # one point-to-point message's latency (alpha)
    resume_s: float  # what a rank's compute adds after it waited (Profile.resume_s)
    late_read_s: float  # ... to a micro-batch that came while it computed (late_read_s)
    tokens_to_rank: float
    unpipelined_step_s: float  # no overlap at all: every stage of every micro-batch in turn

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _pinned_ranks(record: Mapping[str, Any]) -> tuple[PinnedRank, ...] | None:
    """Each rank's role, unit and core where the run pinned every rank to one core
    (``planner.run.affinity.shared_cores``); None otherwise (an older record, or ranks left
    to the scheduler)."""
    ranks = sorted(record.get("rank_timings", []), key=lambda r: r.get("rank", 0))
    if not ranks or any(len(r.get("pinned_cores") or ()) != 1 for r in ranks):
        return None
    return tuple(PinnedRank(r["role"], int(r.get("unit", 0)), int(r["pinned_cores"][0]))
                 for r in ranks)


def predict_afd_run(record: Mapping[str, Any], calibration: Mapping[str, Any],
                    cores: float | None = None, message_latency_s: float | None = None,
                    eager_call_s: float | None = None,
                    idle_links: bool = False) -> AfdRunPrediction:
    """The prediction of the AFD job run ``record`` (``planner.afd-run-record/v1``) describes,
    on the machine of ``calibration`` (``planner.calibration/v1``; see module docstring).
    ``cores``, ``message_latency_s`` and ``eager_call_s`` override the calibration's (see
    :func:`machine_of`). ``idle_links``: the messages advance only while one of the
    machine's cores is idle (:func:`solvers.serving.shared_cores.shared_rounds`; a model
    under evaluation, off by default)."""
    mc = machine_of(calibration, cores, message_latency_s, eager_call_s)
    shape = record["shape"]
    units = int(record.get("config", {}).get("units", 1) or 1)
    threads = max((int(r.get("threads", 1)) for r in record.get("rank_timings", [])), default=1)
    preposted = (record.get("implementation", {}).get("token_receives")
                 == "pre-posted, header row")
    c = job_costs(shape, units, mc, preposted)
    m = int(shape["micro_batches"])
    A, F = int(shape["attention_ranks"]), int(shape["ffn_ranks"])
    att_rounds = [c.first_s, *c.between_s]
    R = len(att_rounds)
    rounds = [[att, c.dispatch_s, c.experts_s, c.combine_s] for att in att_rounds]
    rounds.append([c.tail_s, 0.0, 0.0, 0.0])  # the layers after the last MoE layer, the head
    procs = [A * threads, 0, F * threads, 0]
    shared = (A + F) * threads > mc.cores
    # a rank that waited for its micro-batch resumes on cold caches (Profile.resume_s); one
    # whose micro-batch came while it computed reads it once it blocks (late_read_s)
    resume = (mc.profile.resume_s, 0.0, mc.profile.resume_s, 0.0)
    late = (mc.profile.late_read_s, 0.0, mc.profile.late_read_s, 0.0)
    pinned = _pinned_ranks(record) if shared else None
    if pinned is not None:
        # each rank pinned to one core, some sharing one: a core runs its ranks one after
        # another, messages read once it is free (solvers.serving.pinned_cores)
        prun = pinned_rounds(rounds, m, pinned, (resume[0], resume[2]), (late[0], late[2]))
        pipeline = prun.finish_s
        att_i = [i for i, k in enumerate(pinned) if k.role == "attention"]
        ffn_i = [i for i, k in enumerate(pinned) if k.role == "ffn"]
        busy = (max(prun.busy_s[i] for i in att_i), 0.0,
                max(prun.busy_s[i] for i in ffn_i), 0.0)
        work = (max(prun.work_s[i] for i in att_i), max(prun.work_s[i] for i in ffn_i))
        stretch = (busy[0] / work[0] if work[0] > 0 else 1.0,
                   busy[2] / work[1] if work[1] > 0 else 1.0)
    else:
        # enough cores: the recursion of rounds_s (equal when the cores suffice, a test
        # checks); idle links need the machine's real cores to know when one is idle
        cores = mc.cores if shared or idle_links else float(sum(procs))
        run = shared_rounds(rounds, m, procs, cores, resume, late, idle_links)
        pipeline, busy = run.finish_s, run.busy_s
        # the timers' "pack" share of each side's busy time: slowed down alike when the
        # cores are shared (the same run without resumes, which are no packing)
        slowed = shared_rounds(rounds, m, procs, cores).busy_s if shared else None
        att_work = m * sum(r[0] for r in rounds)
        ffn_work = m * R * c.experts_s
        stretch = (slowed[0] / att_work if slowed and att_work > 0 else 1.0,
                   slowed[2] / ffn_work if slowed and ffn_work > 0 else 1.0)
    step = pipeline + c.step_once_s
    att_busy = busy[0] + c.step_once_s
    ffn_busy = busy[2]
    att_pack = m * R * c.attention_pack_s * stretch[0]
    ffn_pack = m * R * c.ffn_pack_s * stretch[1]
    middle = rounds[1] if R > 1 else rounds[0]
    top = max(range(4), key=lambda i: middle[i])
    names = ("attention", "dispatch", "experts", "combine")
    bound = "ring" if sum(middle) >= m * middle[top] else names[top]
    unpipelined = m * sum(sum(r) for r in rounds) + c.step_once_s
    return AfdRunPrediction(
        step_s=step, attention_busy_s=att_busy, ffn_busy_s=ffn_busy,
        attention_pack_s=att_pack, ffn_pack_s=ffn_pack,
        attention_wait_s=max(0.0, step - att_busy), ffn_wait_s=max(0.0, step - ffn_busy),
        stages=tuple(middle), bound=bound, micro_batches=m, moe_layers=R,
        processes=(A + F), cores=mc.cores, shared_cores=shared,
        sharing=("pinned" if pinned is not None else "processor sharing") if shared else "none",
        ops_attention=c.ops_attention,
        ops_ffn=c.ops_ffn, kernel_overhead_s=mc.call_s, post_s=mc.post_s,
        message_latency_s=mc.message_s(1.0), resume_s=mc.profile.resume_s,
        late_read_s=mc.profile.late_read_s,
        tokens_to_rank=c.tokens_to_rank,
        unpipelined_step_s=unpipelined)
