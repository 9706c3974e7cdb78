"""Training compositions of the shared terms: memory, pipeline schedule, per-stage and per-step estimates."""
