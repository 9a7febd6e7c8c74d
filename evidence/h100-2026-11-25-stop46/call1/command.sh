python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
rm -rf /tmp/o /tmp/safemon-split-out; mkdir -p /tmp/o; date -u | tee /tmp/o/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee /tmp/o/gpu.csv
timeout 120 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/bench/test_runtime_baselines_gpu.py 2>&1 | tail -5 | tee /tmp/o/gpu-test.log
TILES="large,tall:128x256x8/16x8akm1o1"
for v in unprotected ones/M twos/M xor/M fletcher/M crc32c/M; do
  timeout 100 python3 scripts/rmt_tile_probe.py --no-rmt --variant $v --tiles "$TILES" \
    --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024,512x4096x4096 --rounds 5 --repeats 10 \
    --json /tmp/o/p-${v//\//_}.json 2>&1 | grep -v -i "warn\|^ *\^\|declared but\|Remark" | grep -v check | tee /tmp/o/p-${v//\//_}.txt
done
OUT=/tmp/o bash scripts/split-gpu vote 2>&1 | tail -20
tar -czf $OUT/c1.tgz -C /tmp/o .
