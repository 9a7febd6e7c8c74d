set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader; echo "tree $(bash scripts/tree-digest)"
timeout 150 python3 -m pytest -p no:cacheprovider -q -m gpu tests/torch tests/runtime/test_inline_gpu.py > $OUT/tests.log 2>&1; echo "== gpu tests rc=$?"; tail -3 $OUT/tests.log
python3 - $OUT/inline.yaml <<'PY'
import sys, yaml
cfg = yaml.safe_load(open("configs/2oo3.yaml"))
for ch in cfg["channels"]:
    ch["placement"] = "inline"
yaml.safe_dump(cfg, open(sys.argv[1], "w"))
PY
ex() {  # tag
  SAFEMON_TIMING__SPIN_S=0.005 timeout 100 python3 examples/torch_digits.py --device cuda --config $OUT/inline.yaml \
    --models transformer --reps 30 --layer-bench 4096 --out $OUT/torch-$1.json --run-dir /tmp/tr-$1 > $OUT/torch-$1.txt 2>&1
  echo "== torch $1 rc=$?"; grep -E "latency|wrong|^layer" $OUT/torch-$1.txt
}
ex no-mps
export CUDA_MPS_PIPE_DIRECTORY=/tmp/safemon-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/safemon-mps/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "MPS did not start"; exit 0; }
trap 'echo quit | nvidia-cuda-mps-control' EXIT
ex mps
timeout 100 python3 scripts/torch_adapter_probe.py --reps 60 > $OUT/adapter-mps.txt 2>&1; echo "== adapter MPS rc=$?"; tail -10 $OUT/adapter-mps.txt
