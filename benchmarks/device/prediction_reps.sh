#!/usr/bin/env bash
# The prediction benchmarks of issues 19 and 23 on the device machine's idle CPUs, several
# independent runs at once, each in its own copy of the repository, pinned (taskset) to its own
# set of physical cores (one logical CPU per core: hyperthread siblings are left out), each
# calibrating its own cores first:
#   - benchmarks/executor_prediction.py $EXEC_ARGS (default --repeats 1 --runs 1; EXEC_RUNS
#     copies, default 3, on EXEC_CORES cores each, default 2: the plans' 2 processes)
#   - benchmarks/afd_executor_prediction.py --repeats 3 --quiet-wait 0 (AFD_RUNS copies, default 2,
#     on AFD_CORES cores each, default 2; with 3 or more the 3-process plans get a core per rank;
#     the other runs are known load, so its "other processes' CPU" re-run rule is off)
# Before them, alone: `planner calibrate --backend nccl` on the GPU (skip: SKIP_GPU=1).
# Everything lands in $OUT/prediction_reps.tar.gz (logs, result JSONs, calibrations, every
# run's per-rank record) plus
# $OUT/machine.txt. Run from the repository root: bash benchmarks/device/prediction_reps.sh
. benchmarks/device/env.sh
EXEC_RUNS=${EXEC_RUNS:-3}
AFD_RUNS=${AFD_RUNS:-2}
EXEC_CORES=${EXEC_CORES:-2}
AFD_CORES=${AFD_CORES:-2}
EXEC_ARGS=${EXEC_ARGS:---repeats 1 --runs 1}
STAGE=/tmp/prediction_reps
rm -rf "$STAGE" && mkdir -p "$STAGE"
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv
    lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node|MHz"
    uptime
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} >"$OUT/machine.txt" 2>&1

# one logical CPU per physical core, in order
PHYS=$(python3 - <<'EOF'
import glob, re
seen, first = set(), []
paths = glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list")
for path in sorted(paths, key=lambda p: int(re.search(r"cpu(\d+)/", p).group(1))):
    sib = open(path).read().strip()
    if sib not in seen:
        seen.add(sib)
        first.append(re.search(r"cpu(\d+)/", path).group(1))
print(" ".join(first))
EOF
)
echo "physical cores (one logical CPU each): $PHYS" | tee -a "$OUT/machine.txt"
read -r -a CORES <<<"$PHYS"

if [ "${SKIP_GPU:-0}" != 1 ]; then
    SECONDS=0
    timeout 150 taskset -c "${CORES[-1]}" python3 -m planner calibrate --backend nccl \
        --out "$STAGE/calibration-nccl.json" >"$STAGE/calibrate-nccl.log" 2>&1
    echo "gpu calibrate: exit $?, ${SECONDS}s" | tee -a "$OUT/machine.txt"
fi

copy_repo() {
    rm -rf "$1" && mkdir -p "$1"
    tar --exclude=./.whl --exclude=./.git -cf - . | tar -xf - -C "$1"
}
JOBS=()
for i in $(seq 1 "$EXEC_RUNS"); do JOBS+=("exec$i"); done
for i in $(seq 1 "$AFD_RUNS"); do JOBS+=("afd$i"); done
next=0
SECONDS=0
for job in "${JOBS[@]}"; do
    case $job in exec*) n=$EXEC_CORES ;; *) n=$AFD_CORES ;; esac
    if [ $((next + n)) -gt "${#CORES[@]}" ]; then
        echo "no cores left for $job" | tee -a "$OUT/machine.txt"; continue
    fi
    pair=$(IFS=,; echo "${CORES[*]:$next:$n}")
    next=$((next + n))
    dir="/tmp/$job"
    copy_repo "$dir"
    rm -f "$dir"/benchmarks/results/{executor_prediction,calibration-local,afd_executor_prediction,afd-calibration-local}.json
    echo "$job on cores $pair" | tee -a "$OUT/machine.txt"
    case $job in
    exec*)
        (cd "$dir" && PYTHONPATH="${PYTHONPATH%%:*}:$dir" taskset -c "$pair" \
            timeout "${JOB_TIMEOUT:-420}" python3 benchmarks/executor_prediction.py $EXEC_ARGS \
            >"$STAGE/$job.log" 2>&1
         cp benchmarks/results/executor_prediction.json "$STAGE/$job-executor_prediction.json"
         cp benchmarks/results/calibration-local.json "$STAGE/$job-calibration.json"
         tar -czf "$STAGE/$job-runs.tar.gz" -C benchmarks/results executor_prediction_runs) &
        ;;
    afd*)
        (cd "$dir" && PYTHONPATH="${PYTHONPATH%%:*}:$dir" taskset -c "$pair" \
            timeout "${JOB_TIMEOUT:-420}" python3 benchmarks/afd_executor_prediction.py \
            --repeats 3 --quiet-wait 0 --max-external-cpu 1e9 >"$STAGE/$job.log" 2>&1
         cp benchmarks/results/afd_executor_prediction.json "$STAGE/$job-afd_executor_prediction.json"
         cp benchmarks/results/afd-calibration-local.json "$STAGE/$job-calibration.json"
         tar -czf "$STAGE/$job-runs.tar.gz" -C benchmarks/results afd_executor_prediction_runs) &
        ;;
    esac
done
wait
echo "cpu jobs: ${SECONDS}s" | tee -a "$OUT/machine.txt"
uptime >>"$OUT/machine.txt"
tar -czf "$OUT/prediction_reps.tar.gz" -C "$STAGE" .
for f in "$STAGE"/*.log; do echo "== $f"; tail -n 16 "$f"; done
