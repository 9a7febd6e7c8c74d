#!/usr/bin/env bash
# stop 64: the gap probe (does a request wait for the daemon's leftovers of the one before?)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD SAFEMON_TIMING__SPIN_S=0.005
O=${OUT:-/tmp/o}; mkdir -p "$O"
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode,clocks.sm,clocks.max.sm --format=csv; echo "tree $(bash scripts/tree-digest)"; } | tee "$O/device.txt"
. scripts/mps.sh
for r in 1; do
  mps_on && echo "== MPS on (round $r)" || echo "== MPS did not start"
  timeout 150 python3 scripts/gap_probe.py --rounds 8 --reps 100 --gaps-us 0,300,1000,3000,10000 > "$O/gap-mps-$r.txt" 2>&1; echo "rc=$? at $SECONDS s"; tail -11 "$O/gap-mps-$r.txt"
  mps_off
done
echo "== MPS off"
timeout 150 python3 scripts/gap_probe.py --rounds 8 --reps 100 --gaps-us 0,300,1000,3000,10000 > "$O/gap-nomps.txt" 2>&1; echo "rc=$? at $SECONDS s"; tail -11 "$O/gap-nomps.txt"
