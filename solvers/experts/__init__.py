"""Expert placement solvers: replicas and placement, two-slot groups, token quotas, the EPLB-style baseline."""
