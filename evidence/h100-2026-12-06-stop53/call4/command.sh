#!/usr/bin/env bash
# Issue 16 item 4, settled by repetition: does CUDA MPS make safemon's requests faster on one
# GPU? `safemon bench vote --runtime` (process, stream and inline channels, cuda-ipc, spin
# 5 ms) runs PAIRS times with MPS off, then on, alternating, so that drift of the machine
# shows in both arms; then the torch example's transformer block (inline) once each way. MPS
# runs only for this script's processes (a private pipe and log directory; the control
# daemon is quit after each "on" run). The GPU's compute mode, clocks and other settings
# are not touched.
# usage (device tool, carry [".device"]): bash scripts/mps-ab-gpu   -> $OUT/mps-ab.tgz
set -uo pipefail
FINAL=${OUT:-/tmp/safemon-out}
OUT=/tmp/safemon-mps-ab-out
mkdir -p "$OUT" "$FINAL"
finish() { tar -czf "$FINAL/mps-ab.tgz" -C "$OUT" --exclude='*.sock' . 2>/dev/null; }
trap finish EXIT
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >"$OUT/pip.log" 2>&1 \
  || { echo "wheel install failed"; tail "$OUT/pip.log"; }
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader;
  echo "tree $(bash scripts/tree-digest)"; } | tee "$OUT/device.txt"
command -v nvidia-cuda-mps-control >/dev/null || { echo "no nvidia-cuda-mps-control here"; exit 0; }
MPS_DIR=/tmp/safemon-mps
mps_on() {
  export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
}
mps_off() {
  echo quit | nvidia-cuda-mps-control
  sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
trap 'mps_off >/dev/null 2>&1; cp -r "$MPS_DIR/log" "$OUT/mps-log" 2>/dev/null; finish' EXIT
bench() {  # tag
  local t0=$SECONDS
  SAFEMON_TIMING__SPIN_S=0.005 timeout "${BENCH_LIMIT:-120}" python3 -m safemon bench vote --runtime \
    --backend cupy --sizes 80x80x80,1024x1024x64 --requests "${REQS:-300}" --warmup 20 \
    --model 64x4096x4 --model-requests "${MODEL_REQS:-40}" --placements process,stream,inline \
    --paths cuda-ipc --json "$OUT/vote-$1.json" --markdown "$OUT/vote-$1.md" > "$OUT/vote-$1.log" 2>&1
  echo "== vote $1 rc=$? $(( SECONDS - t0 )) s"
  grep -E "^\| (process|stream|inline) .*(80x80x80|1024x1024x64|side by side|cupy)" "$OUT/vote-$1.md"
  finish
}
for i in $(seq 1 "${PAIRS:-3}"); do
  bench "off-$i"
  mps_on || { echo "MPS did not start"; break; }
  bench "on-$i"
  mps_off
done
python3 - "$OUT/inline.yaml" <<'PY'
import sys, yaml
cfg = yaml.safe_load(open("configs/2oo3.yaml"))
for ch in cfg["channels"]:
    ch["placement"] = "inline"
yaml.safe_dump(cfg, open(sys.argv[1], "w"))
PY
torch_run() {  # tag
  local t0=$SECONDS
  SAFEMON_TIMING__SPIN_S=0.005 timeout "${TORCH_LIMIT:-90}" python3 examples/torch_digits.py \
    --device cuda --config "$OUT/inline.yaml" --models transformer --reps 30 \
    --out "$OUT/torch-$1.json" --run-dir "/tmp/safemon-torch-$1" > "$OUT/torch-$1.txt" 2>&1
  echo "== torch transformer $1 rc=$? $(( SECONDS - t0 )) s"; grep -E "latency|wrong" "$OUT/torch-$1.txt"
  finish
}
torch_run off
mps_on && { torch_run on; mps_off; }
