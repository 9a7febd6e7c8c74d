set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PATH=$PWD/.device:$PATH
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader; echo "tree $(bash scripts/tree-digest)"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/safemon-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/safemon-mps/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "MPS did not start"; exit 0; }
trap 'echo quit | nvidia-cuda-mps-control' EXIT
timeout 60 python3 scripts/span_probe.py --placement inline --spin-s 0.005 --requests 300 > $OUT/span-80-mps.txt 2>&1; echo "== span 80 rc=$?"; cat $OUT/span-80-mps.txt
timeout 60 python3 scripts/span_probe.py --placement inline --spin-s 0.005 --requests 150 --model 64x4096x4 > $OUT/span-model-mps.txt 2>&1; echo "== span model rc=$?"; cat $OUT/span-model-mps.txt
SAFEMON_TIMING__SPIN_S=0.005 timeout 120 python3 scripts/runtime_profile.py --placement inline --model 64x4096x4 --requests 300 --sampler py-spy --out $OUT/prof-model > $OUT/prof-model.txt 2>&1; echo "== profile model rc=$?"; head -120 $OUT/prof-model.txt
