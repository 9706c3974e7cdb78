"""Per-rank step timers of the reference job: seconds by kind of work, one dict per step.

A :class:`Timers` object is owned by the training loop (:func:`planner.run.reference_job.train.train`)
and handed explicitly to whatever times a section: the 1F1B step, the TP ``f`` / ``g``
operators, the expert dispatch and its all-to-all. There is no module-level timer.

The kinds (``TIMED_KINDS``) are disjoint, so they add up to at most the step:

* ``forward`` / ``backward``: compute of all micro-batches of the step (the loss included on
  the last stage), without the TP / EP communication and quota solving nested in them;
* ``tp_comm``: the all-reduces of Megatron's ``f`` and ``g`` (forward and backward), and the
  vocabulary-parallel embedding's and cross entropy's;
* ``ep_comm``: the all-gather of expert counts and both all-to-alls, forward and backward;
* ``quota_solve``: the dispatch's CPU work (quotas, dispatch matrix, slot of each token);
* ``pp_wait``: time blocked in ``dist.recv`` and in the final waits on the ``isend`` works
  (pipeline bubble plus transfer);
* ``dp_comm``: the gradient sync (expert gradients included);
* ``optimizer``: ``opt.step()``;
* ``step`` (``STEP_KINDS`` only): the whole step (the loss all-reduce at its end is in no
  other kind).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["STEP_KINDS", "TIMED_KINDS", "Timers"]

TIMED_KINDS = ("forward", "backward", "tp_comm", "ep_comm", "quota_solve", "pp_wait",
               "dp_comm", "optimizer")
STEP_KINDS = TIMED_KINDS + ("step",)


class Timers:
    """Seconds per kind of this rank, one dict per step (``time.perf_counter``).

    :meth:`timed` sections nest and are exclusive: a section's time leaves out the sections
    timed inside it (the TP all-reduces inside a forward count as ``tp_comm``, not
    ``forward``), so the kinds are disjoint. Autograd runs a CPU backward on the thread that
    called ``backward()``, so sections timed inside it nest in the ``backward`` section.

    ``sync``: called at each section's start and end before the clock is read (a GPU job's
    ``torch.cuda.synchronize``, :class:`~planner.run.reference_job.device.JobDevice`), so a
    section holds the kernels it queued and none queued before it."""

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.sync = sync
        self.steps: list[dict[str, float]] = []
        self.current = dict.fromkeys(TIMED_KINDS, 0.0)
        self._stack: list[float] = []  # per open section: seconds of the sections inside it

    def add(self, kind: str, seconds: float) -> None:
        """Add ``seconds`` to ``kind`` in this step (not subtracted from an open section)."""
        self.current[kind] = self.current.get(kind, 0.0) + seconds

    @contextmanager
    def timed(self, kind: str) -> Iterator[None]:
        """Time the ``with`` body as ``kind``, less the sections timed inside it."""
        self._stack.append(0.0)
        if self.sync is not None:
            self.sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.sync is not None:
                self.sync()
            elapsed = time.perf_counter() - start
            inner = self._stack.pop()
            self.add(kind, elapsed - inner)
            if self._stack:
                self._stack[-1] += elapsed

    def end_step(self, step_seconds: float) -> None:
        """Close this step's dict (with ``step`` = ``step_seconds``) and start the next."""
        self.current["step"] = step_seconds
        self.steps.append(self.current)
        self.current = dict.fromkeys(TIMED_KINDS, 0.0)
