export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
mkdir -p /tmp/o8; date -u | tee /tmp/o8/date.txt
for v in unprotected ones/T twos/T; do
  timeout 100 python3 scripts/rmt_tile_probe.py --no-rmt --variant $v --tiles "wide,WK16:32x128x16/4x8am1" \
    --shapes 16x4096x4096,32x4096x4096,9x4096x4096,24x11008x4096,32x1024x4096 --rounds 7 --repeats 20 --json /tmp/o8/w-${v//\//_}.json 2>&1 \
    | grep -v -i "warn\|^ *\^\|declared but\|Remark" | tee /tmp/o8/w-${v//\//_}.txt | grep -v "^  check"
done
timeout 200 python3 scripts/kernel_compare.py .device/mmm_cur.cu --warm -D MIN_BLOCKS=1 --repeats 20 \
  --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024 --specs ones/T/fma,twos/T/fma,crc32c/T/fma 2>&1 \
  | grep -v -i "warn\|^ *\^\|declared but\|Remark\|^ *$" | tee /tmp/o8/minblocks1.txt
tar -czf $OUT/c8.tgz -C /tmp/o8 .
