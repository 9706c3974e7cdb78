"""Where the reference job runs (``--device``, ``--precision``): the CPU in fp32 unless every
process of the node has a GPU; a GPU request on a machine without one is refused before any
process group starts; the timers synchronise a GPU at every section's edges."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from planner.errors import PlannerError  # noqa: E402
from planner.run.reference_job.device import JobDevice, job_device  # noqa: E402
from planner.run.reference_job.timers import Timers  # noqa: E402

NO_GPU = not torch.cuda.is_available()
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not NO_GPU, reason="checks the choice on a machine without CUDA")
def test_auto_is_the_cpu_in_fp32_without_a_gpu():
    dev = job_device("auto", None, {"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    assert dev == JobDevice("cpu", "fp32")
    assert dev.backend == "gloo" and dev.dtype == torch.float32 and not dev.cuda


@pytest.mark.skipif(not NO_GPU, reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused_naming_the_option():
    with pytest.raises(PlannerError, match="--device cuda: backend 'nccl' needs CUDA"):
        job_device("cuda", None, {"LOCAL_WORLD_SIZE": "1"})


def test_precision_defaults_follow_the_device_and_can_be_set():
    assert job_device("cpu", "bf16", {}).dtype == torch.bfloat16
    gpu = JobDevice("cuda:1", "bf16")
    assert gpu.backend == "nccl" and gpu.cuda and gpu.dtype == torch.bfloat16
    with pytest.raises(PlannerError, match="--precision 'fp8'"):
        job_device("cpu", "fp8", {})


def test_timers_synchronise_at_both_edges_of_every_section_and_stay_exclusive():
    calls = []
    timers = Timers(lambda: calls.append(1))
    with timers.timed("forward"):
        with timers.timed("tp_comm"):
            pass
    assert len(calls) == 4  # two sections, each synchronised at start and end
    timers.end_step(1.0)
    step = timers.steps[0]
    assert step["forward"] >= 0 and step["tp_comm"] >= 0
    plain = Timers()  # the CPU job: no synchronisation at all
    with plain.timed("forward"):
        pass
    assert plain.sync is None


def test_auto_follows_a_plan_solved_on_a_gloo_calibration_to_the_cpu(tmp_path, monkeypatch):
    """A plan on a ``planner calibrate`` gloo cluster (devices of arch ``cpu``) runs on the
    CPU even where every process has a GPU; a plan on GPUs takes them."""
    import yaml
    from plan_helpers import solve_to
    from typer.testing import CliRunner

    from planner.cli.app import app
    from planner.plan.file import load_plan
    from planner.run import runtime
    from planner.run.reference_job.device import planned_on_cpus

    cluster = {"name": "local", "node_groups": [{
        "name": "local", "count": 1, "gpus_per_node": 4, "fabric": "host",
        "intra_bw_GBps": 1.0, "gpu": {"name": "AMD EPYC (1 thread)", "arch": "cpu",
                                      "memory_gb": 8, "memory_bw_GBps": 20,
                                      "peak_tflops": {"fp32": 0.1}}}]}
    path = tmp_path / "cpu.cluster.yaml"
    path.write_text(yaml.safe_dump(cluster))
    result = CliRunner().invoke(app, [
        "solve", "--cluster", str(path), "--model", str(ROOT / "benchmarks" / "data" /
                                                        "reference-gpt.yaml"),
        "--precision", "fp32", "--optimizer", "sgd", "--global-batch", "8", "--seq-len", "128",
        "--tp", "1", "--pp", "2", "--schedule", "1f1b", "--out", str(tmp_path / "cpu.json")])
    assert result.exit_code == 0, result.output
    on_cpus = load_plan(tmp_path / "cpu.json")
    on_gpus = load_plan(solve_to(tmp_path / "gpu.json", "--pp", "2"))
    assert planned_on_cpus(on_cpus) and not planned_on_cpus(on_gpus)
    monkeypatch.setattr(runtime, "node_backend", lambda requested, env: "nccl")
    env = {"LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": "2"}
    assert job_device("auto", None, env, planned_on_cpus(on_cpus)) == JobDevice("cpu", "fp32")
    assert job_device("auto", None, env, planned_on_cpus(on_gpus)) == JobDevice("cuda:2",
                                                                                "bf16")
