#!/usr/bin/env bash
# stop 68, call 1: the inline GPU tests (the new left-step test among them), then
# runtime-ab (MPS on, inline, spin 5 ms, 3 rounds) of 84506a9 (.device/base) against this
# tree, then the span probe's after-the-reply report for the MLP on both trees (MPS on)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=${OUT:-/tmp/o}; mkdir -p "$O"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv; echo "tree $(bash scripts/tree-digest)"; } | tee "$O/device.txt"
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >"$O/pip.log" 2>&1 || tail -3 "$O/pip.log"
timeout 200 python3 -m pytest -q -rP -p no:randomly -p no:cacheprovider --basetemp=/tmp/bt1 --durations=5 \
  tests/runtime/test_inline_gpu.py tests/runtime/test_inline.py > "$O/inline-tests.log" 2>&1
echo "inline tests rc=$? at $SECONDS s: $(tail -1 "$O/inline-tests.log")"
grep -E "inline steps left|FAILED|Error|s call" "$O/inline-tests.log" | head -12
OUT=$O TREES="base=.device/base new=." MODES=mps ROUNDS=3 SPIN_S=0.005 PLACEMENTS=inline \
  REQS=300 MODEL_REQS=30 timeout $(( 470 - SECONDS )) bash scripts/runtime-ab 2>&1 | grep -vE "^\s*$" | tail -40
echo "A/B done at $SECONDS s"
. scripts/mps.sh
mps_on && trap 'mps_off' EXIT && echo "MPS on"
for spec in base=.device/base new=.; do
  name=${spec%%=*} tree=${spec#*=}
  [ $SECONDS -lt 520 ] || break
  (cd "$tree" && PYTHONPATH=$PWD timeout $(( 575 - SECONDS )) python3 scripts/span_probe.py --requests 200 \
    --placement inline --spin-s 0.005 --out /tmp/span-$name --model 64x4096x4) > "$O/span-model-$name.txt" 2>&1
  echo "== span $name rc=$?"; tail -8 "$O/span-model-$name.txt"
done
echo "end at $SECONDS s"
