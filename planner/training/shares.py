"""Data-parallel batch shares: replicas on faster GPUs take more micro-batches per step.

On a mixed cluster the data-parallel replicas of a stage may sit on different GPU types (with
pp = 1 on half A100, half H100 nodes, half the replicas are H100s). With equal shares every
replica runs ``m`` micro-batches and the step waits for the slowest; with shares proportional
to speed (HexiScale, Cephalo, Sailor) the stage runs at about the sum of its replicas' speeds.
The gradient sync stays lockstep, and every micro-batch keeps the same size, so the global
batch is unchanged. This module turns the estimate's per-replica pace
(``Estimate.replica_micro_batch_s``) into a ``solvers.batch_shares.ShareProblem``, solves it,
and keeps the shares only when the full estimate says they are faster and fit.

Memory: the step model counts ``min(pp - s, m)`` micro-batches of activations in flight on
stage ``s`` (1F1B). A share above ``m`` adds none when ``m >= pp``; otherwise shares are
capped at ``m``, which leaves nothing to move, so shares are tried only when ``m >= pp``.
"""
from __future__ import annotations

from dataclasses import replace

from cost_models.model_spec import ModelSpec
from cost_models.parallel import lockstep_replicas
from cost_models.profile import Profile
from cost_models.training.config import Workload
from cost_models.training.step import Estimate, estimate
from solvers.batch_shares import InfeasibleShares, ShareProblem, solve_shares
from topologies.cluster import Cluster

MEGATRON_NOTE = ("Megatron-LM runs equal micro-batch counts on every data-parallel replica: "
                 "the emitted command cannot express these shares; a custom training loop can "
                 "read its rank's share from planner.runtime (replica_micro_batches)")


def share_problem(est: Estimate) -> ShareProblem | None:
    """The share problem of ``est``'s replicas (None: they are alike, ``m < pp``, or the
    replicas an expert-parallel group joins cannot take equal shares of the batch).

    With EP the replicas joined by an EP group run in lockstep
    (``cost_models.parallel.lockstep_replicas``): each block of ``n`` such replicas is one
    unit of the problem at its slowest member's pace, sharing ``dp * m / n`` block
    micro-batches (every block the same size, else no shares); :func:`expand` gives each
    member its block's share."""
    cfg = est.config
    times = est.replica_micro_batch_s
    m = cfg.micro_batches(est.workload)
    if not times or len(set(times)) == 1 or cfg.vpp > 1 or m < cfg.degrees.pp:
        return None
    blocks = lockstep_replicas(cfg.degrees)
    n = len(blocks[0])
    if any(len(b) != n for b in blocks) or (cfg.degrees.dp * m) % n:
        return None
    block_times = tuple(max(times[r] for r in b) for b in blocks)
    if len(set(block_times)) == 1:
        return None
    return ShareProblem(micro_batch_s=block_times, total=cfg.degrees.dp * m // n)


def expand(est: Estimate, block_shares: tuple[int, ...]) -> tuple[int, ...]:
    """Per-replica shares from :func:`share_problem`'s per-block solution."""
    out = [0] * est.config.degrees.dp
    for block, k in zip(lockstep_replicas(est.config.degrees), block_shares):
        for r in block:
            out[r] = k
    return tuple(out)


def refine_shares(model: ModelSpec, cluster: Cluster, workload: Workload, est: Estimate,
                  prof: Profile) -> Estimate:
    """``est`` with DP batch shares by replica speed, if that is predicted faster and fits."""
    problem = share_problem(est)
    if problem is None:
        return est
    try:
        shares = expand(est, solve_shares(problem).shares)
    except InfeasibleShares:
        return est
    if len(set(shares)) == 1 or shares == est.config.dp_shares:
        return est
    candidate = estimate(model, cluster, workload, replace(est.config, dp_shares=shares), prof,
                         est.node_order)
    if candidate.memory.fits and candidate.step_time_s < est.step_time_s * (1 - 1e-9):
        return candidate
    return est


def equal_shares_step_s(model: ModelSpec, cluster: Cluster, est: Estimate,
                        prof: Profile) -> float:
    """The predicted step of ``est`` with every replica taking the same share."""
    if est.config.dp_shares is None:
        return est.step_time_s
    return estimate(model, cluster, est.workload, replace(est.config, dp_shares=None), prof,
                    est.node_order).step_time_s


def shares_note(model: ModelSpec, cluster: Cluster, est: Estimate, prof: Profile) -> str | None:
    """One line for the plan's notes on the shares of ``est`` (None without shares)."""
    shares = est.config.dp_shares
    if shares is None:
        return None
    equal = equal_shares_step_s(model, cluster, est, prof)
    counts = sorted(set(shares))
    spread = ", ".join(f"{shares.count(k)} x {k}" for k in counts)
    return (f"DP batch shares: replicas take unequal micro-batch counts by speed ({spread}; "
            f"equal: {est.config.micro_batches(est.workload)} each), predicted "
            f"{equal / est.step_time_s - 1:.1%} faster ({est.step_time_s:.2f} s vs "
            f"{equal:.2f} s per step). {MEGATRON_NOTE}")
