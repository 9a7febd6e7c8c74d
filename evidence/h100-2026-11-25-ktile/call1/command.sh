python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o; date -u | tee /tmp/o/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee /tmp/o/gpu.csv
TILES="large,t16:128x128x8/16x8akm1o1,t16t:256x128x8/16x8akm1o1,t16w:128x256x8/16x8akm1o1,t816:128x256x8/8x16akm1o1"
for v in unprotected ones/M twos/M ones/T; do
  timeout 140 python3 scripts/rmt_tile_probe.py --no-rmt --variant $v --tiles "$TILES" \
    --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024 --rounds 5 --repeats 10 \
    --json /tmp/o/p-${v//\//_}.json 2>&1 | grep -v -i "warn\|^ *\^\|declared but\|Remark" | tee /tmp/o/p-${v//\//_}.txt
done
tar -czf $OUT/c1.tgz -C /tmp/o .
