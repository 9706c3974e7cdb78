"""Queueing closed forms for serving: utilisation, M/G/1 and M/D/1 mean waiting times, and the
throughput of a full decode batch and of a closed loop.

Symbols: ``lambda`` arrival rate (requests/s), ``S`` service time (s), ``rho = lambda * E[S]``
utilisation of one server. Waiting time means time in queue, before service starts; the mean
response time adds ``E[S]``. A formula whose queue is unstable (``rho >= 1``) returns ``inf``.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["utilisation", "mg1_mean_wait_s", "md1_mean_wait_s", "mg1_mean_response_s",
           "mgc_mean_wait_s", "mgc_wait_probability", "wait_quantile_s", "birth_death_in_system",
           "decode_throughput_tokens_per_s", "closed_loop_throughput_per_s"]


def utilisation(arrival_rate_per_s: float, service_s: float, servers: int = 1) -> float:
    """``rho = lambda * E[S] / c``: the busy fraction of each of ``c`` servers."""
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    return arrival_rate_per_s * service_s / servers


def mg1_mean_wait_s(arrival_rate_per_s: float, service_mean_s: float,
                    service_second_moment_s2: float) -> float:
    """Mean waiting time of the M/G/1 FCFS queue, the Pollaczek-Khinchine mean-value formula:
    ``W = lambda * E[S^2] / (2 * (1 - rho))``, ``rho = lambda * E[S]``.

    Sources: L. Kleinrock, *Queueing Systems, Vol. 1: Theory* (Wiley, 1975), chapter 5 (the
    M/G/1 queue), the Pollaczek-Khinchine mean-value formula; M. Harchol-Balter, *Performance
    Modeling and Design of Computer Systems* (Cambridge, 2013), the M/G/1 chapter.
    """
    rho = arrival_rate_per_s * service_mean_s
    if service_second_moment_s2 < service_mean_s ** 2 * (1.0 - 1e-12):
        raise ValueError(f"E[S^2] ({service_second_moment_s2}) must be >= E[S]^2 "
                         f"({service_mean_s ** 2})")
    if rho >= 1.0:
        return math.inf
    return arrival_rate_per_s * service_second_moment_s2 / (2.0 * (1.0 - rho))


def md1_mean_wait_s(arrival_rate_per_s: float, service_s: float) -> float:
    """Mean waiting time of the M/D/1 queue (deterministic service ``D``): the
    Pollaczek-Khinchine formula with ``E[S^2] = D^2``, ``W = rho * D / (2 * (1 - rho))``."""
    return mg1_mean_wait_s(arrival_rate_per_s, service_s, service_s ** 2)


def mg1_mean_response_s(arrival_rate_per_s: float, service_mean_s: float,
                        service_second_moment_s2: float) -> float:
    """Mean time in system of the M/G/1 queue: ``E[S] + W`` (Pollaczek-Khinchine)."""
    return service_mean_s + mg1_mean_wait_s(arrival_rate_per_s, service_mean_s,
                                            service_second_moment_s2)


def decode_throughput_tokens_per_s(batch: int, step_s: float) -> float:
    """Output tokens per second of an instance whose decode batch stays full: one token per
    running request per step, ``batch / step_s``."""
    if step_s <= 0:
        raise ValueError(f"step_s must be > 0, got {step_s}")
    return batch / step_s


def closed_loop_throughput_per_s(concurrency: int, response_s: float,
                                 think_s: float = 0.0) -> float:
    """Completions per second of ``N`` clients that each wait ``think_s`` and send the next
    request when the previous one ends: the interactive response time law ``X = N / (R + Z)``
    (Little's law on the closed loop; E. Lazowska et al., *Quantitative System Performance*,
    Prentice-Hall 1984, chapter 3)."""
    if response_s + think_s <= 0:
        raise ValueError(f"response_s + think_s must be > 0, got {response_s + think_s}")
    return concurrency / (response_s + think_s)


def mgc_mean_wait_s(arrival_rate_per_s: float, service_mean_s: float, servers: int,
                    service_scv: float = 1.0) -> float:
    """Mean wait of a request for one of ``servers`` slots (decode batch slots), approximated:
    Sakasegawa's M/M/c formula ``Wq = S * rho^(sqrt(2(c+1)) - 1) / (c (1 - rho))``
    (H. Sakasegawa, "An approximation formula L_q = alpha*rho^beta/(1-rho)", Annals of the
    Institute of Statistical Mathematics 29, 1977), scaled by ``(1 + scv) / 2`` for general
    service times with squared coefficient of variation ``scv`` (the Allen-Cunneen
    approximation; W. Whitt, "Approximations for the GI/G/m queue", 1993). ``inf`` when
    ``rho >= 1``."""
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    rho = arrival_rate_per_s * service_mean_s / servers
    if rho >= 1.0:
        return math.inf
    if rho <= 0.0:
        return 0.0
    exponent = math.sqrt(2.0 * (servers + 1)) - 1.0
    return (1.0 + service_scv) / 2.0 * service_mean_s * rho ** exponent / (servers * (1 - rho))


def mgc_wait_probability(arrival_rate_per_s: float, service_mean_s: float, servers: int) -> float:
    """Probability that a request waits for one of ``servers`` slots: Sakasegawa's numerator
    ``rho^(sqrt(2(c+1)) - 1)`` (exact for c = 1, where it is rho), capped at 1."""
    rho = arrival_rate_per_s * service_mean_s / servers
    if rho <= 0.0:
        return 0.0
    return min(1.0, rho ** (math.sqrt(2.0 * (servers + 1)) - 1.0))


def wait_quantile_s(mean_wait_s: float, wait_probability: float, quantile: float) -> float:
    """``quantile`` of a waiting time that is zero with probability ``1 - wait_probability``
    and exponential beyond: the heavy-traffic form of the M/G/1 and M/G/c waiting-time tail
    (Kingman 1962; for M/M/c it is exact), ``P(W > t) = Pw * exp(-t * Pw / E[W])``."""
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    if mean_wait_s <= 0.0 or wait_probability <= 0.0:
        return 0.0
    if math.isinf(mean_wait_s):
        return math.inf
    tail = 1.0 - quantile
    if wait_probability <= tail:
        return 0.0
    return mean_wait_s / wait_probability * math.log(wait_probability / tail)



def birth_death_in_system(arrival_rate_per_s: float, rates_per_s: np.ndarray
                          ) -> tuple[float, float]:
    """(mean number in system, probability of an empty system) of a birth-death chain: Poisson
    arrivals at ``arrival_rate_per_s``, completions at ``rates_per_s[n-1]`` with ``n`` in the
    system and at the last rate beyond (L. Kleinrock, *Queueing Systems Vol. 1*, ch. 3, the
    state-dependent birth-death queue). A server that batches what waits into its next step
    serves faster the more wait, which this captures. ``(inf, 0)`` when even the fastest rate
    cannot keep up."""
    lam = arrival_rate_per_s
    rates = np.asarray(rates_per_s, dtype=float)
    r = lam / rates[-1]
    if r >= 1.0:
        return math.inf, 0.0
    if lam <= 0.0:
        return 0.0, 1.0
    logp = np.concatenate(([0.0], np.cumsum(np.log(lam / rates))))  # log P_n / P_0
    top = logp.max()
    p = np.exp(logp - top)
    n_last = len(rates)
    tail_mass = p[-1] * r / (1.0 - r)
    tail_moment = p[-1] * (n_last * r / (1.0 - r) + r / (1.0 - r) ** 2)
    total = p.sum() + tail_mass
    mean_n = (float(np.dot(np.arange(n_last + 1), p)) + tail_moment) / total
    return mean_n, float(p[0] / total)
