"""``python -m planner.run.reference_job PLAN ...``: see :mod:`planner.run.reference_job.cli`."""
from planner.run.reference_job.cli import main

if __name__ == "__main__":
    main()
