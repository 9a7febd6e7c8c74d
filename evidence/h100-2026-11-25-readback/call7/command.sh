python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv; date -u
KC="python3 scripts/kernel_compare.py .device/mmm_b51.cu --baseline-include .device --warm"
timeout 400 $KC --shapes 1x4096x4096,2x4096x4096,4x4096x4096,8x4096x4096,1x11008x4096,1x4096x11008,1x5120x5120,2x14336x4096,1x4096x1024,3x1000x777,5x1001x333,1x257x4099 --specs unprotected/fma,ones/T/fma,ones/M/fma,twos/M/exact,xor/E/fma,fletcher/T/fma,crc32c/M/fma,ones/I/fma --json $OUT/skip.json > $OUT/skip.txt 2>&1; echo rc=$?; cat $OUT/skip.txt
date -u
