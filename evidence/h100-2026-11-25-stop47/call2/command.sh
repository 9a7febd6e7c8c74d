python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o2; date -u | tee /tmp/o2/date.txt
trap 'tar -czf $OUT/c2.tgz -C /tmp/o2 .' EXIT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,pstate --format=csv | tee /tmp/o2/gpu.csv
timeout 400 python3 scripts/kernel_compare.py .device/exp/nofinite.cu --warm --repeats 30 \
  --shapes 4096x4096x4096,64x4096x4096,256x1024x4096,1024x1024x1024 \
  --specs unprotected/fma,ones/M/fma,twos/M/fma,ones/T/fma --json /tmp/o2/nofinite.json 2>&1 | tee /tmp/o2/nofinite.txt
