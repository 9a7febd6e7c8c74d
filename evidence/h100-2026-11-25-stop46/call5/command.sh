START=$(date +%s)
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
rm -rf /tmp/o; mkdir -p /tmp/o; date -u | tee /tmp/o/date.txt
run() {  # dims scope sites limit
  local left=$(( 560 - ($(date +%s) - START) ))
  if [ $left -lt 30 ]; then echo "$1 $2 skipped: ${left} s left"; return; fi
  local lim=$(( $4 < left ? $4 : left ))
  local t0=$(date +%s)
  timeout $lim python3 -m safemon dc --inkernel $3 --scope $2 --variants ones/T --dims $1 --mode fma --tile auto \
    --backend cupy --no-progress --markdown /tmp/o/ik-$1-$2.md --json /tmp/o/ik-$1-$2.json > /tmp/o/ik-$1-$2.log 2>&1
  echo "$1 $2 $3 rc=$? $(( $(date +%s) - t0 )) s" | tee -a /tmp/o/runs.txt; grep -E "^\| ones" /tmp/o/ik-$1-$2.md
  tar -czf $OUT/c5.tgz -C /tmp/o .
}
run 1x4096x4096 transient 2400 150
run 1x4096x4096 thread 1400 120
run 1x4096x4096 block 800 100
run 1024x1024x1024 transient 600 120
run 1024x1024x1024 thread 320 100
run 1024x1024x1024 block 320 100
date -u | tee -a /tmp/o/runs.txt; tar -czf $OUT/c5.tgz -C /tmp/o .
