"""One line on why the best colocated or the best disaggregated deployment wins."""
from __future__ import annotations

from cost_models.serving.config import ServingWorkload
from planner.serving.search import Candidate


def prefill_share(c: Candidate) -> float:
    """Share of a colocated instance's time spent in prefills (what stalls its decodes)."""
    return c.estimate.pools[0].utilisation


MODE_NAMES = {"colocated": "colocated", "disagg": "prefill/decode disaggregated",
              "afd": "attention/FFN disaggregated"}


def why(co: Candidate | None, dis: Candidate | None, wl: ServingWorkload,
        fewest_gpus: bool = False, mode: str | None = None,
        per_dollar: tuple[float, float] | None = None) -> str:
    """Why the best colocated or disaggregated deployment wins; with ``mode`` (``--mode``)
    only that mode was searched, and the line says so rather than compare with the modes
    that were not. ``per_dollar``: (colocated, disaggregated) output tokens per dollar, the
    figures the per-dollar objective ranks by, compared instead of tokens/s/GPU."""
    if mode is not None:
        return (f"only {MODE_NAMES[mode]} plans were searched (--mode {mode}); run without "
                "--mode to compare the modes")
    if co is None and dis is None:
        return "no deployment fits the model on this cluster"
    if fewest_gpus and co is not None and dis is not None:
        a, b = co.estimate, dis.estimate
        winner = "colocated" if (co.meets_slo, -a.gpus) >= (dis.meets_slo, -b.gpus) else (
            "disaggregated")
        return (f"{winner}: {wl.rate_per_s:g} requests/s within the targets takes {a.gpus} GPUs "
                f"colocated (prefills take {prefill_share(co):.0%} of each instance's time) "
                f"and {b.gpus} disaggregated ({b.pools[0].layout.gpus} prefill + "
                f"{b.pools[1].layout.gpus} decode, whole nodes each)")
    if dis is None:
        return ("colocated: a disaggregated deployment needs a prefill and a decode pool on "
                "separate whole nodes, and none fits or meets the targets")
    if co is None:
        return ("disaggregated: no colocated layout meets the targets (prefills stall the "
                "decode batch past the TPOT target)")
    a, b = co.estimate, dis.estimate
    va, vb, unit = ((a.output_tokens_per_s_per_gpu, b.output_tokens_per_s_per_gpu,
                     "tokens/s/GPU") if per_dollar is None else
                    (per_dollar[0], per_dollar[1], "tokens per dollar"))
    ratio = vb / max(va, 1e-12)
    share = prefill_share(co)
    dec = dis.deployment.pool("decode").layout
    if co.meets_slo and (not dis.meets_slo or ratio <= 1.0):
        return (f"stay colocated: {va:.0f} vs {vb:.0f} {unit}; prefills take only "
                f"{share:.0%} of a colocated instance's time, while splitting leaves the "
                f"{b.bound == 'prefill' and 'decode' or 'prefill'} pool partly idle "
                f"({b.pools[0].layout.gpus} prefill + {b.pools[1].layout.gpus} decode GPUs) and "
                f"adds a {b.kv_transfer_s * 1e3:.1f} ms KV transfer")
    return (f"disaggregate: {vb:.0f} vs {va:.0f} {unit} ({ratio:.2f}x); colocated, "
            f"prefills take {share:.0%} of each instance's time and stall its decode steps "
            f"(TPOT {a.tpot_target_s * 1e3:.1f} ms at batch "
            f"{co.deployment.pools[0].layout.batch}, every slot busy), "
            f"a separate decode pool runs batch {dec.batch} at TPOT {b.tpot_s * 1e3:.1f} ms")


def decode_tokens_per_s_per_gpu(c: Candidate, wl: ServingWorkload) -> float:
    """What a deployment's decode side delivers per decode GPU at its full batch: the decode
    pool (disagg), the attention and FFN pools (afd), the whole instance (colocated, whose
    GPUs also prefill)."""
    e = c.estimate
    roles = {"disagg": ("decode",), "afd": ("attention", "ffn")}.get(c.deployment.mode)
    if roles is None:
        return e.output_tokens_per_s_per_gpu
    pools = [p for p in e.pools if p.role in roles]
    gpus = sum(p.layout.gpus for p in pools)
    return pools[0].capacity_per_s * wl.osl / gpus if gpus else 0.0


def afd_verdict(best: Candidate | None, co: Candidate | None, dis: Candidate | None,
                units, wl: ServingWorkload) -> str:
    """Whether attention/FFN disaggregation pays against the best other decode side, and
    which term decides: the transfers between the pools, the attention GPUs' KV capacity, or
    the expert GPUs' utilisation (few tokens per expert)."""
    if not units:
        return ("afd does not apply: no attention/FFN split fits the cluster in whole nodes "
                "and meets the TPOT target")
    u = units[0]
    st, lay = u.stages, u.layout
    trip = sum(st.moe_stages)
    transfer = (st.dispatch_s + st.combine_s) / trip if trip else 0.0
    busy_experts = lay.micro_batches * st.experts_s / max(
        lay.micro_batches * max(st.moe_stages), trip)
    others = [(c.deployment.mode, decode_tokens_per_s_per_gpu(c, wl)) for c in (co, dis)
              if c is not None and c.meets_slo]
    mine = u.output_tokens_per_s_per_gpu
    detail = (f"unit of {lay.attention_gpus} attention + {lay.ffn_gpus} FFN GPUs, "
              f"{lay.micro_batches} micro-batches of {lay.micro_batch:g}; a MoE layer's round "
              f"is bound by {u.bound}; transfers are {transfer:.0%} of a micro-batch's trip; "
              f"expert GPUs busy {busy_experts:.0%}")
    if lay.batch >= u.memory.max_batch:
        detail += "; the attention batch is capped by KV capacity"
    if not others:
        return f"afd: {mine:.0f} decode tokens/s/GPU ({detail})"
    mode, theirs = max(others, key=lambda x: x[1])
    if mine > theirs:
        return (f"afd pays: {mine:.0f} vs {theirs:.0f} decode tokens/s/GPU of the best "
                f"{mode} plan ({mine / theirs:.2f}x; {detail})")
    killer = ("the transfers between the pools" if transfer > 0.35 or u.bound in (
        "dispatch", "combine", "ring") else "KV capacity on the attention GPUs"
        if lay.batch >= u.memory.max_batch else "idle expert GPUs (too few tokens per expert)"
        if busy_experts < 0.6 else "re-reading the weights once per micro-batch")
    return (f"afd does not pay: {mine:.0f} vs {theirs:.0f} decode tokens/s/GPU of the best "
            f"{mode} plan; {killer} ({detail})")
