#!/usr/bin/env bash
# stop 66, call 3: the three placements on one GPU on today's tree (issue 16, item 4), with MPS
# on and off, spin 5 ms; then the span probe at 80³ and for the MLP (inline, spin 5 ms, MPS)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=${OUT:-/tmp/o}; mkdir -p "$O"
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl > "$O/pip.log" 2>&1 || tail -3 "$O/pip.log"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode,clocks.sm,clocks.max.sm --format=csv; echo "tree $(bash scripts/tree-digest)"; } | tee "$O/device.txt"
. scripts/mps.sh
vote() {  # tag
  local t0=$SECONDS
  SAFEMON_TIMING__SPIN_S=0.005 timeout 200 python3 -m safemon bench vote --runtime --backend cupy \
    --sizes 80x80x80,1024x1024x64 --requests 200 --warmup 10 --model 64x4096x4 --model-requests 20 \
    --placements process,stream,inline --paths cuda-ipc --json "$O/vote-$1.json" --markdown "$O/vote-$1.md" > "$O/vote-$1.log" 2>&1
  echo "== vote $1 rc=$? $(( SECONDS - t0 )) s"; grep -E "^\| (process|stream|inline)" "$O/vote-$1.md" | head -24
}
mps_on && trap 'mps_off' EXIT && echo "MPS on"
vote mps
for a in "80 " "model --model 64x4096x4"; do
  set -- $a; tag=$1; shift
  [ $SECONDS -lt 420 ] || break
  timeout 60 python3 scripts/span_probe.py --requests 200 --placement inline --spin-s 0.005 "$@" > "$O/span-$tag-mps.txt" 2>&1
  echo "== span $tag rc=$?"; cat "$O/span-$tag-mps.txt" | head -30
done
mps_off; echo "MPS off"
[ $SECONDS -lt 380 ] && vote nomps
echo "end at $SECONDS s"
