#!/usr/bin/env bash
set -uo pipefail
FINAL=${OUT:-/tmp/safemon-out}; mkdir -p "$FINAL"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
{ date -u +%FT%TZ; echo "tree $(bash scripts/tree-digest)"; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv; } | tee "$FINAL/device.txt"
t0=$SECONDS
DEADLINE=440 bash scripts/gpu-suite rest 2>&1 | tail -8
echo "suite $((SECONDS - t0)) s"
t0=$SECONDS
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -p no:randomly tests/kernels/test_gpu_splitk.py -k "protected_weight or reused_status" > "$FINAL/splitk.log" 2>&1
echo "splitk rc=$? $((SECONDS - t0)) s"; tail -2 "$FINAL/splitk.log"
