"""``planner check-run`` of an AFD decode job record (``planner.afd-run-record/v1``): its
measured times against a prediction handed over by the CLI
(:func:`planner.serving.afd_run_prediction.predict_afd_run`, an ``AfdRunPrediction`` of plain
numbers); this module reads and compares, and imports no cost model.

Measured figures are medians over the recorded decode steps after the first (start-up skew
lands in step 0), per rank, then the slowest rank of each role:

* step: the slowest rank's step time (``step_times_max_s``);
* attention ranks' busy time (``attention`` + ``pack``: compute, and building and posting the
  messages), per step and per micro-batch and MoE layer (the step's figure over ``m`` times
  the MoE layers, both sides alike; it carries the dense layers and the head too), and its
  ``pack`` part;
* FFN ranks' busy time (``experts`` + ``pack``), the same three ways;
* the waits: attention ranks blocked for results (``combine_wait`` + ``send_wait``), FFN
  ranks blocked for tokens (``dispatch_wait`` + ``send_wait``); predicted as the step less
  the rank's own work;
* what no section times (Python between the timed sections), not modelled.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from planner.errors import SpecError
from planner.run.check_run import Row, read_record

__all__ = ["AFD_RECORD_SCHEMA", "check_afd_record", "compare_afd", "load_afd_record",
           "read_record", "schema_of"]

AFD_RECORD_SCHEMA = "planner.afd-run-record/v1"


def _median(values: list[float]) -> float:
    values = values[1:] if len(values) > 1 else values
    return statistics.median(values) if values else 0.0


def _per_step(rank: dict[str, Any], *kinds: str) -> float:
    return _median([sum(s.get(k, 0.0) for k in kinds) for s in rank["steps"]])


def compare_afd(record: dict[str, Any], predicted: Any) -> list[Row]:
    """Predicted against measured (module docstring). ``predicted``: a
    ``planner.serving.afd_run_prediction.AfdRunPrediction`` (``step_s``,
    ``attention_busy_s``, ``ffn_busy_s``, ``attention_pack_s``, ``ffn_pack_s``,
    ``attention_wait_s``, ``ffn_wait_s``, ``micro_batches``, ``moe_layers``)."""
    ranks = record["rank_timings"]
    att = [r for r in ranks if r["role"] == "attention"]
    ffn = [r for r in ranks if r["role"] == "ffn"]
    per = predicted.micro_batches * predicted.moe_layers

    def worst(members: list[dict], *kinds: str) -> float:
        return max((_per_step(r, *kinds) for r in members), default=0.0)
    att_busy = worst(att, "attention", "pack")
    ffn_busy = worst(ffn, "experts", "pack")
    other = max((_per_step(r, "step") - _per_step(r, "attention", "experts", "pack",
                                                  "dispatch_wait", "combine_wait", "send_wait")
                 for r in ranks), default=0.0)
    return [
        Row("step", predicted.step_s, _median(list(record["step_times_max_s"]))),
        Row("attention ranks: busy (attention + pack)", predicted.attention_busy_s, att_busy),
        Row(f"  per micro-batch and MoE layer (/ {per})", predicted.attention_busy_s / per,
            att_busy / per),
        Row("  of which pack (building, posting messages)", predicted.attention_pack_s,
            worst(att, "pack")),
        Row("FFN ranks: busy (experts + pack)", predicted.ffn_busy_s, ffn_busy),
        Row(f"  per micro-batch and MoE layer (/ {per})", predicted.ffn_busy_s / per,
            ffn_busy / per),
        Row("  of which pack (posting receives and results)", predicted.ffn_pack_s,
            worst(ffn, "pack")),
        Row("attention ranks: combine wait (+ send wait)", predicted.attention_wait_s,
            worst(att, "combine_wait", "send_wait")),
        Row("FFN ranks: dispatch wait (+ send wait)", predicted.ffn_wait_s,
            worst(ffn, "dispatch_wait", "send_wait")),
        Row("untimed Python between sections (not modelled)", None, max(0.0, other)),
    ]


def check_afd_record(record: dict[str, Any], source: str) -> None:
    """Raise a SpecError naming the first field a comparable AFD run record lacks."""
    if not isinstance(record, dict) or record.get("schema") != AFD_RECORD_SCHEMA:
        raise SpecError(source, "schema", f"an AFD run record ('{AFD_RECORD_SCHEMA}', written "
                        "by 'planner launch AFD_PLAN --record' or planner.run.afd_job --out)",
                        record.get("schema") if isinstance(record, dict) else None)
    for key, what in (("shape", "the AFD job's model and batch"),
                      ("config", "the attention and FFN ranks"),
                      ("rank_timings", "per-rank timings"),
                      ("step_times_max_s", "per-step times")):
        if key not in record:
            raise SpecError(source, key, what)
    if not record["step_times_max_s"]:
        raise SpecError(source, "step_times_max_s", "at least one decode step", 0)




def schema_of(path: Path) -> str | None:
    """The ``schema`` of the JSON object at ``path``; None when it is none (the loaders then
    say what is wrong)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record.get("schema") if isinstance(record, dict) else None


def load_afd_record(path: Path) -> dict[str, Any]:
    """The AFD run record at ``path``, checked (:func:`check_afd_record`)."""
    record = read_record(path)
    check_afd_record(record, str(path))
    return record
