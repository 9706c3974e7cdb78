"""torchrun worker for tests/test_teardown.py: ``teardown_worker.py DIR MODE``.

Every rank writes ``DIR/rank<RANK>.pid`` holding ``PID PPID`` (its parent is torchrun's
agent), then: MODE ``sleep`` sleeps; ``ignore-term`` ignores SIGTERM and sleeps (a user script
that handles SIGTERM and does not exit); ``kill-one``: rank 1 SIGKILLs itself once the test
has read every rank's file (it then creates ``DIR/go``), the others sleep."""
import os
import signal
import sys
import time
from pathlib import Path

out, mode = Path(sys.argv[1]), sys.argv[2]
rank = int(os.environ["RANK"])
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
tmp = out / f".rank{rank}.pid"
tmp.write_text(f"{os.getpid()} {os.getppid()}\n")
tmp.rename(out / f"rank{rank}.pid")
if mode == "kill-one" and rank == 1:
    while not (out / "go").exists():
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(300)
