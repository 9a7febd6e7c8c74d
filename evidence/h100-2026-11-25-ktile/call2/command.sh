python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o; date -u | tee /tmp/o/date.txt
S=4096x4096x4096,2048x2048x2048,1024x1024x1024,64x4096x4096,256x1024x4096,1x4096x4096,80x80x80,97x61x113
for r in 1 2; do
timeout 250 python3 scripts/kernel_compare.py .device/mmm_head.cu --warm --repeats 30 --shapes $S \
  --specs unprotected/fma,ones/T/fma,twos/T/fma,xor/T/fma,ones/T/exact --json /tmp/o/tlast-$r.json 2>&1 \
  | grep -v -i "warn\|^ *\^\|declared but\|Remark\|^ *$" | tee /tmp/o/tlast-$r.txt
done
tar -czf $OUT/c2.tgz -C /tmp/o .
