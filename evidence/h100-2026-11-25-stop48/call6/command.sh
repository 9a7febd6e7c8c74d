python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=/tmp/s48c6; rm -rf $O; mkdir -p $O; date -u | tee $O/date.txt; sha256sum safemon/kernels/catalog.py safemon/kernels/cuda/mmm.cu tests/kernels/case_references.py | tee $O/tree.txt
trap 'tar -czf $OUT/c6.tgz -C $O .' EXIT
ls ~/.cupy/kernel_cache 2>/dev/null | wc -l | sed 's/^/cached kernels: /'
start=$(date +%s)
timeout 430 python3 -m pytest -q -rfE -p no:cacheprovider -p no:randomly -p no:benchmark -n 4 -m "gpu and slow" tests/kernels \
  --durations=10 > $O/gpu-tests-kernels-slow.log 2>&1 &
slow=$!
timeout 430 python3 -m pytest -q -rfE -p no:cacheprovider -p no:randomly -p no:benchmark -n 11 -m "gpu and not slow" tests/kernels \
  --durations=25 > $O/gpu-tests-kernels-notslow.log 2>&1; echo "not slow rc=$? in $(( $(date +%s) - start )) s"
wait $slow; echo "slow rc=$? in $(( $(date +%s) - start )) s"
tail -32 $O/gpu-tests-kernels-notslow.log | cut -c1-150
tail -14 $O/gpu-tests-kernels-slow.log | cut -c1-150
