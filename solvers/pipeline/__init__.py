"""Pipeline solvers: layer partition DP (``dp``), per-device schedules (``schedules``), the event
simulator (``sim``), closed-form bubbles (``closed_form``) and SlimPipe slicing (``slimpipe``)."""
