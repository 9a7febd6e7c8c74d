python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o7; date -u | tee /tmp/o7/date.txt
trap 'tar -czf $OUT/c7.tgz -C /tmp/o7 .' EXIT
P="python3 -m pytest -q -rfE -p no:cacheprovider -p no:randomly -p no:benchmark -m gpu"
timeout 210 $P tests/kernels/test_gpu_transpose.py tests/kernels/test_gpu_rmt.py tests/kernels/test_gpu_abft.py \
  tests/kernels/test_gpu_abft_rows.py > /tmp/o7/gpu-tests-rmt-abft.log 2>&1; echo "rmt-abft rc=$?"
tail -3 /tmp/o7/gpu-tests-rmt-abft.log
tar -czf $OUT/c7.tgz -C /tmp/o7 .
timeout 330 $P tests/channels tests/models tests/patterns tests/runtime tests/torch tests/ecc \
  > /tmp/o7/gpu-tests-rest.log 2>&1; echo "rest rc=$?"
tail -3 /tmp/o7/gpu-tests-rest.log
