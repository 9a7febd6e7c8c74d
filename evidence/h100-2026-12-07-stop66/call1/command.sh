#!/usr/bin/env bash
# stop 66: gpu-suite rest on the slot-stride fix, then the torch example's GPU test twice more
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=${OUT:-/tmp/o}; mkdir -p "$O"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv; echo "tree $(bash scripts/tree-digest)"; git log --oneline -1 2>/dev/null; } | tee "$O/device.txt"
OUT=$O DEADLINE=330 XDIST_REST=4 bash scripts/gpu-suite rest 2>&1 | tail -25
echo "rest done at $SECONDS s"
for r in $( [ $SECONDS -lt 340 ] && echo 1; [ $SECONDS -lt 300 ] && echo 2 ); do
  timeout 110 python3 -m pytest -q -p no:randomly -p no:cacheprovider --basetemp=/tmp/bt$r tests/torch/test_example.py tests/runtime/test_device_io_gpu.py -k "cuda or slot_stride" > "$O/example-$r.log" 2>&1; echo "run $r rc=$? at $SECONDS s"
  grep -E "FAILED|DisagreementError|passed|failed" "$O/example-$r.log" | head -3
done
echo "end at $SECONDS s"
