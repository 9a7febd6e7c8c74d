python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o1; date -u | tee /tmp/o1/date.txt
trap 'tar -czf $OUT/c1.tgz -C /tmp/o1 .' EXIT
which py-spy; nproc; cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null
for spec in "--size 80x80x80" "--model 64x4096x4" "--size 1024x1024x64"; do
  tag=$(echo $spec | tr -d ' -')
  timeout 200 python3 scripts/runtime_profile.py --placement inline $spec --requests 1500 --sampler py-spy --out /tmp/o1/$tag > /tmp/o1/$tag.txt 2>&1; echo "$tag rc=$?"
  grep -E "round trip|py-spy ended" /tmp/o1/$tag.txt
  tar -czf $OUT/c1.tgz -C /tmp/o1 .
done
