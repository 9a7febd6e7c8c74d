# Sourced by the device scripts that run steps under CUDA MPS (scripts/stop-gpu,
# scripts/runtime-ab, scripts/mps-floor-gpu, scripts/mps-ab-gpu). MPS runs only for the
# calling script's own processes: a private pipe and log directory under MPS_DIR, exported
# to what the script starts after `mps_on`; `mps_off` quits the control daemon. The GPU's
# compute mode, clocks and other settings are not touched.
MPS_DIR=${MPS_DIR:-/tmp/safemon-mps}

mps_available() { command -v nvidia-cuda-mps-control >/dev/null; }

mps_on() {  # export the pipe and log directories and start the control daemon (its rc)
  export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
}

mps_off() {  # quit the control daemon started by mps_on; later processes run without MPS
  echo quit | nvidia-cuda-mps-control
  sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
