python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p /tmp/o13; date -u | tee /tmp/o13/date.txt
trap 'tar -czf $OUT/c13.tgz -C /tmp/o13 .' EXIT
timeout 240 python3 scripts/runtime_profile.py --placement inline --size 80x80x80 --requests 2000 --out /tmp/o13/prof > /tmp/o13/profile.txt 2>&1; echo "rc=$?"
head -3 /tmp/o13/profile.txt
