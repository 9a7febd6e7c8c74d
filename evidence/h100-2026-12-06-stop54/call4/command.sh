#!/usr/bin/env bash
set -uo pipefail
OUT=${OUT:-/tmp/safemon-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
{ date -u +%FT%TZ; echo "tree $(bash scripts/tree-digest)"; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv; } | tee "$OUT/device.txt"
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >"$OUT/pip.log" 2>&1 || echo "wheel install failed"
found() { python3 -c "import os,sys; from safemon.mps import control_pipe_found as f; print('control_pipe_found', sys.argv[1], f({'CUDA_MPS_PIPE_DIRECTORY': sys.argv[1]}))" "$1"; }
metric() { python3 -c "
import urllib.request,time
for _ in range(40):
    try:
        t=urllib.request.urlopen('http://127.0.0.1:17650/metrics',timeout=1).read().decode(); break
    except Exception: time.sleep(0.5)
print('\n'.join(l for l in t.splitlines() if l.startswith(('safemon_cuda_mps_found','safemon_mode'))))"; }
types() { python3 -c "
import socket,sys,errno
for name in ('SOCK_STREAM','SOCK_SEQPACKET','SOCK_DGRAM'):
    s=socket.socket(socket.AF_UNIX,getattr(socket,name)); s.setblocking(False)
    try: s.connect(sys.argv[1]); r='connected'
    except OSError as e: r=errno.errorcode.get(e.errno,str(e.errno))
    s.close(); print('connect', name, r)" "$1"; }
. scripts/mps.sh
mps_available || { echo "no MPS here"; exit 0; }
mps_on; echo "mps_on rc=$? pipe=${CUDA_MPS_PIPE_DIRECTORY:-unset}" | tee -a "$OUT/mps.txt"
ls -la "$MPS_DIR/pipe" | tee -a "$OUT/mps.txt"
types "$MPS_DIR/pipe/control" | tee -a "$OUT/mps.txt"
found "$MPS_DIR/pipe" | tee -a "$OUT/mps.txt"
found "$MPS_DIR/pipe" | tee -a "$OUT/mps.txt"
timeout 30 python3 -m safemon run --config configs/2oo3.yaml > "$OUT/daemon-mps.log" 2>&1 &
sleep 3; metric | tee -a "$OUT/mps.txt"; sleep 5; metric | tee -a "$OUT/mps.txt"
kill %1 2>/dev/null; wait
grep -E "cuda_mps|daemon_started" "$OUT/daemon-mps.log" | cut -c1-400 | tee -a "$OUT/mps.txt"
nvidia-smi --query-compute-apps=pid,process_name --format=csv | tee -a "$OUT/mps.txt"
mps_off; echo "mps_off done, pipe=${CUDA_MPS_PIPE_DIRECTORY:-unset}" | tee -a "$OUT/mps.txt"
ls -la "$MPS_DIR/pipe" | tee -a "$OUT/mps.txt"
types "$MPS_DIR/pipe/control" | tee -a "$OUT/mps.txt"
found "$MPS_DIR/pipe" | tee -a "$OUT/mps.txt"
mps_off; echo "second mps_off: MPS_STARTED=${MPS_STARTED:-empty}" | tee -a "$OUT/mps.txt"
cp -r "$MPS_DIR/log" "$OUT/mps-log" 2>/dev/null
timeout 20 python3 -m safemon run --config configs/2oo3.yaml > "$OUT/daemon-nomps.log" 2>&1 &
sleep 3; metric | tee -a "$OUT/mps.txt"; kill %1 2>/dev/null; wait
grep -E "cuda_mps" "$OUT/daemon-nomps.log" | cut -c1-400 | tee -a "$OUT/mps.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_mps.py 2>&1 | tail -2 | tee -a "$OUT/mps.txt"
