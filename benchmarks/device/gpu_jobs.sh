#!/usr/bin/env bash
# A GPU session's check of the reference job on the GPU itself, run on the device machine from
# the repository root:  bash benchmarks/device/gpu_jobs.sh   (OUT: where results go)
# `planner calibrate --backend nccl` on the GPU, then the reference job's one-GPU plans in
# bf16 through `planner solve / launch / check-run` (benchmarks/gpu_executor_prediction.py),
# each plan launched twice, results written after every plan. Wheels for planner's
# dependencies that the machine lacks travel in .whl/ (env.sh).
. benchmarks/device/env.sh
record_machine
SECONDS=0
timeout "${GPU_JOBS_TIMEOUT:-480}" python3 benchmarks/gpu_executor_prediction.py --out "$OUT/gpu" \
    --runs "${RUNS:-2}" 2>&1 | tee "$OUT/gpu.log"
echo "gpu jobs: exit ${PIPESTATUS[0]}, ${SECONDS}s" | tee -a "$OUT/gpu.log"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv \
    >>"$OUT/machine.txt" 2>&1
# one file back (the device tool returns a limited number of files)
tar -czf "$OUT/gpu.tar.gz" -C "$OUT" gpu && rm -rf "$OUT/gpu"
