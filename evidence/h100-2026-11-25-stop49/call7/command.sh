python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=/tmp/c7; rm -rf $O; mkdir -p $O/ncu; date -u | tee $O/date.txt; echo "tree $(bash scripts/tree-digest)" | tee $O/tree.txt
trap 'tar -czf $OUT/c7.tgz -C $O .' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee $O/gpu.csv
for spec in 4096x4096x4096:cublas 4096x4096x4096:unprotected 4096x4096x4096:ones/M 4096x4096x4096:twos/M 256x1024x4096:cublas 256x1024x4096:unprotected; do
  name=$(echo "$spec" | tr '/:' '__')
  case $spec in *cublas) k='regex:gemm|xmma|cutlass|sm90|Kernel';; *) k='regex:safemon_';; esac
  s=$SECONDS
  timeout 110 ncu -k "$k" --launch-skip 2 --launch-count 2 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis python3 scripts/ncu_target.py $spec > $O/ncu/$name.txt 2>&1
  echo "== $spec rc=$? $((SECONDS-s)) s"
  grep -E "^  [a-zA-Z_].*\(|Duration|Executed Ipc A|Issue Slots Busy|No Eligible|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Grid Size|Executed Instructions  " $O/ncu/$name.txt | head -30
done
