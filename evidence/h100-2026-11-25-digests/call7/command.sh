python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/tmp/pip.log 2>&1 || tail /tmp/pip.log
export PYTHONUNBUFFERED=1
date -u | tee $OUT/date.txt
git log -1 --format=%h 2>/dev/null | tee -a $OUT/date.txt
for r in 1 2; do for tree in old new; do
  if [ $tree = old ]; then pp="$PWD/.device/ab_old:$PWD:$PWD/scripts"; else pp="$PWD:$PWD/scripts"; fi
  echo "=== $tree round $r 80^3"; PYTHONPATH=$pp timeout 120 python3 scripts/span_probe.py --placement inline --requests 300 2>&1 | grep -v -i warn > $OUT/span-$tree-$r.txt; head -3 $OUT/span-$tree-$r.txt | tail -1
  echo "=== $tree round $r model"; PYTHONPATH=$pp timeout 150 python3 scripts/span_probe.py --placement inline --model 64x4096x4 --requests 100 2>&1 | grep -v -i warn > $OUT/span-model-$tree-$r.txt; head -3 $OUT/span-model-$tree-$r.txt | tail -1
  echo "=== $tree round $r 80^3 process"; PYTHONPATH=$pp timeout 120 python3 scripts/span_probe.py --placement process --requests 300 2>&1 | grep -v -i warn > $OUT/span-process-$tree-$r.txt; head -3 $OUT/span-process-$tree-$r.txt | tail -1
done; done
cd $OUT && tar czf spans.tgz span-*.txt && rm span-*.txt
