#!/usr/bin/env bash
# benchmarks/executor_prediction.py on an idle many-core machine (the device tool's): three
# repetitions at once, each in its own copy of the repository on its own pair of cores
# (taskset), each calibrating its pair first. Results: $OUT/executor_prediction-repN.json and
# their calibrations. Run from the repository root: bash benchmarks/device/executor_reps.sh
. benchmarks/device/env.sh
CORES=${CORES:-"0,1 6,7 12,13"}
i=0
for pair in $CORES; do
    i=$((i + 1))
    rm -rf "/tmp/rep$i" && mkdir -p "/tmp/rep$i"
    tar --exclude=./.whl --exclude=./.git -cf - . | tar -xf - -C "/tmp/rep$i"
    (cd "/tmp/rep$i" && PYTHONPATH="${PYTHONPATH%%:*}:/tmp/rep$i" taskset -c "$pair" \
        timeout "${REP_TIMEOUT:-480}" python3 benchmarks/executor_prediction.py --repeats 1 \
        >"$OUT/executor-rep$i.log" 2>&1
     cp benchmarks/results/executor_prediction.json "$OUT/executor_prediction-rep$i.json"
     cp benchmarks/results/calibration-local.json "$OUT/calibration-rep$i.json") &
done
wait
uptime
tail -n 14 "$OUT"/executor-rep*.log
