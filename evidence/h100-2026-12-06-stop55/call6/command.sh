set -u
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1
for r in 1 2; do
for tree in . .device/base; do
  for pl in inline process; do
    (cd $tree && PYTHONPATH=$PWD timeout 120 python3 scripts/.reg_probe.py (reg_probe.py here) $pl 2>&1 | sed "s|^|$tree |" | tail -4)
  done
done
done
