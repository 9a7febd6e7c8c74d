#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
date -u +%FT%TZ | tee $OUT/date.txt
SH=128x4096x4096,256x4096x4096,256x1024x4096,512x1024x4096,512x4096x4096,1024x1024x1024,128x11008x4096,2048x2048x2048
T="auto,large@own,lm1:128x128x8/8x8akm1@own,w64at:64x128x8/4x8akm1@own,w64:64x128x8/4x8am1@own"
for v in unprotected ones/T; do
  echo "== $v"
  timeout 250 python3 scripts/rmt_tile_probe.py --no-rmt --variant $v --shapes $SH --tiles "$T" --json $OUT/tiles_${v//\//_}.json 2>&1 | grep -v "warning\|Remark" | tee $OUT/tiles_${v//\//_}.txt
done
