python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1
date -u | tee $OUT/date.txt
OLD=$PWD/.device/ab_old
timeout 200 python3 scripts/runtime_cpu_probe.py --device --placement inline --size 80 --requests 400 --rounds 4 --tree $OLD --out $OUT/cpu-inline-80.json 2>/dev/null | tee $OUT/cpu-inline-80.md
timeout 200 python3 scripts/runtime_cpu_probe.py --device --placement inline --model 64x4096x4 --requests 100 --rounds 4 --tree $OLD --out $OUT/cpu-inline-model.json 2>/dev/null | tee $OUT/cpu-inline-model.md
timeout 180 python3 scripts/runtime_cpu_probe.py --device --placement process --size 80 --requests 400 --rounds 3 --tree $OLD --out $OUT/cpu-process-80.json 2>/dev/null | tee $OUT/cpu-process-80.md
