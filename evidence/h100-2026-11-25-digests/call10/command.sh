python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u
K=safemon/kernels/cuda/mmm.cu
for t in "large 8" "large 12" "large 16" "large 24" "wide64 8" "wide64 12" "wide64 16"; do set -- $t
  echo "=== tile $1 split $2"
  python3 scripts/kernel_compare.py $K --tile $1 --split $2 --shapes 256x1024x4096,256x4096x4096,128x4096x4096,192x4096x4096 --specs unprotected/fma,ones/T/fma --repeats 50 2>&1 | grep -v -i "warning\|remark\|^ *$\|declared\|different bits"
done 2>&1 | tee $OUT/tiles.txt
for t in "half 8" "half 16" "wide64 8" "wide64 16"; do set -- $t
  echo "=== tile $1 split $2"
  python3 scripts/kernel_compare.py $K --tile $1 --split $2 --shapes 64x4096x4096,64x11008x4096 --specs unprotected/fma --repeats 50 2>&1 | grep -v -i "warning\|remark\|^ *$\|declared\|different bits"
done 2>&1 | tee -a $OUT/tiles.txt
