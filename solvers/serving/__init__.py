"""Serving solvers: a request-level discrete-event simulator of LLM serving (colocated or
prefill/decode disaggregated pools, continuous batching, KV capacity and preemption) and the
queueing closed forms it is checked against.

* :mod:`~solvers.serving.simulator`: ``SimProblem`` -> ``simulate`` -> ``SimResult``.
* :mod:`~solvers.serving.queueing`: utilisation, Pollaczek-Khinchine (M/G/1, M/D/1) waits,
  full-batch decode and closed-loop throughputs.
"""

from solvers.serving.queueing import (closed_loop_throughput_per_s, decode_throughput_tokens_per_s,
                                      md1_mean_wait_s, mg1_mean_response_s, mg1_mean_wait_s,
                                      utilisation)
from solvers.serving.simulator import (MODES, LatencyModel, LatencyStats, PoolSim, SimProblem,
                                       SimResult, poisson_arrivals_s, simulate)

__all__ = [
    # simulator
    "MODES", "LatencyModel", "LatencyStats", "PoolSim", "SimProblem", "SimResult",
    "poisson_arrivals_s", "simulate",
    # closed forms
    "closed_loop_throughput_per_s", "decode_throughput_tokens_per_s", "md1_mean_wait_s",
    "mg1_mean_response_s", "mg1_mean_wait_s", "utilisation",
]
