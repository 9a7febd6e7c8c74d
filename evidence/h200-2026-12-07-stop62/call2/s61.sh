#!/usr/bin/env bash
# stop 61, call A: stream-priority lever: probe, runtime A/B (MPS, inline), inline GPU tests
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=${OUT:-/tmp/o}; mkdir -p "$O"
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode,clocks.sm,clocks.max.sm --format=csv; echo "tree $(bash scripts/tree-digest) head $(bash .device/head/scripts/tree-digest 2>/dev/null)"; } | tee "$O/device.txt"
echo "== probe"; timeout 80 python3 scripts/priority_probe.py --rounds 3 --reps 20 > "$O/priority-probe.txt" 2>&1; echo "rc=$? at $SECONDS s"; tail -12 "$O/priority-probe.txt"
echo "== ab mps"; OUT=$O/ab-mps TREES="head=.device/head prio=." ROUNDS=1 MODES=mps PLACEMENTS=inline SPIN_S=0.005 REQS=300 timeout 110 bash scripts/runtime-ab 2>&1 | tail -45; echo "at $SECONDS s"
if (( SECONDS < 250 )); then
echo "== gpu tests"; timeout -s INT $(( 330 - SECONDS )) python3 -m pytest -p no:cacheprovider -q -m gpu tests/channels/test_stream_priority.py tests/runtime/test_inline_gpu.py tests/bench/test_runtime_baselines_gpu.py --junitxml "$O/tests.xml" > "$O/tests.log" 2>&1; echo "rc=$? at $SECONDS s"; tail -5 "$O/tests.log"
fi
