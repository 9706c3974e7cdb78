"""``python -m planner``: the same as the ``planner`` console script."""
from planner.cli.app import main

main()
