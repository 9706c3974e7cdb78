#!/usr/bin/env bash
# The GPU session's checks, run on the device machine from the repository root:
#   bash benchmarks/device/run.sh      (OUT: the folder results go to; default /tmp/device-out)
# 1. `planner calibrate --backend nccl` on every GPU (one process each): GEMM, FlashAttention,
#    a transformer block, HBM copies, decode GEMMs and decode attention in bf16;
# 2. whether two NCCL ranks can share one GPU (they cannot: the multi-rank NCCL jobs need a
#    GPU per rank);
# 3. the executor-prediction benchmark (gloo on CPU) pinned to two idle cores, once.
# Wheels for planner's dependencies that the machine lacks travel in .whl/ (env.sh).
. benchmarks/device/env.sh
record_machine

echo "=== 1. planner calibrate --backend nccl"
SECONDS=0
timeout 200 python3 -m planner calibrate --backend nccl --out "$OUT/calibration-nccl.json" \
    2>&1 | tee "$OUT/calibrate-nccl.log"
echo "calibrate: ${SECONDS}s"

echo "=== 2. two NCCL ranks on one GPU"
timeout 90 python3 -m torch.distributed.run --standalone --nproc-per-node=2 \
    benchmarks/device/nccl_probe.py >"$OUT/nccl-probe.log" 2>&1
echo "exit $?" >>"$OUT/nccl-probe.log"
grep -E "ok|Duplicate|rror|exit" "$OUT/nccl-probe.log" | head -8

if [ "${SKIP_EXECUTOR:-0}" != 1 ]; then
    echo "=== 3. executor prediction on two idle cores (gloo)"
    SECONDS=0
    timeout "${EXECUTOR_TIMEOUT:-300}" taskset -c 0,1 python3 benchmarks/executor_prediction.py \
        --repeats 1 2>&1 | tail -30 | tee "$OUT/executor.log"
    echo "executor: ${SECONDS}s"
    cp benchmarks/results/executor_prediction.json "$OUT/executor_prediction-idle2.json" 2>/dev/null
    cp benchmarks/results/calibration-local.json "$OUT/calibration-idle2.json" 2>/dev/null
fi
ls -la "$OUT"
