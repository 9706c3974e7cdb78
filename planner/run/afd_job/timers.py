"""Per-rank step timers of the AFD decode job: seconds by kind, one dict per decode step.

The same exclusive nested sections as the training reference job
(:class:`planner.run.reference_job.timers.Timers`), with AFD's kinds (disjoint, so they add
up to at most the step):

* ``attention`` (busy, attention ranks): embedding, attention over the KV cache, dense
  layers, router, shared experts, adding the experts' results back, the head and the argmax;
* ``experts`` (busy, FFN ranks): the routed experts of every received token;
* ``pack`` (busy, both): building and posting messages (dispatch on attention ranks, results
  on FFN ranks): CPU work of the transfers, not waiting;
* ``dispatch_wait`` (idle, FFN ranks): blocked until an attention rank's counts and tokens
  arrive (the attention side's compute plus the transfer);
* ``combine_wait`` (idle, attention ranks): blocked until the experts' results arrive;
* ``send_wait`` (idle, both): the final waits on the step's ``isend`` works;
* ``step`` (``AFD_STEP_KINDS`` only): the whole decode step on this rank.

On CUDA (NCCL) every section ends with ``torch.cuda.synchronize()`` (the ``fence``), so the
host clock measures the device work; on CPU (gloo) nothing is added.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from planner.run.reference_job.timers import Timers

__all__ = ["AFD_BUSY_KINDS", "AFD_KINDS", "AFD_STEP_KINDS", "AFD_WAIT_KINDS", "AfdTimers",
           "busy_idle"]

AFD_BUSY_KINDS = ("attention", "experts", "pack")
AFD_WAIT_KINDS = ("dispatch_wait", "combine_wait", "send_wait")
AFD_KINDS = AFD_BUSY_KINDS + AFD_WAIT_KINDS
AFD_STEP_KINDS = AFD_KINDS + ("step",)


class AfdTimers(Timers):
    """:class:`~planner.run.reference_job.timers.Timers` with the AFD kinds; ``fence`` (if
    given) runs at the end of every section, inside it (``torch.cuda.synchronize`` on GPU)."""

    def __init__(self, fence: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.fence = fence
        self.current = dict.fromkeys(AFD_KINDS, 0.0)

    @contextmanager
    def timed(self, kind: str) -> Iterator[None]:
        with super().timed(kind):
            yield
            if self.fence is not None:
                self.fence()

    def end_step(self, step_seconds: float) -> None:
        super().end_step(step_seconds)
        self.current = dict.fromkeys(AFD_KINDS, 0.0)

    def discard_step(self) -> dict[str, float]:
        """Close the current dict without keeping it as a step (the prefill); return it."""
        done, self.current = self.current, dict.fromkeys(AFD_KINDS, 0.0)
        return done


def busy_idle(steps: list[dict[str, float]]) -> dict[str, float]:
    """Totals over ``steps`` (dicts of :data:`AFD_STEP_KINDS`): ``busy_s`` (compute and
    message building), ``wait_s`` (blocked in communication waits), ``other_s`` (the rest of
    the steps: Python between sections), ``busy_fraction`` of the steps' time, and every
    kind's total."""
    total = {k: sum(s.get(k, 0.0) for s in steps) for k in AFD_STEP_KINDS}
    busy = sum(total[k] for k in AFD_BUSY_KINDS)
    wait = sum(total[k] for k in AFD_WAIT_KINDS)
    return {**{f"{k}_s": v for k, v in total.items()}, "busy_s": busy, "wait_s": wait,
            "other_s": max(0.0, total["step"] - busy - wait),
            "busy_fraction": busy / total["step"] if total["step"] > 0 else 0.0}
