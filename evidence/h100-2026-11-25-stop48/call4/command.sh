python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=/tmp/s48c4; rm -rf $O; mkdir -p $O; date -u | tee $O/date.txt; git log --oneline -1 2>/dev/null | tee $O/tree.txt
trap 'tar -czf $OUT/c4.tgz -C $O .' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee $O/gpu.csv
start=$(date +%s)
timeout 545 python3 -m pytest -q -rfE -p no:cacheprovider -p no:randomly -p no:benchmark -n 14 -m gpu tests/kernels \
  --durations=30 > $O/gpu-tests-kernels.log 2>&1; echo "kernels rc=$? in $(( $(date +%s) - start )) s"
tail -45 $O/gpu-tests-kernels.log
