# Sourced by the device scripts that run steps under CUDA MPS (scripts/stop-gpu,
# scripts/runtime-ab, scripts/mps-floor-gpu, scripts/mps-ab-gpu). MPS runs only for the
# calling script's own processes: a private pipe and log directory under MPS_DIR, exported
# to what the script starts after `mps_on`; `mps_off` quits the control daemon that `mps_on`
# started, in that private directory only, and only once (a second call, e.g. from an EXIT
# trap, quits nothing). The GPU's compute mode, clocks and other settings are not touched.
MPS_DIR=${MPS_DIR:-/tmp/safemon-mps}
MPS_STARTED=

mps_available() { command -v nvidia-cuda-mps-control >/dev/null; }

mps_on() {  # start a control daemon in the private directories and export them (rc 0), or
            # export nothing and return the control daemon's failing rc
  mkdir -p "$MPS_DIR/pipe" "$MPS_DIR/log"
  CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log \
    nvidia-cuda-mps-control -d || return
  MPS_STARTED=1
  export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log
}

mps_off() {  # quit the control daemon mps_on started; later processes run without MPS
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  [ -n "$MPS_STARTED" ] || return 0
  MPS_STARTED=
  echo quit | CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe nvidia-cuda-mps-control
  sleep 1
}
