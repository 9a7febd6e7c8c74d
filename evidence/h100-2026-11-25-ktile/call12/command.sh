export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install -q --no-index --find-links .device/wheels .device/wheels/*.whl >/dev/null 2>&1
mkdir -p /tmp/o12
cat > /tmp/b.py <<'PY'
import numpy as np, cupy as cp
from safemon.bench.runtime import _baselines, _model_operands, ModelShape
for r in range(3):
    mops = _model_operands(ModelShape(), np.random.default_rng(2026))
    b = _baselines(cp, [], {}, ModelShape(), mops, 10, 30, lambda s: None, {})
    print(r, {k: round(v["p50_us"]) for k, v in b.items() if k != "direct"}, flush=True)
PY
timeout 200 python3 /tmp/b.py 2>&1 | grep -v -i "warn\|^ *\^\|declared\|Remark" | tee /tmp/o12/baselines.txt
for r in 1 2; do rm -rf /tmp/safemon-split-out; bash scripts/split-gpu vote 2>&1 | grep "model"; cp /tmp/safemon-split-out/vote.md /tmp/o12/vote-$r.md; cp /tmp/safemon-split-out/vote.json /tmp/o12/vote-$r.json; done
tar -czf $OUT/c12.tgz -C /tmp/o12 .
