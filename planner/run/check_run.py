"""``planner check-run``: a run record's measured times against a prediction handed over by
the CLI (:func:`planner.training.run_prediction.predict_run`, a ``RunPrediction`` of plain
numbers); this module compares and reads records, and imports no cost model.

Measured figures are medians over the recorded steps after the first (start-up skew and
one-off allocations land in step 0), per rank, then per stage the slowest of its ranks:

* step: the slowest rank's step time;
* per stage: compute (forward + backward over all micro-batches, communication excluded),
  TP all-reduces, EP all-to-all + count all-gather, and the pipeline wait (time blocked on
  receives: bubble + transfers). Its prediction is the step minus everything the stage does
  itself, i.e. the time the model says the stage sits idle or transfers;
* DP gradient all-reduce and the optimizer step (the slowest stage's).
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import SpecError
from planner.run.calibrate import LOAD_WARN, oversubscribed, probe_times

__all__ = ["Row", "check_record", "compare", "condition_warnings", "link_ratio", "load_record",
           "rank_imbalance", "run_warnings", "speed_ratio"]


@dataclass(frozen=True)
class Row:
    """One compared quantity (seconds per step)."""

    what: str
    predicted_s: float | None
    measured_s: float

    @property
    def error(self) -> float | None:
        if self.predicted_s is None or self.measured_s <= 0:
            return None
        return self.predicted_s / self.measured_s - 1.0


def _median_steps(steps: list[dict[str, float]], kind: str) -> float:
    values = [s.get(kind, 0.0) for s in (steps[1:] if len(steps) > 1 else steps)]
    return statistics.median(values) if values else 0.0


def compare(record: dict[str, Any], predicted: Any) -> list[Row]:
    """Predicted against measured, step first, then per stage, then DP and optimizer.

    ``predicted``: a ``planner.training.run_prediction.RunPrediction`` (plain numbers: the
    step's ``step_s``, ``dp_comm_s``, ``dp_comm_total_s``, ``optimizer_s``, the degrees, and
    per stage ``layers``, ``compute_s``, ``recompute_s``, ``tp_comm_s``, ``ep_comm_s``,
    ``quota_solve_s``)."""
    ranks = record["rank_timings"]
    shape = record["shape"]  # per-stage rows: the busiest DP replica's micro-batches
    m = max(shape.get("replica_micro_batches") or [shape["micro_batches"]])
    rows = [Row("step", predicted.step_s, _median_steps([{"step": x} for x in record["step_times_max_s"]],
                                                "step"))]
    by_stage: dict[int, list[dict]] = {}
    for r in ranks:
        by_stage.setdefault(r["stage"], []).append(r)
    for s, stage in enumerate(predicted.stages):
        members = by_stage.get(s, [])

        def worst(kind: str, members=members) -> float:
            return max((_median_steps(r["steps"], kind) for r in members), default=0.0)
        compute = max((_median_steps(r["steps"], "forward") + _median_steps(r["steps"], "backward")
                       for r in members), default=0.0)
        own = m * (stage.compute_s + stage.recompute_s + stage.tp_comm_s + stage.ep_comm_s
                   + stage.quota_solve_s)
        rows.append(Row(f"stage {s}: compute ({stage.layers} layers)", m * stage.compute_s, compute))
        if predicted.tp > 1:
            rows.append(Row(f"stage {s}: TP all-reduce", m * stage.tp_comm_s, worst("tp_comm")))
        if predicted.ep > 1 and stage.ep_comm_s > 0:
            rows.append(Row(f"stage {s}: EP all-to-all", m * stage.ep_comm_s, worst("ep_comm")))
            rows.append(Row(f"stage {s}: EP dispatch bookkeeping (quota solve)",
                            m * stage.quota_solve_s, worst("quota_solve")))
        if predicted.pp > 1:
            idle = max(0.0, predicted.step_s - own - predicted.dp_comm_s
                       - predicted.optimizer_s)
            rows.append(Row(f"stage {s}: pipeline wait (bubble + transfers)", idle,
                            worst("pp_wait")))
    if predicted.dp > 1:
        rows.append(Row("DP gradient all-reduce", predicted.dp_comm_total_s,
                        max(_median_steps(r["steps"], "dp_comm") for r in ranks)))
    rows.append(Row("optimizer step", predicted.optimizer_s,
                    max(_median_steps(r["steps"], "optimizer") for r in ranks)))
    return rows


def check_record(record: dict[str, Any], source: str) -> None:
    """Raise a SpecError naming the first field a comparable run record lacks."""
    if not isinstance(record, dict) or record.get("schema") != "planner.run-record/v1":
        raise SpecError(source, "schema", "a run record ('planner.run-record/v1', written by "
                        "'planner launch --record' or the reference job's --out)",
                        record.get("schema") if isinstance(record, dict) else None)
    for key, what in (("plan", "the plan the job ran"),
                      ("shape", "the reference job's model and batch"),
                      ("rank_timings", "per-rank timings (the reference job writes them)"),
                      ("step_times_max_s", "per-step times")):
        if key not in record:
            raise SpecError(source, key, what + "; a user script's launch record has none")


def read_record(path: Path) -> dict[str, Any]:
    """The JSON object at ``path`` (any run record); SpecError when it is no JSON object."""
    if not path.is_file():
        raise SpecError(str(path), "", "an existing run record JSON file")
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise SpecError(f"{path}:{err.lineno}", "", f"valid JSON ({err.msg})") from None
    if not isinstance(record, dict):
        raise SpecError(str(path), "", "a run record: a JSON object with a 'schema'",
                        type(record).__name__)
    return record


def load_record(path: Path) -> dict[str, Any]:
    """The run record at ``path``, checked (:func:`check_record`); SpecError otherwise."""
    record = read_record(path)
    check_record(record, str(path))
    return record


RANK_IMBALANCE_WARN = 1.15  # slowest over fastest compute among ranks doing the same work


def rank_imbalance(record: dict[str, Any]) -> tuple[float, int] | None:
    """(slowest over fastest rank's compute, the stage) among the ranks of one pipeline
    stage, which run the same layers on as many tokens (DP replicas, TP and EP peers): the
    median over steps 2.. of each rank's forward + backward; the stage where they differ most.
    None when no stage has two ranks. Where it is well above 1 the ranks' cores ran at
    different speeds, and the step waited for the slowest."""
    by_stage: dict[int, list[float]] = {}
    for r in record["rank_timings"]:
        compute = _median_steps(r["steps"], "forward") + _median_steps(r["steps"], "backward")
        by_stage.setdefault(r["stage"], []).append(compute)
    worst = None
    for stage, times in sorted(by_stage.items()):
        if len(times) > 1 and min(times) > 0:
            ratio = max(times) / min(times)
            if worst is None or ratio > worst[0]:
                worst = (ratio, stage)
    return worst


def run_warnings(record: dict[str, Any]) -> list[str]:
    """What in the run itself makes a prediction miss: ranks doing the same work at
    different speeds (:func:`rank_imbalance` above :data:`RANK_IMBALANCE_WARN`)."""
    found = rank_imbalance(record)
    if found is None or found[0] <= RANK_IMBALANCE_WARN:
        return []
    ratio, stage = found
    return [f"ranks doing the same work computed at different speeds: on stage {stage} the "
            f"slowest took {ratio:.2f}x the fastest's time (median forward + backward per "
            "step); the step waits for the slowest, the prediction assumes the calibration's "
            "median core"]


SPEED_RATIO_WARN = 1.05  # the run's speed probe over the calibration's, either way
# the run's link probe over the calibration's, either way: on the 2-vCPU box the probe repeats
# within 1.08x while the link keeps one speed, and moves 1.9x when it changes (6.3 and 11.8 ms;
# planner.run.speed_probe, docs/runtime.md)
LINK_RATIO_WARN = 1.15


def _probe_median_s(conditions: dict, key: str = "speed_probe_s") -> float | None:
    """The median of every rank's probe (``key``), before and after (:func:`probe_times`)."""
    times = probe_times(conditions, key)
    values = [v for when in times or () for v in when if v > 0]
    return statistics.median(values) if values else None


def speed_ratio(calibrated: dict, run: dict) -> float | None:
    """How long the run's machine took for the speed probe (:mod:`planner.run.speed_probe`,
    every rank's median call before and after the steps) over how long the calibration's took
    (at its start and end), medians of both: above 1 the machine computed slower than when it
    was calibrated. ``calibrated``: a calibration's ``conditions``; ``run``: a run record's
    ``environment``. None where either lacks the probe (files written before it)."""
    cal_s, run_s = _probe_median_s(calibrated), _probe_median_s(run)
    return run_s / cal_s if cal_s and run_s else None


def link_ratio(calibrated: dict, run: dict) -> float | None:
    """:func:`speed_ratio` of the link probe (one all-reduce over every rank,
    :func:`planner.run.speed_probe.probe_link_ranks_s`): above 1 the run's collectives moved
    bytes slower than the calibration's did. None where either lacks it."""
    cal_s, run_s = (_probe_median_s(calibrated, "link_probe_s"),
                    _probe_median_s(run, "link_probe_s"))
    return run_s / cal_s if cal_s and run_s else None


def condition_warnings(calibrated: dict, run: dict, shared_model: str | None = None) -> list[str]:
    """How the run's conditions differ from the calibration's, each a reason its prediction
    may miss: ``calibrated`` is a calibration's ``conditions`` (``planner calibrate``),
    ``run`` a run record's ``environment``. Either may lack fields (older files): only what
    both say is compared. ``shared_model``: how the prediction shares the cores where the
    run's processes outnumbered them (the AFD job's pinned ranks), None where it does not."""
    out = []

    def both(key):
        return calibrated.get(key), run.get(key)

    for key, what in (("backend", "backend"), ("torch", "torch version")):
        a, b = both(key)
        if a and b and a != b:
            out.append(f"the run used {what} {b}, the calibration {a}")
    cal_cores, run_cores = both("cores")
    if cal_cores and run_cores and cal_cores != run_cores:
        out.append(f"the run had {run_cores} cores, the calibration {cal_cores}")
    cal_pinned, run_pinned = both("pinned")
    if cal_pinned is not None and run_pinned is not None and cal_pinned != run_pinned:
        yes_no = {True: "pinned to cores of their own", False: "not pinned"}
        out.append(f"the run's ranks were {yes_no[run_pinned]}, the calibration's "
                   f"{yes_no[cal_pinned]} (planner.run.affinity)")
    procs, threads = run.get("processes"), run.get("threads")
    crowded = run_cores and procs and threads and oversubscribed(
        run.get("backend", "gloo"), procs, threads, run_cores)
    if crowded and shared_model:
        out.append(f"the run had {procs} processes on {run_cores} cores; the prediction "
                   f"models them {shared_model}, a model of this machine's scheduler, less sure "
                   "than a core per rank")
    elif crowded:
        out.append(f"the run had {crowded}; the prediction does not model that")
    cal_threads = calibrated.get("threads")
    if cal_threads and threads and cal_threads != threads:
        out.append(f"the run's processes had {threads} thread(s) each, the calibration's "
                   f"{cal_threads}")
    for who, cond in (("the run", run), ("the calibration", calibrated)):
        other, cores = cond.get("other_load_cores"), cond.get("cores")
        if other is not None and cores and other > LOAD_WARN * cores:
            out.append(f"other processes kept {other:.2f} of {cores} cores busy during "
                       f"{who}")
    # with more processes than cores the run's probes were time-shared, not the machine's speed
    probes = ((speed_ratio(calibrated, run), SPEED_RATIO_WARN,
               "speed probe (one block's forward and backward, planner.run.speed_probe)",
               "it computed {} than when it was calibrated, and the prediction assumes the "
               "calibration's speed"),
              (link_ratio(calibrated, run), LINK_RATIO_WARN,
               "link probe (one all-reduce over every rank, planner.run.speed_probe)",
               "its collectives moved bytes {} than when it was calibrated, and the prediction "
               "prices them at the calibration's speed"))
    for ratio, warn, probe, effect in probes:
        if not crowded and ratio is not None and not 1 / warn <= ratio <= warn:
            out.append(f"the machine took {ratio:.2f}x the calibration's time for the {probe}: "
                       + effect.format("slower" if ratio > 1 else "faster"))
    return out
