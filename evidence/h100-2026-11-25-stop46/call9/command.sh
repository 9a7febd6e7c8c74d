python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
rm -rf /tmp/o /tmp/safemon-split-out; mkdir -p /tmp/o; date -u | tee /tmp/o/date.txt
trap 'tar -czf $OUT/c9.tgz -C /tmp/o .' EXIT
OUT=/tmp/o BENCH_DIMS=1024,4096,64x4096x4096,256x1024x4096,1x4096x4096 bash scripts/split-gpu bench 2>&1 | tail -45
