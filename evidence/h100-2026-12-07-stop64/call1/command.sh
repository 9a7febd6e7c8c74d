#!/usr/bin/env bash
# stop 64: the whole gpu suite on the final tree (rest first, then the kernels' shards)
set -u
export PYTHONUNBUFFERED=1
O=${OUT:-/tmp/o}; mkdir -p "$O"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode,clocks.sm,clocks.max.sm --format=csv; echo "tree $(bash scripts/tree-digest)"; } | tee "$O/device.txt"
OUT=$O DEADLINE=$(( ${END:-560} - SECONDS )) XDIST_REST=${XDIST_REST:-4} bash scripts/gpu-suite rest kernels-main kernels-other 2>&1 | tail -40
echo "end at $SECONDS s"
