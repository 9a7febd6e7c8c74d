#!/usr/bin/env bash
set -uo pipefail
OUT=${OUT:-/tmp/safemon-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
{ date -u +%FT%TZ; echo "tree $(bash scripts/tree-digest)"; nvidia-smi --query-gpu=name,driver_version,compute_mode,clocks.sm,clocks.max.sm --format=csv; } | tee "$OUT/device.txt"
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >"$OUT/pip.log" 2>&1 || { echo "wheel install failed"; tail "$OUT/pip.log"; }
t0=$SECONDS
timeout 330 python3 -m pytest -m gpu -v -p no:cacheprovider -p no:randomly --durations=10 \
  tests/channels/test_step_graphs_gpu.py tests/models/test_models_gpu.py \
  tests/bench/test_runtime_baselines_gpu.py tests/runtime/test_device_io_gpu.py \
  "tests/kernels/test_gpu_splitk.py::test_protected_weight_single_flip_is_corrected_and_the_product_is_right" \
  "tests/kernels/test_gpu_splitk.py::test_protected_weight_double_flip_raises_and_releases_nothing" \
  "tests/kernels/test_gpu_splitk.py::test_a_check_beside_a_short_product_is_waited_for" \
  "tests/kernels/test_gpu_splitk.py::test_reused_status_block_reports_every_failure_and_only_its_own" \
  > "$OUT/tests.log" 2>&1
echo "tests rc=$? $((SECONDS - t0)) s"; grep -E "passed|failed|error" "$OUT/tests.log" | tail -5
t0=$SECONDS
timeout 200 python3 scripts/ecc_beside_probe.py --rounds 4 --reps 30 --model-reps 20 > "$OUT/probe.md" 2> "$OUT/probe.err"
echo "probe rc=$? $((SECONDS - t0)) s"; cat "$OUT/probe.md"; tail -3 "$OUT/probe.err"
