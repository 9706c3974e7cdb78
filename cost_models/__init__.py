"""Cost models: FLOPs, memory and communication time of a parallel configuration.

Imports only ``topologies`` from the project. Every formula names its source beside the code;
every tunable number lives in a :class:`cost_models.profile.Profile`.
"""
