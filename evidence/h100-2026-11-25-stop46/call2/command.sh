python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
rm -rf /tmp/o /tmp/safemon-split-out; mkdir -p /tmp/o; date -u | tee /tmp/o/date.txt
timeout 200 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/kernels/test_gpu.py -k "tall" 2>&1 | tail -5 | tee /tmp/o/gpu-tall.log
TILES="large,tall"
for v in ones/M fletcher/M crc32c/M; do
  timeout 100 python3 scripts/rmt_tile_probe.py --no-rmt --mode exact --variant $v --tiles "$TILES" \
    --shapes 4096x4096x4096,1024x1024x1024 --rounds 5 --repeats 10 \
    --json /tmp/o/x-${v//\//_}.json 2>&1 | grep -v -i "warn\|^ *\^\|declared but\|Remark" | tee /tmp/o/x-${v//\//_}.txt
done
OUT=/tmp/o REST_LIMIT=200 bash scripts/split-gpu rest 2>&1 | tail -6
tar -czf $OUT/c2.tgz -C /tmp/o .
