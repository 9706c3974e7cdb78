"""torchrun worker for tests/test_launch.py: ``crash_worker.py MARKER MODE``. MODE ``crash``:
rank 1 kills itself with SIGKILL after a second while the others sleep; ``sleep``: every rank
sleeps. MARKER only makes these processes easy to find with pgrep."""
import os
import signal
import sys
import time

if sys.argv[2] == "crash" and os.environ.get("RANK") == "1":
    time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(120)
