python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u
KC="python3 scripts/kernel_compare.py .device/mmm_head.cu --baseline-include .device --warm --shapes 1x4096x4096,8x4096x4096,1x11008x4096,1x5120x5120,2x14336x4096,1x4096x1024 --specs unprotected/fma,ones/T/fma,ones/M/fma"
for D in "BK=12" "BK=8" "BK=16"; do
  echo "== $D"; timeout 150 $KC -D $D --json $OUT/bk_${D#BK=}.json > $OUT/bk_${D#BK=}.txt 2>&1; echo rc=$?; grep -v "^compiled" $OUT/bk_${D#BK=}.txt
done
date -u
