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
