"""Queueing closed forms for serving: utilisation, M/G/1 and M/D/1 mean waiting times, and the
throughput of a full decode batch and of a closed loop.

Symbols: ``lambda`` arrival rate (requests/s), ``S`` service time (s), ``rho = lambda * E[S]``
utilisation of one server. Waiting time means time in queue, before service starts; the mean
response time adds ``E[S]``. A formula whose queue is unstable (``rho >= 1``) returns ``inf``.
"""
from __future__ import annotations

import math

__all__ = ["utilisation", "mg1_mean_wait_s", "md1_mean_wait_s", "mg1_mean_response_s",
           "mgc_mean_wait_s",
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
