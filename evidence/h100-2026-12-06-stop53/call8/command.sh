set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader; echo "tree $(bash scripts/tree-digest)"
timeout 120 python3 scripts/torch_adapter_probe.py --reps 60 > $OUT/adapter-no-mps.txt 2>&1; echo "== no MPS rc=$?"; cat $OUT/adapter-no-mps.txt | tail -12
export CUDA_MPS_PIPE_DIRECTORY=/tmp/safemon-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/safemon-mps/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "MPS did not start"; exit 0; }
trap 'echo quit | nvidia-cuda-mps-control' EXIT
timeout 120 python3 scripts/torch_adapter_probe.py --reps 60 > $OUT/adapter-mps.txt 2>&1; echo "== MPS rc=$?"; cat $OUT/adapter-mps.txt | tail -12
