#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
date -u +%FT%TZ | tee $OUT/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv | tee $OUT/gpu.csv
SP=unprotected/fma,ones/T/fma,ones/M/fma,twos/M/fma,unprotected/exact
kc() { # name tile map shapes
  echo "== $1: --tile $2 LANE_MAP=$3"
  timeout 150 python3 scripts/kernel_compare.py .device/mmm_head.cu --warm --tile $2 -D LANE_MAP=$3 --shapes $4 --specs $SP --json $OUT/$1.json 2>&1 | grep -v "warning\|Remark\|^compiled" | tee $OUT/$1.txt
}
kc small2 small 2 80x80x80,97x61x113,256x256x256,128x128x2048
kc skinny1 skinny 1 1x4096x4096,8x4096x4096,1x11008x4096,3x1000x777
kc wide1 wide 1 32x4096x4096,18x230400x64,16x4096x1024,32x1024x1024
kc wide2 wide 2 32x4096x4096,18x230400x64,16x4096x1024,32x1024x1024
kc wide64p1 wide64 1 64x1024x1024,128x512x4096,64x4096x4096
kc large1 large 1 4096x4096x4096,1024x1024x1024,512x4096x4096
