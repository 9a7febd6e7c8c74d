python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o15; date -u | tee /tmp/o15/date.txt
timeout 120 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/bench 2>&1 | tail -5 | tee /tmp/o15/gpu-bench.log
cp /tmp/o15/* $OUT/
