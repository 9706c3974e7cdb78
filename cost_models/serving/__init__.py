"""Serving cost models: workload, pool layouts, memory, prefill and decode step latency, and the
closed-form throughput of colocated and prefill/decode-disaggregated pools (``docs/serving.md``)."""
