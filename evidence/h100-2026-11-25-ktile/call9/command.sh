export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
rm -rf /tmp/safemon-split-out
bash scripts/split-gpu vote 2>&1 | tail -20
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1
mkdir -p /tmp/o9
timeout 240 python3 examples/torch_digits.py --device cuda --epochs 8 --reps 30 --layer-bench 4096 --out /tmp/o9/torch_example_gpu.json > /tmp/o9/torch_example_gpu.log 2>&1; echo "torch rc=$?"
tail -30 /tmp/o9/torch_example_gpu.log
tar -czf $OUT/c9.tgz -C /tmp/o9 .
