#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
R=/tmp/m13; rm -rf $R; mkdir -p $R; trap 'tar -czf $OUT/m13.tgz -C $R .' EXIT
date -u +%FT%TZ | tee $R/date.txt
timeout 250 python3 scripts/kernel_compare.py .device/mmm_ca6.cu --warm --tile large -D LANE_MAP=1 -D MAC_ORDER=1 \
  --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024 --specs twos/M/fma,ones/M/fma,xor/M/fma,twos/E/fma,ones/E/fma \
  --json $R/m13.json 2>&1 | grep -v "warning\|Remark\|^compiled" | tee $R/m13.txt
