export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
mkdir -p /tmp/o; date -u | tee /tmp/o/date.txt; git log --oneline -1 > /tmp/o/tree.txt 2>/dev/null
timeout 120 python3 -m pytest -q -p no:randomly -m gpu tests/kernels/test_gpu_rmt.py -k "half_equals" 2>&1 | tail -2 | tee /tmp/o/rmt.log
for v in ones/T twos/T; do
  timeout 100 python3 scripts/rmt_tile_probe.py --no-rmt --variant $v --tiles "large,L16:128x128x16/8x8akm1o1" \
    --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024 --rounds 5 --repeats 10 --json /tmp/o/L-${v//\//_}.json 2>&1 \
    | grep -v -i "warn\|^ *\^\|declared but\|Remark" > /tmp/o/L-${v//\//_}.txt
  timeout 100 python3 scripts/rmt_tile_probe.py --no-rmt --variant $v --tiles "auto,W16:64x128x16/4x8akm1" \
    --shapes 64x4096x4096,256x1024x4096,64x11008x4096 --rounds 7 --repeats 20 --json /tmp/o/W-${v//\//_}.json 2>&1 \
    | grep -v -i "warn\|^ *\^\|declared but\|Remark" > /tmp/o/W-${v//\//_}.txt
done
grep -h "µs" /tmp/o/L-*.txt /tmp/o/W-*.txt | grep -v cuBLAS | head -40
tar -czf $OUT/c7a.tgz -C /tmp/o .
BENCH_DIMS=1024,4096,64x4096x4096,256x1024x4096,1x4096x4096 BENCH_VARIANTS=ones/T,twos/T,ones/M,twos/M bash scripts/split-gpu bench vote 2>&1 | tail -60
