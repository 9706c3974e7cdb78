"""planner: cluster spec -> topology -> cost models -> solvers -> Plan.

This package wires the others together: file loading, the CLI, reports and emitters.
"""
__version__ = "0.1.0"
