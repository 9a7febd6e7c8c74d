#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
R=/tmp/final15; rm -rf $R; mkdir -p $R; trap 'tar -czf $OUT/final15.tgz -C $R .' EXIT
date -u +%FT%TZ | tee $R/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $R/gpu.csv
timeout 120 python3 scripts/kernel_compare.py .device/mmm_head.cu --warm \
  --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024,64x4096x4096 \
  --specs unprotected/fma,ones/T/fma,ones/M/fma,twos/M/fma,xor/M/fma,ones/E/fma,ones/I/fma \
  --json $R/final.json 2>&1 | grep -v "warning\|Remark\|^compiled" > $R/final.txt
tail -1 $R/final.txt
rm -rf /tmp/safemon-split-out; bash scripts/split-gpu bench > $R/bench.log 2>&1; tar -xzf $OUT/split-bench.tgz -C $R; rm -f $OUT/split-bench.tgz
sed -n '/### Overhead/,/### API/p' $R/bench.md
rm -rf /tmp/safemon-split-out; KERNEL_FILES="$(ls tests/kernels/test_gpu_*.py | tr '\n' ' ')" KERNELS_LIMIT=310 REST_LIMIT=115 bash scripts/split-gpu kernels rest 2>&1 | grep -E "passed|failed|error|==" 
tar -xzf $OUT/split-kernels-rest.tgz -C $R; rm -f $OUT/split-kernels-rest.tgz
