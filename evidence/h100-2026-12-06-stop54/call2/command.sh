#!/usr/bin/env bash
set -uo pipefail
FINAL=${OUT:-/tmp/safemon-out}; mkdir -p "$FINAL"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
{ date -u +%FT%TZ; echo "tree $(bash scripts/tree-digest)"; nvidia-smi --query-gpu=name,driver_version,compute_mode,clocks.sm,clocks.max.sm --format=csv; } | tee "$FINAL/device.txt"
t0=$SECONDS
DEADLINE=380 bash scripts/gpu-suite rest 2>&1 | tail -15
echo "suite $((SECONDS - t0)) s"
t0=$SECONDS
OUT=$FINAL timeout 170 python3 scripts/ecc_mlp_probe.py --rounds 4 --reps 20 > "$FINAL/ecc-mlp.md" 2> "$FINAL/ecc-mlp.err"
echo "probe rc=$? $((SECONDS - t0)) s"; cat "$FINAL/ecc-mlp.md"; tail -3 "$FINAL/ecc-mlp.err"
