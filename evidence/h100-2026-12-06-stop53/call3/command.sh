set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader
for size in 80x80x80 1024x1024x64; do
  timeout 120 python3 scripts/floor_probe.py --size $size --requests 1000 > $OUT/floor-$size-no-mps.txt 2>&1; echo "== $size no MPS rc=$?"; cat $OUT/floor-$size-no-mps.txt
done
export CUDA_MPS_PIPE_DIRECTORY=/tmp/safemon-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/safemon-mps/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "MPS did not start"; exit 0; }
trap 'echo quit | nvidia-cuda-mps-control' EXIT
timeout 120 python3 scripts/floor_probe.py --size 80x80x80 --requests 1000 > $OUT/floor-80x80x80-mps.txt 2>&1; echo "== 80 MPS rc=$?"; cat $OUT/floor-80x80x80-mps.txt
