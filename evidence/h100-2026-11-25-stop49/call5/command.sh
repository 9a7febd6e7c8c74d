LIMIT_rest=300 bash scripts/gpu-suite rest
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
timeout 150 python3 examples/torch_digits.py --device cuda --epochs 8 --reps 30 --layer-bench 4096 \
  --out $OUT/torch_example_gpu.json > $OUT/torch_example_gpu.log 2>&1
REQS=300 MODEL_REQS=60 timeout 170 bash scripts/split-gpu vote
