export PYTHONUNBUFFERED=1
REST_LIMIT=400 bash scripts/split-gpu rest vote 2>&1 | tail -22
export PYTHONPATH=$PWD
date -u
timeout 200 python3 examples/torch_digits.py --device cuda --epochs 8 --reps 30 --layer-bench 4096 --out $OUT/torch_example_gpu.json --run-dir /tmp/safemon-torch-run > $OUT/torch_example_gpu.log 2>&1; echo "torch rc=$?"
grep -v -i "warn" $OUT/torch_example_gpu.log | tail -22
