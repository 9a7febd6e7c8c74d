#!/usr/bin/env bash
# stop 66, call 4: the final tree's gpu-suite rest, then the torch example's GPU test twice more,
# each time beside two other GPU test processes (the load under which stop 64's race showed)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=${OUT:-/tmp/o}; mkdir -p "$O"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv; echo "tree $(bash scripts/tree-digest)"; } | tee "$O/device.txt"
OUT=$O DEADLINE=250 XDIST_REST=4 bash scripts/gpu-suite rest 2>&1 | grep -E "^== rest|passed|failed|summary|selected" | head -8
echo "rest done at $SECONDS s"
for r in 1 2; do
  [ $r = 1 ] || [ $SECONDS -lt 250 ] || break
  [ $SECONDS -lt 430 ] || break
  pt() { timeout 120 python3 -m pytest -q -p no:randomly -p no:cacheprovider --basetemp=/tmp/bt$r-$1 "${@:2}" > "$O/load-$r-$1.log" 2>&1; echo "round $r $1 rc=$? $(tail -1 "$O/load-$r-$1.log")"; }
  pt example tests/torch/test_example.py -k cuda &
  pt io -m gpu tests/runtime/test_device_io_gpu.py &
  pt inline -m gpu tests/runtime/test_inline_gpu.py -k "bit_exact or outvoted" &
  wait
  grep -h "DisagreementError" "$O"/load-$r-*.log | head -3
done
echo "end at $SECONDS s"
