#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
mkdir -p /tmp/kc && cd /tmp/kc && cd - >/dev/null
date -u +%FT%TZ | tee /tmp/kc/date.txt
SP=unprotected/fma,ones/T/fma,ones/M/fma,twos/M/fma,unprotected/exact
timeout 200 python3 scripts/kernel_compare.py .device/mmm_head.cu --warm --shapes 32x4096x4096,18x230400x64,16x4096x1024,64x4096x4096,256x1024x4096,64x1024x1024,64x11008x4096 --specs $SP --json /tmp/kc/final.json 2>&1 | grep -v "warning\|Remark\|^compiled" | tee /tmp/kc/final.txt
tar -czf $OUT/kc.tgz -C /tmp/kc .
REST_LIMIT=330 bash scripts/split-gpu rest
