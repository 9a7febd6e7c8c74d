python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o5; date -u | tee /tmp/o5/date.txt
trap 'tar -czf $OUT/c5.tgz -C /tmp/o5 .' EXIT
git log -1 --format=%h 2>/dev/null; git status --short | head
timeout 540 python3 -m pytest -q -rfE -p no:cacheprovider -p no:randomly -p no:benchmark -n 12 -m gpu \
  tests/kernels/test_gpu_splitk.py tests/kernels/test_gpu.py tests/kernels/test_gpu_transpose.py \
  tests/kernels/test_gpu_rmt.py tests/kernels/test_gpu_abft.py tests/kernels/test_gpu_abft_rows.py \
  > /tmp/o5/gpu-tests-kernels.log 2>&1; echo "rc=$?"
tail -5 /tmp/o5/gpu-tests-kernels.log
