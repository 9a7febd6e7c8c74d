#!/usr/bin/env bash
# stop 67, call 1: gpu-suite rest (4 xdist workers, gpu_alone left out) then the new alone shard,
# then the gpu_alone test twice more by itself, printing how much came back
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=${OUT:-/tmp/o}; mkdir -p "$O"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv; echo "tree $(bash scripts/tree-digest)"; } | tee "$O/device.txt"
OUT=$O DEADLINE=400 XDIST_REST=4 bash scripts/gpu-suite rest alone 2>&1 | grep -E "^== |passed|failed|summary|selected|not passed" | head -16
echo "suite done at $SECONDS s"
for r in 1 2; do
  [ $SECONDS -lt 470 ] || break
  timeout 110 python3 -m pytest -q -rP -p no:randomly -p no:cacheprovider --basetemp=/tmp/bta$r -m gpu_alone tests/runtime/test_device_io_gpu.py > "$O/alone-$r.log" 2>&1
  echo "alone run $r rc=$? at $SECONDS s: $(grep -h 'came back' "$O/alone-$r.log" | head -1) $(tail -1 "$O/alone-$r.log")"
done
echo "end at $SECONDS s"
