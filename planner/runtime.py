"""``planner.runtime``: the import path training scripts use; the code lives in
:mod:`planner.run.runtime`."""
from planner.run.runtime import *  # noqa: F401,F403
from planner.run.runtime import __all__  # noqa: F401
