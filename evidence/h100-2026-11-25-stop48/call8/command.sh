python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
O=/tmp/s48c8; rm -rf $O; mkdir -p $O; date -u | tee $O/date.txt; sha256sum safemon/kernels/catalog.py safemon/kernels/cuda/mmm.cu tests/kernels/case_references.py | tee $O/tree.txt
trap 'tar -czf $OUT/c8.tgz -C $O .' EXIT
ls ~/.cupy/kernel_cache 2>/dev/null | wc -l | sed 's/^/cached kernels: /'
start=$(date +%s)
timeout 430 python3 -m pytest -v -rfE -p no:cacheprovider -p no:randomly -p no:benchmark -n 14 -m "gpu and not slow" tests/kernels \
  -k "not campaign" > $O/gpu-tests-kernels-v.log 2>&1; echo "kernels rc=$? in $(( $(date +%s) - start )) s"
python3 - $O/gpu-tests-kernels-v.log <<'PY'
import re, subprocess, sys
log = open(sys.argv[1]).read()
done = {b: a for a, b in re.findall(r"(PASSED|FAILED|ERROR|SKIPPED)\s+(tests/\S+)", log)}
from collections import Counter
print(Counter(done.values()))
out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:benchmark", "-m", "gpu and not slow",
                      "tests/kernels", "-k", "not campaign"], capture_output=True, text=True).stdout
ids = [l for l in out.splitlines() if l.startswith("tests/")]
missing = [i for i in ids if i not in done]
print("collected", len(ids), "reported", len(done), "missing", len(missing))
for i in missing[:40]: print("  not reported:", i)
for k, v in done.items():
    if v != "PASSED": print(" ", v, k)
PY
