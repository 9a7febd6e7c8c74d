python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=/tmp/s48c5; rm -rf $O; mkdir -p $O; date -u | tee $O/date.txt; sha256sum safemon/kernels/catalog.py safemon/kernels/cuda/mmm.cu tests/kernels/case_references.py | tee $O/tree.txt
trap 'tar -czf $OUT/c5.tgz -C $O .' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee $O/gpu.csv
ls ~/.cupy/kernel_cache 2>/dev/null | wc -l | sed 's/^/cached kernels: /'
start=$(date +%s)
timeout 330 python3 -m pytest -q -rfE -p no:cacheprovider -p no:randomly -p no:benchmark -n 15 -m gpu tests/kernels \
  --durations=30 > $O/gpu-tests-kernels.log 2>&1; echo "kernels rc=$? in $(( $(date +%s) - start )) s"
tail -40 $O/gpu-tests-kernels.log | cut -c1-160
start=$(date +%s)
timeout 240 python3 -m safemon bench --dims 1024,4096 --modes fma --variants ones/T,ones/M,twos/M \
  --api-dims 64x4096x4096,256x1024x4096,1x4096x4096,1024x1024x1024,4096 \
  --no-ecc --json $O/bench.json --markdown $O/bench.md 2>$O/bench.err | tail -40; echo "bench in $(( $(date +%s) - start )) s"
