python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o6; date -u | tee /tmp/o6/date.txt
trap 'tar -czf $OUT/c6.tgz -C /tmp/o6 .' EXIT
timeout 560 python3 -m pytest -q -rfE -p no:cacheprovider -p no:randomly -p no:benchmark -m gpu \
  tests/kernels/test_gpu.py tests/kernels/test_gpu_transpose.py \
  > /tmp/o6/gpu-tests-kernels.log 2>&1; echo "rc=$?"
tail -5 /tmp/o6/gpu-tests-kernels.log
