"""The AFD job's messages between attention and FFN ranks: non-blocking point-to-point
(``torch.distributed.isend`` / ``irecv``, https://pytorch.org/docs/stable/distributed.html
"Point-to-point communication": each returns a work whose ``wait()`` blocks until the
transfer is done; the tensor must stay alive until then).

Per MoE layer round ``r`` and micro-batch ``j``, between attention rank ``a`` and FFN rank
``f`` of one unit:

1. **dispatch** (``a -> f``): the ``n`` tokens of ``a`` with at least one chosen expert on
   ``f`` as rows ``[n, hidden + 2k]``: the MoE input, the k expert ids (``-1`` where that
   choice lives on another FFN rank) and the k gates (0 there). Each token goes once per
   destination GPU, as the cost model prices it (``cost_models/serving/afd.py``) and as
   DeepEP's dispatch does. The receiver must learn ``n``: under gloo one message carries a
   header row (``n`` in its first value) before the rows, into a receive the FFN rank
   posted ahead (below); under NCCL, whose receives must match the message's size, the
   count goes first (one int64) and the rows follow only if ``n > 0``, as DeepEP's normal
   kernels exchange per-rank counts first ("notify dispatch") so the receiver sizes its
   buffers. Nothing is padded.
2. **combine** (``f -> a``): the gated sum of ``f``'s experts for those ``n`` tokens,
   ``[n, hidden]``; ``a`` adds the parts of every FFN rank.

**Pre-posted receives (gloo).** Under gloo an FFN rank posts the receive of an attention
rank's next micro-batch before it arrives, into a buffer of the micro-batch's capacity
(every token of it, plus the header row; gloo fills the front of a longer receive). gloo
sends a message at once only if its receive is already posted; otherwise the sender
announces it and the data leaves only when the receiver's post has reached the sender's
transport thread (``gloo/transport/tcp/pair.cc``: ``Pair::send``, ``Pair::recv``,
``handleRemotePendingRecv``), a round trip through both ranks' transport threads. Posted
after a count message, every tokens message took that round trip while both ranks
computed, and on a 2-core box each leg waited for a core; meanwhile a transport thread that
finds the pair's lock held by a post skips the event and polls again at once
(``Pair::handleEvents``' ``try_lock``; ``strace`` showed thousands of ``epoll_wait`` calls
a second): the step grew with the micro-batch count instead of overlapping. DeepEP's
kernels likewise receive into buffers sized for the most tokens a rank can send
(``num_max_dispatch_tokens_per_rank``, https://github.com/deepseek-ai/DeepEP). Every
attention rank sends every FFN rank of its unit one message per micro-batch, empty or not,
so receives and messages pair up one to one.

Tags (``TAG_*``) keep counts, tokens and results apart under gloo; between one pair every
kind is sent and received in the same order (rounds, then micro-batches), which is what
NCCL needs (it ignores tags). Dispatch and combine travel in two process groups of their
own, so on NCCL the two directions use separate communicators and streams and a posted
receive of results never holds back the next dispatch.

This is the message flow of MegaScale-Infer's ping-pong pipeline (Zhu et al. 2025, sec. 4):
an attention rank posts micro-batch ``j``'s dispatch and goes on with micro-batch ``j+1``'s
attention while ``j`` is with the experts; FFN ranks take micro-batch ``j`` of every
attention rank of their unit together. The wire format is fp32 here (the plan prices fp8
dispatch and bf16 combine).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from planner.run.afd_job.timers import AfdTimers

__all__ = ["TAG_COUNT", "TAG_RESULT", "TAG_TOKENS", "AttentionLink", "FfnLink", "Groups",
           "Inflight", "Posted", "pack_tokens", "unpack_tokens", "with_header"]

TAG_COUNT, TAG_TOKENS, TAG_RESULT = 1, 2, 3


@dataclass(frozen=True)
class Groups:
    """The two process groups of the world: dispatch (attention -> FFN) and combine (back)."""

    dispatch: object
    combine: object


def pack_tokens(flat: torch.Tensor, idx: torch.Tensor, gates: torch.Tensor,
                here: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of one destination: ``here`` ``[T, k]`` marks the choices it holds. Returns
    the token indices ``[n]`` and the payload ``[n, hidden + 2k]`` (module docstring)."""
    rows = here.any(dim=1).nonzero(as_tuple=True)[0]
    ids = torch.where(here, idx, torch.full_like(idx, -1))[rows]
    payload = torch.cat([flat[rows], ids.to(flat.dtype), (gates * here)[rows]], dim=1)
    return rows, payload


def with_header(payload: torch.Tensor) -> torch.Tensor:
    """The gloo dispatch message: a header row holding the row count (exact in fp32 up to
    2**24 rows), then ``payload``."""
    return torch.cat([payload.new_full((1, payload.shape[1]), payload.shape[0]), payload])


def unpack_tokens(payload: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pack_tokens`' payload: rows, expert ids (int64), gates."""
    h = payload.shape[1] - 2 * k
    return payload[:, :h], payload[:, h:h + k].round().long(), payload[:, h + k:]


@dataclass
class Inflight:
    """One micro-batch's dispatch in flight: per FFN rank with tokens, the token indices, the
    result buffer and its receive."""

    tokens: int
    device: torch.device
    parts: list[tuple[torch.Tensor, torch.Tensor, object]] = field(default_factory=list)


@dataclass(frozen=True)
class Posted:
    """An FFN rank's receive of one attention rank's next micro-batch: the count (NCCL) or
    the whole message with its header row, into a buffer of the micro-batch's capacity
    (gloo, pre-posted; module docstring)."""

    buf: torch.Tensor
    work: object


class AttentionLink:
    """An attention rank's side: :meth:`dispatch` (non-blocking) and :meth:`combine` (waits).
    ``homes[e]``: the position in ``ffn_ranks`` of the FFN rank serving expert ``e``;
    ``preposted``: the FFN ranks pre-post their receives (gloo): one message with a header
    row to every FFN rank, empty or not; else the count, then the tokens if any (module
    docstring)."""

    def __init__(self, ffn_ranks: tuple[int, ...], homes: torch.Tensor, groups: Groups,
                 timers: AfdTimers, preposted: bool = True) -> None:
        self.ffn_ranks, self.homes, self.groups, self.timers = ffn_ranks, homes, groups, timers
        self.preposted = preposted
        self.sends: list[tuple[torch.Tensor, object]] = []
        self.empty_dispatches = 0  # (micro-batch, FFN rank) pairs without a token

    def dispatch(self, flat: torch.Tensor, idx: torch.Tensor, gates: torch.Tensor) -> Inflight:
        """Post the counts and tokens of one micro-batch to every FFN rank of the unit, and
        the receives of their results; return at once."""
        out = Inflight(flat.shape[0], flat.device)
        with self.timers.timed("pack"):
            where = self.homes[idx]
            for i, dst in enumerate(self.ffn_ranks):
                rows, payload = pack_tokens(flat, idx, gates, where == i)
                self.empty_dispatches += rows.numel() == 0
                if self.preposted:
                    self._send(with_header(payload), dst, TAG_TOKENS)
                else:
                    count = torch.tensor([rows.numel()], dtype=torch.int64, device=flat.device)
                    self._send(count, dst, TAG_COUNT)
                    if rows.numel():
                        self._send(payload, dst, TAG_TOKENS)
                if rows.numel():
                    buf = flat.new_empty(rows.numel(), flat.shape[1])
                    work = dist.irecv(buf, src=dst, group=self.groups.combine, tag=TAG_RESULT)
                    out.parts.append((rows, buf, work))
        return out

    def combine(self, inflight: Inflight, width: int) -> torch.Tensor:
        """Wait for the FFN ranks' results of ``inflight`` and sum them per token
        ``[tokens, width]``."""
        with self.timers.timed("combine_wait"):
            for _, _, work in inflight.parts:
                work.wait()
        with self.timers.timed("attention"):
            routed = torch.zeros(inflight.tokens, width, device=inflight.device)
            for rows, buf, _ in inflight.parts:
                routed.index_add_(0, rows, buf)
        return routed

    def _send(self, tensor: torch.Tensor, dst: int, tag: int) -> None:
        self.sends.append((tensor, dist.isend(tensor, dst=dst, group=self.groups.dispatch, tag=tag)))

    def finish(self) -> None:
        """Wait for this step's sends (their tensors live until then)."""
        with self.timers.timed("send_wait"):
            for _, work in self.sends:
                work.wait()
        self.sends.clear()


class FfnLink:
    """An FFN rank's side: receive one micro-batch of every attention rank of the unit, hand
    back the results. ``preposted``: post the tokens' receives with the counts (gloo; module
    docstring)."""

    def __init__(self, attention_ranks: tuple[int, ...], width: int, k: int, groups: Groups,
                 timers: AfdTimers, device: torch.device | str = "cpu",
                 preposted: bool = True) -> None:
        self.attention_ranks, self.width, self.k = attention_ranks, width, k
        self.groups, self.timers, self.device = groups, timers, device
        self.preposted = preposted
        self.sends: list[tuple[torch.Tensor, object]] = []

    def post_next(self, capacity_rows: int) -> list[Posted]:
        """Post the receives of the next micro-batch, of at most ``capacity_rows`` tokens per
        attention rank: the whole message when pre-posted, else its count."""
        out = []
        for src in self.attention_ranks:
            if self.preposted:
                buf = torch.empty(capacity_rows + 1, self.width + 2 * self.k, device=self.device)
                tag = TAG_TOKENS
            else:
                buf, tag = torch.zeros(1, dtype=torch.int64, device=self.device), TAG_COUNT
            out.append(Posted(buf, dist.irecv(buf, src=src, group=self.groups.dispatch, tag=tag)))
        return out

    def receive(self, posted: list[Posted], then=None) -> list[torch.Tensor]:
        """Wait for the micro-batch ``posted`` and return one payload per attention rank
        (maybe empty). ``then()`` posts the next micro-batch's receives: at once when
        pre-posted; else between taking the counts and waiting for the tokens (posted now),
        so that every pair posts its receives in the order the messages come (NCCL matches
        them in order)."""
        if self.preposted:
            with self.timers.timed("pack"):
                if then is not None:
                    then()
            with self.timers.timed("dispatch_wait"):
                for p in posted:
                    p.work.wait()
            with self.timers.timed("pack"):
                sizes = [int(p.buf[0, 0].item()) for p in posted]
                return [p.buf[1:n + 1] for p, n in zip(posted, sizes)]
        with self.timers.timed("dispatch_wait"):
            for p in posted:
                p.work.wait()
        with self.timers.timed("pack"):
            sizes = [int(p.buf.item()) for p in posted]
            bufs = [torch.empty(n, self.width + 2 * self.k, device=self.device) for n in sizes]
            works = [dist.irecv(b, src=src, group=self.groups.dispatch, tag=TAG_TOKENS)
                     for b, src in zip(bufs, self.attention_ranks) if b.shape[0]]
            if then is not None:
                then()
        with self.timers.timed("dispatch_wait"):
            for work in works:
                work.wait()
        return bufs

    def reply(self, results: list[torch.Tensor]) -> None:
        """Send each attention rank its results (none where it sent no token)."""
        with self.timers.timed("pack"):
            for out, dst in zip(results, self.attention_ranks):
                if out.shape[0]:
                    out = out.contiguous()
                    self.sends.append((out, dist.isend(out, dst=dst, group=self.groups.combine,
                                                       tag=TAG_RESULT)))

    def finish(self) -> None:
        with self.timers.timed("send_wait"):
            for _, work in self.sends:
                work.wait()
        self.sends.clear()
