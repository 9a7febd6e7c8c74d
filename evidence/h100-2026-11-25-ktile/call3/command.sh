python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o; date -u | tee /tmp/o/date.txt
TILES="auto,w64o:64x128x8/4x8akm1o1,w64o:64x128x8/4x8akm1o1@16,large@8,large@16,h64:64x128x8/8x8akm1o1@8,h64:64x128x8/8x8akm1o1@16,h64k:64x128x16/8x8akm1o1@16"
for v in unprotected ones/T; do
  timeout 200 python3 scripts/rmt_tile_probe.py --no-rmt --variant $v --tiles "$TILES" \
    --shapes 64x4096x4096,256x1024x4096,128x4096x4096,64x11008x4096 --rounds 7 --repeats 20 \
    --json /tmp/o/q-${v//\//_}.json 2>&1 | grep -v -i "warn\|^ *\^\|declared but\|Remark" | tee /tmp/o/q-${v//\//_}.txt
done
tar -czf $OUT/c3.tgz -C /tmp/o .
