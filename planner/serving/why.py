"""One line on why the best colocated or the best disaggregated deployment wins."""
from __future__ import annotations

from cost_models.serving.config import ServingWorkload
from planner.serving.search import Candidate


def prefill_share(c: Candidate) -> float:
    """Share of a colocated instance's time spent in prefills (what stalls its decodes)."""
    return c.estimate.pools[0].utilisation


def why(co: Candidate | None, dis: Candidate | None, wl: ServingWorkload,
        fewest_gpus: bool = False) -> str:
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
    ratio = b.output_tokens_per_s_per_gpu / max(a.output_tokens_per_s_per_gpu, 1e-12)
    share = prefill_share(co)
    dec = dis.deployment.pool("decode").layout
    if co.meets_slo and (not dis.meets_slo or ratio <= 1.0):
        return (f"stay colocated: {a.output_tokens_per_s_per_gpu:.0f} vs "
                f"{b.output_tokens_per_s_per_gpu:.0f} tokens/s/GPU; prefills take only "
                f"{share:.0%} of a colocated instance's time, while splitting leaves the "
                f"{b.bound == 'prefill' and 'decode' or 'prefill'} pool partly idle "
                f"({b.pools[0].layout.gpus} prefill + {b.pools[1].layout.gpus} decode GPUs) and "
                f"adds a {b.kv_transfer_s * 1e3:.1f} ms KV transfer")
    return (f"disaggregate: {b.output_tokens_per_s_per_gpu:.0f} vs "
            f"{a.output_tokens_per_s_per_gpu:.0f} tokens/s/GPU ({ratio:.2f}x); colocated, "
            f"prefills take {share:.0%} of each instance's time and stall its decode steps "
            f"(TPOT {a.tpot_s * 1e3:.1f} ms at batch {co.deployment.pools[0].layout.batch}), "
            f"a separate decode pool runs batch {dec.batch} at TPOT {b.tpot_s * 1e3:.1f} ms")
