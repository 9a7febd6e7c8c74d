python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u | tee $OUT/date.txt
python3 scripts/splitk_probe.py .device/splitk_head.cu --json $OUT/splitk_probe.json 2>&1 | tee $OUT/splitk_probe.txt
KERNEL_FILES=tests/kernels/test_gpu_splitk.py KERNELS_LIMIT=480 bash scripts/split-gpu kernels | tail -3
date -u
