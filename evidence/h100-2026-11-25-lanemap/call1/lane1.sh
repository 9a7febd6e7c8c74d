#!/usr/bin/env bash
# Lane-map experiment: kernel_compare (bits + timing) and ncu shared-memory wavefronts/stalls.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
date -u +%FT%TZ | tee $OUT/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv | tee $OUT/gpu.csv
SH=4096x4096x4096,1024x1024x1024,64x4096x4096,256x1024x4096,2048x2048x2048
SP=unprotected/fma,ones/T/fma,twos/M/fma,ones/M/fma
for lm in 1 2; do
  echo "== LANE_MAP=$lm"
  timeout 200 python3 scripts/kernel_compare.py .device/mmm_head.cu --warm -D LANE_MAP=$lm --shapes $SH --specs $SP --json $OUT/lm$lm.json 2>&1 | grep -v "warning\|Remark" | tee $OUT/lm$lm.txt
done
M='l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active'
for lm in 1 2; do
  echo "== ncu LANE_MAP=$lm (launch 1 = new, launch 2 = HEAD)"
  timeout 150 ncu -k regex:safemon_mmm --launch-count 2 --metrics "$M,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    python3 scripts/kernel_compare.py .device/mmm_head.cu -D LANE_MAP=$lm --shapes 4096x4096x4096 --specs unprotected/fma --repeats 1 > $OUT/ncu_lm$lm.txt 2>&1
  grep -E "safemon_mmm|wavefronts|shared_ld|conflicts|issue_active|duration|inst_executed.sum|fma_cycles|stalled_(barrier|short|mio|long|not_sel|math|wait|dispatch|no_inst|lg)" $OUT/ncu_lm$lm.txt | head -60
done
