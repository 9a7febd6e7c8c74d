python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o10; rm -rf /tmp/o10/*; date -u | tee /tmp/o10/date.txt
trap 'tar -czf $OUT/c10.tgz -C /tmp/o10 .' EXIT
timeout 200 python3 scripts/kernel_compare.py .device/exp/mmm_prev47.cu --warm --repeats 30 --status \
  --shapes 4096x4096x4096,1024x1024x1024,64x4096x4096 --specs unprotected/fma,ones/M/fma,twos/M/fma,ones/T/fma \
  --json /tmp/o10/cmp-status.json > /tmp/o10/cmp-status.txt 2>&1; echo "cmp rc=$?"
grep -v "^compiled" /tmp/o10/cmp-status.txt | cut -c1-140
