python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=/tmp/s48c2; rm -rf $O; mkdir -p $O; date -u | tee $O/date.txt
trap 'tar -czf $OUT/c2.tgz -C $O .' EXIT
P=twos/M/fma,xor/M/fma,ones/M/fma,twos/E/fma,ones/E/fma,twos/T/fma,ones/T/fma,fletcher/M/fma,crc32c/M/fma,ones/F/fma,twos/M/exact
for r in 1 2; do
  timeout 200 python3 scripts/kernel_compare.py safemon/kernels/cuda/mmm.cu --warm --repeats 25 --status \
    --shapes 4096x4096x4096,2048x2048x2048,1024x1024x1024 --specs $P -D LANE_MAP=0 --json $O/lm0-r$r.json > $O/lm0-r$r.txt 2>&1; echo "lm0 r$r rc=$?"
  grep -v "^compiled" $O/lm0-r$r.txt | cut -c1-150
done
timeout 100 python3 scripts/kernel_compare.py safemon/kernels/cuda/mmm.cu --warm --repeats 25 --status \
    --shapes 4096x4096x4096,1024x1024x1024 --specs ones/M/fma,twos/M/fma -D LANE_MAP=0 -D MAC_ORDER=0 --json $O/lm0mo0.json > $O/lm0mo0.txt 2>&1; echo "lm0mo0 rc=$?"
grep -v "^compiled" $O/lm0mo0.txt | cut -c1-150
