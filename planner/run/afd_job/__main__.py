"""``python -m planner.run.afd_job PLAN ...``: see :mod:`planner.run.afd_job.cli`."""
from planner.run.afd_job.cli import main

if __name__ == "__main__":
    main()
