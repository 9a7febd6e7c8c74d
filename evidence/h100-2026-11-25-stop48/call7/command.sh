python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=/tmp/s48c7; rm -rf $O; mkdir -p $O; date -u | tee $O/date.txt; sha256sum safemon/kernels/catalog.py safemon/kernels/cuda/mmm.cu tests/kernels/case_references.py | tee $O/tree.txt
trap 'tar -czf $OUT/c7.tgz -C $O .' EXIT
start=$(date +%s)
timeout 520 python3 -m pytest -q -rfE -p no:cacheprovider -p no:randomly -p no:benchmark -n 5 -m "gpu and not slow" tests/kernels \
  -k campaign --durations=10 --junitxml=$O/campaigns.xml > $O/gpu-tests-kernels-campaigns.log 2>&1; echo "campaigns rc=$? in $(( $(date +%s) - start )) s"
tail -20 $O/gpu-tests-kernels-campaigns.log | cut -c1-160
