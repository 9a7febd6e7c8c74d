python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
rm -rf /tmp/o /tmp/safemon-split-out; mkdir -p /tmp/o; date -u | tee /tmp/o/date.txt
trap 'tar -czf $OUT/c6.tgz -C /tmp/o .' EXIT
timeout 200 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/ecc tests/bench/test_runtime_baselines_gpu.py 2>&1 | tail -8 | tee /tmp/o/gpu-ecc.log
timeout 120 python3 scripts/ecc_check_probe.py --json /tmp/o/ecc_check_probe.json 2>&1 | grep -v -i "warn" | tee /tmp/o/ecc_check_probe.txt
timeout 120 python3 scripts/ecc_model_probe.py 2>&1 | grep -v -i "warn" | tee /tmp/o/ecc_model_probe.txt
OUT=/tmp/o bash scripts/split-gpu vote 2>&1 | tail -16
OUT=/tmp/o REST_LIMIT=200 bash scripts/split-gpu rest 2>&1 | tail -4
