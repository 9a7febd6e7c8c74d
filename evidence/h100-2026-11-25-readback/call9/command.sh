python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv; date -u
python3 scripts/splitk_probe.py .device/splitk_head.cu --json $OUT/splitk_probe.json 2>&1 | tee $OUT/splitk_probe.txt
OUT2=$OUT; bash scripts/split-gpu bench > /dev/null 2>&1; grep -A12 "API wall" /tmp/safemon-split-out/bench.md; grep -A12 "Kernel time" /tmp/safemon-split-out/bench.md
KERNEL_FILES=tests/kernels/test_gpu_splitk.py KERNELS_LIMIT=380 bash scripts/split-gpu kernels | tail -3
date -u
