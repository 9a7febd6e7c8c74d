# .device/mmm_base.cu = `git show 4f96c26:safemon/kernels/cuda/mmm.cu` (before KSTEP_ROLLED)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1
mkdir -p $OUT/cmp
timeout 230 python3 scripts/kernel_compare.py .device/mmm_base.cu --repeats 10 --shapes 1024x1024x1024,4096x4096x4096 \
  --specs crc32c/I/exact,crc32c/I/fma --json $OUT/cmp/rolled-vs-unrolled.json > $OUT/cmp/rolled-vs-unrolled.txt 2>&1
DEADLINE=300 bash scripts/gpu-suite rest
