python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv; date -u
KC="python3 scripts/kernel_compare.py .device/mmm_head.cu --baseline-include .device --warm"
timeout 200 $KC --shapes 1x4096x4096,8x4096x4096,1x11008x4096,1x5120x5120,3x1000x777,5x1001x333 --specs unprotected/fma,ones/T/fma,ones/M/fma,ones/I/fma,unprotected/exact --json $OUT/skinny.json > $OUT/skinny.txt 2>&1; echo rc=$?; cat $OUT/skinny.txt
timeout 150 $KC --shapes 64x4096x4096,256x1024x4096,32x4096x4096,1024x1024x1024,4096x4096x4096 --specs unprotected/fma,ones/T/fma,ones/M/fma --json $OUT/wide_vecA1.json > $OUT/wide_vecA1.txt 2>&1; echo rc=$?; cat $OUT/wide_vecA1.txt
timeout 120 $KC --shapes 1024x1024x1024,4096x4096x4096 --specs unprotected/fma,ones/T/fma,ones/M/fma -D READBACK_VEC_A=0 --json $OUT/large_vecA0.json > $OUT/large_vecA0.txt 2>&1; echo rc=$?; cat $OUT/large_vecA0.txt
date -u
