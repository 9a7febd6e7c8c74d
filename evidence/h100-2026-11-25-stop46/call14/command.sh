python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
rm -rf /tmp/o /tmp/safemon-split-out; mkdir -p /tmp/o; date -u | tee /tmp/o/date.txt
trap 'tar -czf $OUT/c14.tgz -C /tmp/o .' EXIT
timeout 120 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/bench/test_runtime_baselines_gpu.py 2>&1 | tail -3 | tee /tmp/o/gpu-test.log
OUT=/tmp/o bash scripts/split-gpu vote 2>&1 | tail -16
