#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
R=/tmp/final12; rm -rf $R; mkdir -p $R; trap 'tar -czf $OUT/final12.tgz -C $R .' EXIT
date -u +%FT%TZ | tee $R/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $R/gpu.csv
timeout 330 python3 scripts/kernel_compare.py .device/mmm_head.cu --warm \
  --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024,512x4096x4096,64x4096x4096,256x1024x4096,32x4096x4096 \
  --specs unprotected/fma,ones/T/fma,ones/M/fma,twos/M/fma,twos/T/fma,crc32c/T/fma,fletcher/T/fma,ones/F/fma,unprotected/exact \
  --json $R/final.json 2>&1 | grep -v "warning\|Remark\|^compiled" > $R/final.txt
tail -1 $R/final.txt
rm -rf /tmp/safemon-split-out; bash scripts/split-gpu bench > $R/bench.log 2>&1; tar -xzf $OUT/split-bench.tgz -C $R; rm -f $OUT/split-bench.tgz
M='smsp__inst_executed.sum,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum'
timeout 100 ncu -k regex:safemon_mmm --launch-count 2 --metrics "$M,regex:smsp__average_warps_issue_stalled_(dispatch_stall|not_selected|barrier|short_scoreboard|wait|math_pipe_throttle)_per_issue_active\.ratio" \
    python3 scripts/kernel_compare.py .device/mmm_head.cu --shapes 4096x4096x4096 --specs unprotected/fma --repeats 1 > $R/ncu_final.txt 2>&1
grep -E "safemon_mmm|stalled|issue_active|duration|inst_executed|wavefronts" $R/ncu_final.txt
