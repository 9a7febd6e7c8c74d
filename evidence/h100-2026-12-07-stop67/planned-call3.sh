#!/usr/bin/env bash
# stop 67, call 3: the alone shard on the mended test, then the span probe (inline, spin 5 ms,
# MPS) for the MLP and 80³ with its new report of what the round does after the reply
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=${OUT:-/tmp/o}; mkdir -p "$O"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv; echo "tree $(bash scripts/tree-digest)"; } | tee "$O/device.txt"
OUT=$O DEADLINE=110 bash scripts/gpu-suite alone 2>&1 | grep -E "^== |passed|failed|selected" | head -6
echo "alone done at $SECONDS s"
. scripts/mps.sh
mps_on && trap 'mps_off' EXIT && echo "MPS on"
for a in "model --model 64x4096x4" "80 "; do
  set -- $a; tag=$1; shift
  [ $SECONDS -lt 150 ] || break
  timeout 80 python3 scripts/span_probe.py --requests 200 --placement inline --spin-s 0.005 --out /tmp/span-$tag "$@" > "$O/span-$tag-mps.txt" 2>&1
  echo "== span $tag rc=$?"; tail -12 "$O/span-$tag-mps.txt"
  tar -czf "$O/spans-$tag.tgz" -C /tmp/span-$tag spans
done
echo "end at $SECONDS s"
