python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1
date -u | tee $OUT/date.txt
PYTHONPATH=$PWD timeout 430 python3 -m pytest -q -rfE -p no:cacheprovider -p no:randomly -m gpu tests/kernels/test_gpu_splitk.py 2>&1 | tee $OUT/gpu-tests-splitk.log | tail -4
for r in 1 2; do for tree in old new; do
  if [ $tree = old ]; then pp="$PWD/.device/ab_old:$PWD"; else pp=$PWD; fi
  echo "=== $tree $r"; PYTHONPATH=$pp timeout 100 python3 scripts/api_method_probe.py 1x4096x4096 64x4096x4096 256x1024x4096 2>&1 | grep -v -i warn | tee $OUT/api-$tree-$r.txt | grep "^|.*x"
done; done
