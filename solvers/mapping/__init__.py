"""Heterogeneity-aware mapping of cluster nodes ("units") onto pipeline stages.

This package's ``__all__`` is the public surface: import from ``solvers.mapping``, not from its
modules (tests of a module's private helpers are the exception). Where each name lives:

* :mod:`~solvers.mapping.problem`: the problem and answer types, the validator, the objective
  (floats and the scaled integers CP-SAT ranks by) and the tie-break order.
* :mod:`~solvers.mapping.baselines`: Megatron's listing order, the grouped first-fit starts
  and the exhaustive reference for small instances.
* :mod:`~solvers.mapping.cpsat`: the CP-SAT model and ``solve_mapping``, the main entry.
"""

from solvers.mapping.baselines import (BRUTE_FORCE_MAX_UNITS, brute_force_mapping, megatron_mapping,
                                       megatron_stage_units)
from solvers.mapping.cpsat import solve_mapping
from solvers.mapping.problem import (SPEED_SCALE, InfeasibleMapping, Mapping, MappingProblem,
                                     MappingTimeout, StageUnits, admissible, mapping_objective,
                                     scaled_objective, unit_classes, validate_stage_units)

__all__ = [
    # problem: types, validator, objective
    "SPEED_SCALE", "StageUnits", "InfeasibleMapping", "MappingTimeout", "MappingProblem",
    "Mapping", "unit_classes", "validate_stage_units", "mapping_objective", "scaled_objective",
    "admissible",
    # the main entry
    "solve_mapping",
    # baselines and the exhaustive reference
    "BRUTE_FORCE_MAX_UNITS", "megatron_stage_units", "megatron_mapping", "brute_force_mapping",
]
