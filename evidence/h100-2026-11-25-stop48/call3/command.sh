python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=/tmp/s48c3; rm -rf $O; mkdir -p $O; date -u | tee $O/date.txt
trap 'tar -czf $OUT/c3.tgz -C $O .' EXIT
cp safemon/kernels/cuda/mmm.cu $O/mmm_head.cu
# the tree's mmm.cu is unchanged; the catalog's new schedules against the old ones, as builds:
timeout 120 python3 scripts/kernel_compare.py safemon/kernels/cuda/mmm.cu --warm --repeats 25 --status \
  --shapes 64x4096x4096,256x1024x4096,128x4096x4096 --specs unprotected/fma,twos/M/fma,ones/M/fma,ones/T/fma \
  -D MAC_ORDER=1 --json $O/wide64-mo1.json > $O/wide64-mo1.txt 2>&1; echo "wide64 mo1 rc=$?"
grep -v "^compiled" $O/wide64-mo1.txt | cut -c1-150
timeout 120 python3 scripts/kernel_compare.py safemon/kernels/cuda/mmm.cu --warm --repeats 25 --status \
  --shapes 4096x4096x4096,1024x1024x1024 --specs ones/M/fma,twos/M/fma,xor/M/fma \
  -D LANE_MAP=2 -B LANE_MAP=1 -B MAC_ORDER=1 --json $O/lm2.json > $O/lm2.txt 2>&1; echo "lm2 rc=$?"
grep -v "^compiled" $O/lm2.txt | cut -c1-150
timeout 120 python3 scripts/kernel_compare.py safemon/kernels/cuda/mmm.cu --warm --repeats 25 --status \
  --shapes 4096x4096x4096,1024x1024x1024 --specs ones/M/fma,twos/M/fma,xor/M/fma \
  -B LANE_MAP=1 -B MAC_ORDER=1 --json $O/new-vs-old.json > $O/new-vs-old.txt 2>&1; echo "new-vs-old rc=$?"
grep -v "^compiled" $O/new-vs-old.txt | cut -c1-150
