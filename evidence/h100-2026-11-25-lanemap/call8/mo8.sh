#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
date -u +%FT%TZ | tee $OUT/date.txt
SP=unprotected/fma,ones/T/fma,xor/F/fma,unprotected/exact
for mo in 2 1; do
  echo "== MAC_ORDER=$mo"
  timeout 200 python3 scripts/kernel_compare.py .device/mmm_lm.cu --warm -D MAC_ORDER=$mo --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024,64x4096x4096,256x1024x4096,32x4096x4096 --specs $SP --json $OUT/mo$mo.json 2>&1 | grep -v "warning\|Remark\|^compiled" | tee $OUT/mo$mo.txt
done
M='smsp__inst_executed.sum,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active'
timeout 120 ncu -k regex:safemon_mmm --launch-count 2 --metrics "$M,regex:smsp__average_warps_issue_stalled_(dispatch_stall|not_selected|barrier|short_scoreboard|wait|math_pipe_throttle)_per_issue_active\.ratio" \
    python3 scripts/kernel_compare.py .device/mmm_lm.cu -D MAC_ORDER=2 --shapes 4096x4096x4096 --specs unprotected/fma --repeats 1 > $OUT/ncu_mo2.txt 2>&1
grep -E "safemon_mmm|stalled|issue_active|duration|inst_executed" $OUT/ncu_mo2.txt
