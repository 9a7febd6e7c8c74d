python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=/tmp/s48c1; rm -rf $O; mkdir -p $O/ncu; date -u | tee $O/date.txt
trap 'tar -czf $OUT/c1.tgz -C $O .' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee $O/gpu.csv
S=4096x4096x4096,1024x1024x1024,64x4096x4096,256x1024x4096
P=unprotected/fma,twos/M/fma,ones/M/fma
for d in MAC_ORDER=0 LANE_MAP=2 LANE_MAP=0; do
  n=${d//=/}
  timeout 150 python3 scripts/kernel_compare.py safemon/kernels/cuda/mmm.cu --warm --repeats 30 --status \
    --shapes $S --specs $P -D $d --json $O/cmp-$n.json > $O/cmp-$n.txt 2>&1; echo "cmp $d rc=$?"
  grep -v "^compiled" $O/cmp-$n.txt | cut -c1-150
done
for v in unprotected twos/M ones/M; do
  name=$(echo "$v" | tr '/' '_')
  timeout 120 ncu -k regex:safemon_mmm --launch-skip 2 --launch-count 1 --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --section SpeedOfLight --section Occupancy \
    --section LaunchStats python3 scripts/ncu_target.py 4096x4096x4096:$v > $O/ncu/$name.txt 2>&1
  echo "== $v"; grep -E "Stall|Issue|Eligible|Duration|Registers|Warp Cycles|Executed Ipc|Achieved Occ" $O/ncu/$name.txt | head -40
done
date -u
timeout 300 python3 -m pytest -q -p no:benchmark -p no:cacheprovider -p no:randomly -m gpu tests/kernels/test_gpu.py --durations=40 -x > $O/test_gpu.log 2>&1; echo "test_gpu rc=$?"
tail -60 $O/test_gpu.log
