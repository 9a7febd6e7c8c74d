python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o; date -u | tee /tmp/o/date.txt
for v in unprotected ones/T twos/T; do
  timeout 120 python3 scripts/rmt_tile_probe.py --no-rmt --variant $v --tiles "auto,L16:128x128x16/8x8akm1o1" \
    --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024 --rounds 5 --repeats 10 \
    --json /tmp/o/L-${v//\//_}.json 2>&1 | grep -v -i "warn\|^ *\^\|declared but\|Remark\|check" | tee /tmp/o/L-${v//\//_}.txt
  timeout 120 python3 scripts/rmt_tile_probe.py --no-rmt --variant $v --tiles "auto,W16:64x128x16/4x8akm1" \
    --shapes 64x4096x4096,256x1024x4096,64x11008x4096,64x4096x11008 --rounds 7 --repeats 20 \
    --json /tmp/o/W-${v//\//_}.json 2>&1 | grep -v -i "warn\|^ *\^\|declared but\|Remark\|check" | tee /tmp/o/W-${v//\//_}.txt
done
tar -czf $OUT/c4.tgz -C /tmp/o .
