python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u
S=1x4096x4096,1x11008x4096,1x14336x4096,8x4096x4096,1x4096x11008,1x5120x5120,1x2048x2048
for cfg in "3 0" "2 0" "3 24" "2 16" "4 24" "3 16"; do
  set -- $cfg
  sp=""; [ "$2" != 0 ] && sp="--split $2"
  echo "=== MIN_BLOCKS=$1 split=${2/0/auto}"
  python3 scripts/kernel_compare.py safemon/kernels/cuda/mmm.cu -D MIN_BLOCKS=$1 --tile skinny $sp --shapes $S --specs unprotected/fma,ones/T/fma --repeats 50 2>&1 | grep -v -i "warning\|remark\|^ *$\|declared"
done 2>&1 | tee $OUT/skinny_minblocks.txt
