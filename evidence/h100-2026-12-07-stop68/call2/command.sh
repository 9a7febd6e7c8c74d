#!/usr/bin/env bash
# stop 68, call 2 (the final tree, whose runtime code is 84506a9's): the span probe's
# after-the-reply report at 80³ (inline, spin 5 ms, MPS), then scripts/stop-gpu with only
# the torch example (inline, spin 5 ms, MPS; call 1 ran bench vote --runtime six times)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=${OUT:-/tmp/o}; mkdir -p "$O"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv; echo "tree $(bash scripts/tree-digest)"; } | tee "$O/device.txt"
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >"$O/pip.log" 2>&1 || tail -3 "$O/pip.log"
(. scripts/mps.sh; mps_on && trap 'mps_off' EXIT && echo "MPS on"
 timeout 60 python3 scripts/span_probe.py --requests 300 --placement inline --spin-s 0.005 \
   --out /tmp/span-80 > "$O/span-80-mps.txt" 2>&1; echo "== span 80 rc=$?"; tail -9 "$O/span-80-mps.txt")
echo "span done at $SECONDS s"
OUT=$O MPS_AFTER_TESTS=1 BASE=. SPAN_LIMIT=9999 BASE_LIMIT=9999 TEST_LIMIT=9999 SPIN_LIMIT=9999 \
  FLOOR_LIMIT=9999 VOTE_LIMIT=9999 TORCH_LIMIT=150 TORCH_MODELS=transformer,cnn LAYER_BENCH=4096 \
  DEADLINE=$(( 240 - SECONDS )) bash scripts/stop-gpu 2>&1 | tail -45
echo "targets done at $SECONDS s"
echo "end at $SECONDS s"
