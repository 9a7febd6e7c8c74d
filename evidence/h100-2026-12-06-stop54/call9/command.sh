#!/usr/bin/env bash
set -uo pipefail
OUT=${OUT:-/tmp/safemon-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
{ date -u +%FT%TZ; echo "tree $(bash scripts/tree-digest)"; } | tee "$OUT/device.txt"
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >"$OUT/pip.log" 2>&1 || echo "wheel install failed"
timeout 200 python3 -m pytest -m gpu -v -p no:cacheprovider -p no:randomly tests/models/test_models_gpu.py "tests/runtime/test_inline_gpu.py::test_a_device_model_whose_hidden_layer_overflows_is_invalid_input" > "$OUT/tests.log" 2>&1
echo "rc=$?"; tail -3 "$OUT/tests.log"
