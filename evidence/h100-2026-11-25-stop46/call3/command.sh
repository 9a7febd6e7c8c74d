python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
rm -rf /tmp/o /tmp/safemon-split-out; mkdir -p /tmp/o; date -u | tee /tmp/o/date.txt
for v in ones/M fletcher/M crc32c/M; do
  timeout 100 python3 scripts/rmt_tile_probe.py --no-rmt --mode exact --variant $v --tiles "large,tall" \
    --shapes 4096x4096x4096,1024x1024x1024 --rounds 5 --repeats 10 \
    --json /tmp/o/x-${v//\//_}.json 2>&1 | grep -v -i "warn\|^ *\^\|declared but\|Remark" | grep -v check | tee /tmp/o/x-${v//\//_}.txt
done
OUT=/tmp/o BENCH_DIMS=1024,2048,4096 BENCH_VARIANTS=ones/T,ones/M,twos/M,fletcher/M,crc32c/M \
  API_DIMS=64x4096x4096,256x1024x4096,1x4096x4096,1024x1024x1024,4096 bash scripts/split-gpu bench 2>&1 | tail -40
for scope in transient block; do
  timeout 150 python3 -m safemon dc --inkernel 60 --scope $scope --variants ones/M,fletcher/M --dims 128x4096x1000 \
    --mode fma --tile auto --backend cupy --no-progress --markdown /tmp/o/inkernel-$scope-auto.md --json /tmp/o/inkernel-$scope-auto.json 2>&1 | tail -4
  timeout 100 python3 -m safemon dc --inkernel 60 --scope $scope --variants ones/M --dims 128x4096x1000 \
    --mode fma --tile large --backend cupy --no-progress --markdown /tmp/o/inkernel-$scope-large.md --json /tmp/o/inkernel-$scope-large.json 2>&1 | tail -3
done
cat /tmp/o/inkernel-*.md
tar -czf $OUT/c3.tgz -C /tmp/o .
