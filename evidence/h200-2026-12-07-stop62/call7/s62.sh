#!/usr/bin/env bash
# stop 62: stream-priority probe, runtime A/B (MPS, inline, main vs branch), then gpu-suite rest
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=${OUT:-/tmp/o}; mkdir -p "$O"
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode,clocks.sm,clocks.max.sm --format=csv; echo "tree $(bash scripts/tree-digest) head $(bash .device/head/scripts/tree-digest 2>/dev/null)"; } | tee "$O/device.txt"
echo "== probe"; timeout 60 python3 scripts/priority_probe.py --rounds 3 --reps 20 > "$O/priority-probe.txt" 2>&1; echo "rc=$? at $SECONDS s"; tail -8 "$O/priority-probe.txt"
echo "== ab mps"; OUT=$O/ab-mps TREES="head=.device/head prio=." ROUNDS=1 MODES=mps PLACEMENTS=inline SPIN_S=0.005 REQS=300 timeout -k 5 140 bash scripts/runtime-ab > "$O/ab.log" 2>&1; echo "rc=$? at $SECONDS s"
pkill -f "safemon" ; pkill -f nvidia-cuda-mps ; sleep 1
grep -E "^\| inline" "$O/ab.log" | head -20
echo "== rest at $SECONDS s"; OUT=$O DEADLINE=$(( ${END:-555} - SECONDS )) XDIST_REST=${XDIST_REST:-4} bash scripts/gpu-suite rest 2>&1 | tail -25
echo "end at $SECONDS s"
