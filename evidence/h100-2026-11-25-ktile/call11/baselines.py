import numpy as np, cupy as cp
from safemon.bench.runtime import _baselines, _model_operands, ModelShape
for r in range(3):
    rng = np.random.default_rng(2026)
    mops = _model_operands(ModelShape(), rng)
    b = _baselines(cp, [], {}, ModelShape(), mops, 10, 30, lambda s: None, {})
    print(r, {k: round(v["p50_us"]) for k, v in b.items() if k != "direct"}, flush=True)
