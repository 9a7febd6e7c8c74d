python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o9; rm -rf /tmp/o9/*; date -u | tee /tmp/o9/date.txt
trap 'tar -czf $OUT/c9.tgz -C /tmp/o9 .' EXIT
timeout 380 python3 -m pytest -q -rfE -p no:cacheprovider -p no:randomly -p no:benchmark -m gpu \
  tests/kernels/test_gpu_splitk.py -k "finite or nonfinite or poison" > /tmp/o9/gpu-tests-finite.log 2>&1; echo "rc=$?"
tail -4 /tmp/o9/gpu-tests-finite.log
