python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o12; date -u | tee /tmp/o12/date.txt
trap 'tar -czf $OUT/c12.tgz -C /tmp/o12 .' EXIT
timeout 300 python3 examples/torch_digits.py --device cuda --epochs 8 --reps 30 --layer-bench 4096 --out /tmp/o12/torch_example_gpu.json > /tmp/o12/torch_example_gpu.log 2>&1; echo "torch rc=$?"
tail -30 /tmp/o12/torch_example_gpu.log
