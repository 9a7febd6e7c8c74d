#!/usr/bin/env bash
# stop 63: the client's stream priority probe, under MPS and without
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD SAFEMON_TIMING__SPIN_S=0.005
O=${OUT:-/tmp/o}; mkdir -p "$O"
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode,clocks.sm,clocks.max.sm --format=csv; echo "tree $(bash scripts/tree-digest)"; } | tee "$O/device.txt"
. scripts/mps.sh
for r in 1 2; do
  mps_on && echo "== MPS on (round $r)" || echo "== MPS did not start"
  timeout 120 python3 scripts/client_stream_probe.py --rounds 6 --reps 100 > "$O/probe-mps-$r.txt" 2>&1; echo "rc=$? at $SECONDS s"; tail -6 "$O/probe-mps-$r.txt"
  mps_off
  echo "== MPS off (round $r)"
  timeout 120 python3 scripts/client_stream_probe.py --rounds 6 --reps 100 > "$O/probe-nomps-$r.txt" 2>&1; echo "rc=$? at $SECONDS s"; tail -6 "$O/probe-nomps-$r.txt"
done
