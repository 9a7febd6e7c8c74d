python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o3; date -u | tee /tmp/o3/date.txt
trap 'tar -czf $OUT/c3.tgz -C /tmp/o3 .' EXIT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,pstate --format=csv | tee /tmp/o3/gpu.csv
SH=4096x4096x4096,64x4096x4096,256x1024x4096,1024x1024x1024,1x4096x4096,80x80x80,97x61x113
SP=unprotected/fma,ones/M/fma,twos/M/fma,ones/T/fma,ones/F/fma,ones/I/fma,unprotected/exact
for st in --status ""; do
  tag=cmp${st:+-status}
  timeout 250 python3 scripts/kernel_compare.py .device/exp/mmm_head47.cu --warm --repeats 30 $st \
    --shapes $SH --specs $SP --json /tmp/o3/$tag.json > /tmp/o3/$tag.txt 2>&1; echo "$tag rc=$?"
  grep -v "^compiled" /tmp/o3/$tag.txt | tail -60
  tar -czf $OUT/c3.tgz -C /tmp/o3 .
done
