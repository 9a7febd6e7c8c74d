#!/usr/bin/env bash
set -uo pipefail
OUT=${OUT:-/tmp/safemon-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
{ date -u +%FT%TZ; echo "tree $(bash scripts/tree-digest)"; } | tee "$OUT/device.txt"
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >"$OUT/pip.log" 2>&1 || echo "wheel install failed"
timeout 200 python3 -m pytest -m gpu -v -p no:cacheprovider -p no:randomly tests/runtime/test_device_io_gpu.py tests/runtime/test_inline_gpu.py > "$OUT/tests.log" 2>&1
echo "rc=$?"; grep -E "PASSED|FAILED|ERROR" "$OUT/tests.log" | sed 's/ \[.*//' | tail -20; tail -1 "$OUT/tests.log"
