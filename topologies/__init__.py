"""Cluster hardware: GPU catalog, cluster specs and presets, and the topology graph.

This package imports nothing else from the project. Data flows
topologies -> cost_models -> (planner wires) solvers.
"""
