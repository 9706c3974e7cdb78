"""Pipeline solvers: layer partition DP, event simulator, SlimPipe slicing."""
