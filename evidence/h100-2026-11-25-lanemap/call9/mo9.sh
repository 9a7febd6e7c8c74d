#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
R=/tmp/mo9; mkdir -p $R; trap 'tar -czf $OUT/mo9.tgz -C $R .' EXIT
date -u +%FT%TZ | tee $R/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $R/gpu.csv
kc() { # name timeout args...
  local name=$1 lim=$2; shift 2
  echo "== $name: $*"
  timeout $lim python3 scripts/kernel_compare.py .device/mmm_lm.cu --warm "$@" --json $R/$name.json 2>&1 | grep -v "warning\|Remark\|^compiled" | tee $R/$name.txt
}
kc mo1_all 330 -D MAC_ORDER=1 --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024,512x4096x4096,64x4096x4096,256x1024x4096,32x4096x4096,1x4096x4096,80x80x80,97x61x113 --specs unprotected/fma,ones/T/fma,ones/M/fma,twos/M/fma,ones/I/fma,xor/F/fma,unprotected/exact
kc mo3_large 90 -D MAC_ORDER=3 --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024 --specs unprotected/fma,ones/T/fma,ones/M/fma,twos/M/fma
kc mo1lm1_large 90 -D MAC_ORDER=1 -D LANE_MAP=1 --tile large --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024 --specs unprotected/fma,ones/T/fma,ones/M/fma,twos/M/fma
