# Sourced by the device scripts (benchmarks/device/*.sh) from the repository root: $OUT made,
# the wheels of planner's dependencies that the device machine lacks (.whl/, carried by the
# device tool) installed into /tmp/site and put on PYTHONPATH with the checkout.
set -uo pipefail
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1

# The machine, its GPU and its software, to "$OUT/machine.txt" (and the terminal).
record_machine() {
    {
        date -u
        nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version \
            --format=csv
        nproc; uptime
        python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
              "nccl", torch.cuda.nccl.version())'
    } 2>&1 | tee "$OUT/machine.txt"
}
