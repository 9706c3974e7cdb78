"""The search's best equals exhaustive enumeration under the same cost model.

The exhaustive reference builds every TrainingConfig of the planner's space by brute force
(every factorisation of the GPUs, every micro-batch, interleaving depth, schedule, recompute
choice and number of recomputed layers, ZeRO stage 0-3, sequence parallelism on and off,
SlimPipe sequence slices 1-16),
keeps those ``check_config`` accepts and that fit in memory, estimates each, and takes the
fastest. The search instead walks ``cost_models.space``'s generators, prunes tuples by a
memory lower bound and takes the first fitting recompute/ZeRO option; these tests show that the
shortcuts lose nothing. The space's own restrictions (TP inside one NVLink domain, expert TP 1
or tp, CP a power of two with >= 4096 tokens per rank, sequence slicing from 16K tokens up)
apply to both.
"""
from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from cost_models.model_spec import MoESpec, ModelSpec
from cost_models.parallel import ConfigError, Degrees
from cost_models.training.config import TrainingConfig, Workload, check_config
from cost_models.profile import default_profile
from cost_models.training.step import estimate, estimate_memory
from planner.training.search import SearchSpace, rank_key, search, tuple_floor_s
from cost_models.parallel import Degrees
from cost_models.space import divisors
from topologies.standard import homogeneous_cluster

GPU = "A100-SXM4-40GB"


def _model(moe: bool) -> ModelSpec:
    return ModelSpec(name="tiny-moe" if moe else "tiny", num_layers=8, hidden_size=4096,
                     num_heads=32, num_kv_heads=8, head_dim=128, ffn_hidden_size=14336,
                     vocab_size=128256,
                     moe=MoESpec(8, 2, 14336) if moe else None)


def _exhaustive(model, cluster, workload, prof, only_pp=None):
    n = cluster.num_gpus
    layers = model.num_layers
    best = None
    for tp, cp, pp in itertools.product(divisors(n), repeat=3):
        if n % (tp * cp * pp) or tp > 8 or (only_pp is not None and pp != only_pp):
            continue
        if cp > 1 and (workload.seq_len // cp < 4096 or cp & (cp - 1)):
            continue
        dp = n // (tp * cp * pp)
        eps = divisors(model.moe.num_experts) if model.moe else [1]
        for ep, etp in itertools.product(eps, sorted({1, tp})):
            if (tp * cp * dp) % (ep * etp) or (not model.moe and etp != tp):
                continue
            for mb, v, zb, sp, zero, k in itertools.product(
                    (1, 2, 4, 8), range(1, 9), (False, True), (False, True), (0, 1, 2, 3),
                    (1, 2, 4, 8, 16)):
                if (zb and (v > 1 or pp == 1)) or (v > 1 and pp == 1):
                    continue
                if k > 1 and (workload.seq_len < 16384 or pp == 1 or v > 1 or zb):
                    continue
                base = TrainingConfig(degrees=Degrees(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp), vpp=v, micro_batch=mb, sequence_parallel=sp, zero=zero, zero_bubble=zb, seq_slices=k)
                try:
                    check_config(model, workload, base, n)
                except ConfigError:
                    continue
                if v > 1 and not any((layers + s) % (pp * v) == 0 for s in (0, 1, 2)):
                    continue
                per_chunk = -(-layers // (pp * v))
                options = [replace(base, recompute="none"), replace(base, recompute="selective")]
                options += [replace(base, recompute="full", recompute_layers=k)
                            for k in range(1, per_chunk)]
                options += [replace(base, recompute="full")]
                for cfg in options:
                    if not estimate_memory(model, cluster, workload, cfg, prof).fits:
                        continue
                    est = estimate(model, cluster, workload, cfg, prof)
                    if best is None or est.step_time_s < best.step_time_s:
                        best = est
    return best


CASES = [
    ("dense, 8 GPUs", False, 1, 8, Workload(4096, 32)),
    ("dense, 16 GPUs, long sequence", False, 2, 8, Workload(8192, 16)),
    ("MoE, 16 GPUs", True, 2, 8, Workload(4096, 32)),
    ("dense, 16 GPUs, 32K context", False, 2, 8, Workload(32768, 8)),
]


@pytest.mark.parametrize("name,moe,nodes,gpus,workload", CASES, ids=[c[0] for c in CASES])
def test_search_best_equals_exhaustive(name, moe, nodes, gpus, workload):
    model = _model(moe)
    cluster = homogeneous_cluster(GPU, nodes, gpus)
    prof = default_profile(GPU)
    ref = _exhaustive(model, cluster, workload, prof)
    found = search(model, cluster, workload, prof, SearchSpace(), top_k=1).ranked[0]
    assert ref is not None
    assert found.memory.fits
    assert found.step_time_s == pytest.approx(ref.step_time_s, rel=1e-12), (
        f"search {found.config} {found.step_time_s} vs exhaustive {ref.config} {ref.step_time_s}")


def test_search_equals_exhaustive_with_slimpipe_at_long_context():
    """With the pipeline depth fixed at 4 and a 32K context, sequence slicing (SlimPipe) wins
    the exhaustive enumeration, and the search finds the same step time."""
    model, cluster = _model(False), homogeneous_cluster(GPU, 2, 8)
    prof, work = default_profile(GPU), Workload(32768, 8)
    ref = _exhaustive(model, cluster, work, prof, only_pp=4)
    found = search(model, cluster, work, prof, SearchSpace(pp=4), top_k=1).ranked[0]
    assert ref.config.seq_slices > 1 and ref.config.schedule == "slimpipe"
    assert found.step_time_s == pytest.approx(ref.step_time_s, rel=1e-12), (found.config,
                                                                            ref.config)


def test_search_respects_fixed_degrees_and_ranks_fastest_first():
    model, cluster = _model(False), homogeneous_cluster(GPU, 2, 8)
    prof, work = default_profile(GPU), Workload(4096, 32)
    result = search(model, cluster, work, prof, SearchSpace(tp=2), top_k=50)
    assert all(e.config.degrees.tp == 2 for e in result.ranked)
    keys = [rank_key(e) for e in result.ranked]
    assert keys == sorted(keys)
    assert result.stats.options_estimated >= len(result.ranked)


@pytest.mark.parametrize("moe", [False, True])
def test_compute_floor_bounds_every_tuple_and_bound_pruning_loses_nothing(moe):
    """The step-time floor that lets the search skip tuples is a true lower bound, and the
    top k with pruning equal the top k of the full ranking."""
    model, cluster = _model(moe), homogeneous_cluster(GPU, 2, 8)
    prof, work = default_profile(GPU), Workload(4096, 32)
    full = search(model, cluster, work, prof, SearchSpace(), top_k=10**6)
    assert full.stats.tuples_pruned_bound == 0
    for est in full.ranked:
        c = est.config
        d = c.degrees
        assert tuple_floor_s(model, cluster, work, prof, d) <= est.step_time_s * (1 + 1e-12)
    for k in (1, 3):
        pruned = search(model, cluster, work, prof, SearchSpace(), top_k=k)
        assert [rank_key(e) for e in pruned.ranked] == [rank_key(e) for e in full.ranked[:k]]
    assert search(model, cluster, work, prof, SearchSpace(), top_k=1).stats.tuples_pruned_bound > 0


def test_inconsistent_degrees_name_the_nearest_cluster_and_batch_that_work():
    """9 nodes of 8 = 72 GPUs = 2^3 * 3^2 with a batch of 16: DP divides 16, TP the 32 heads,
    PP at most the 8 layers, so no degree tuple covers the 9. The message names the most nodes
    that work at this batch and the smallest larger batch that works on all GPUs; both are
    found here by brute force over every node count and every batch (the planner only tries
    multiples of the GPU count's divisors) and checked by searching them."""
    from cost_models.space import degree_tuples
    from planner.errors import InfeasibleError
    from planner.training.search import space_limits
    from topologies.cluster import first_nodes
    model, cluster = _model(False), homogeneous_cluster(GPU, 9, 8)
    workload = Workload(seq_len=4096, global_batch=16)

    def consistent(c, w):
        return any(True for _ in degree_tuples(space_limits(model, c, w)))

    with pytest.raises(InfeasibleError) as err:
        search(model, cluster, workload, default_profile(GPU))
    nodes = next(n for n in range(8, 0, -1) if consistent(first_nodes(cluster, n), workload))
    batch = next(b for b in range(17, 16 * 72) if consistent(cluster, replace(workload,
                                                                               global_batch=b)))
    message = str(err.value)
    assert f"nearest that work: {nodes} nodes ({8 * nodes} GPUs) at this batch" in message
    assert f"or a global batch of {batch} on all 72 GPUs" in message
    assert search(model, first_nodes(cluster, nodes), workload, default_profile(GPU)).ranked
    assert search(model, cluster, replace(workload, global_batch=batch),
                  default_profile(GPU)).ranked
