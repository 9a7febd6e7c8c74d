#!/usr/bin/env bash
set -uo pipefail
OUT=${OUT:-/tmp/safemon-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
{ date -u +%FT%TZ; echo "tree $(bash scripts/tree-digest)"; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv; } | tee "$OUT/device.txt"
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >"$OUT/pip.log" 2>&1 || echo "wheel install failed"
t0=$SECONDS
timeout 400 python3 -m pytest -m gpu -v -p no:cacheprovider -p no:randomly --durations=8 \
  "tests/runtime/test_inline_gpu.py::test_clients_that_exit_right_after_their_reply_leave_the_inline_daemon_serving" --basetemp=/tmp/pt > "$OUT/tests.log" 2>&1
echo "tests rc=$? $((SECONDS - t0)) s"; grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/tests.log" | tail -12
for d in /tmp/pt/test_clients_that_exit*; do echo "== $d"; cat "$d/hold.log" 2>/dev/null | head -3; grep -iE "error|fault|warning" "$d/daemon.log" 2>/dev/null | cut -c1-300 | head -8; done
mkdir -p "$OUT/pt" && for d in /tmp/pt/test_clients_that_exit*; do n=$(basename "$d"); mkdir -p "$OUT/pt/$n"; cp "$d"/{daemon.log,hold.log} "$OUT/pt/$n/" 2>/dev/null; done
