"""MoE expert placement as a plan family: replica quotas and placement, evaluation.

The public API (``planner.experts.plan_experts``, ``planner.experts.realtime_quotas``, the
engine exports) is re-exported here from :mod:`planner.experts.plan`.
"""
from planner.experts.plan import *  # noqa: F401,F403
from planner.experts.plan import __all__  # noqa: F401
