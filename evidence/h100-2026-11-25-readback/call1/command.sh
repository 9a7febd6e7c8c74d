set -x
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv
date -u
SH=1x4096x4096,8x4096x4096,1x11008x4096,1x4096x11008,1x5120x5120,2x14336x4096,3x1000x777,5x1001x333,7x300x5000
SP=unprotected/fma,ones/T/fma,ones/M/fma,twos/M/fma,ones/I/fma,unprotected/exact,crc32c/I/fma,fletcher/F/exact
timeout 300 python3 scripts/kernel_compare.py .device/mmm_head.cu --baseline-include .device --shapes $SH --specs $SP -D TILE_DIRECT=1 --warm --json $OUT/direct8.json > $OUT/direct8.txt 2>&1; echo rc=$?
tail -80 $OUT/direct8.txt
timeout 100 python3 scripts/kernel_compare.py .device/mmm_head.cu --baseline-include .device --shapes 1x4096x4096,8x4096x4096,1x11008x4096,1x5120x5120 --specs unprotected/fma,ones/T/fma -D TILE_DIRECT=1 -D DIRECT_CHUNK=4 --warm --json $OUT/direct4.json > $OUT/direct4.txt 2>&1; echo rc=$?
cat $OUT/direct4.txt
timeout 100 python3 scripts/kernel_compare.py .device/mmm_head.cu --baseline-include .device --shapes 64x4096x4096,256x1024x4096,32x4096x4096 --specs unprotected/fma,ones/T/fma -D TILE_DIRECT=1 --warm --json $OUT/direct_wide.json > $OUT/direct_wide.txt 2>&1; echo rc=$?
cat $OUT/direct_wide.txt
date -u
