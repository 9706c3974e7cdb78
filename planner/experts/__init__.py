"""MoE expert placement as a plan family: replica quotas and placement, evaluation."""
