set -u
mkdir -p $OUT
TREES="base=.device/base new=." MODES=mps PLACEMENTS=inline SPIN_S=0.005 ROUNDS=3 REQS=300 MODEL_REQS=30 bash scripts/runtime-ab 2>&1 | tail -30
cp /tmp/safemon-out/runtime-ab.tgz $OUT/ 2>/dev/null || true
python3 - /tmp/inline.yaml <<'PY'
import sys, yaml
cfg = yaml.safe_load(open("configs/2oo3.yaml"))
for ch in cfg["channels"]:
    ch["placement"] = "inline"
yaml.safe_dump(cfg, open(sys.argv[1], "w"))
PY
t0=$SECONDS
SAFEMON_TIMING__SPIN_S=0.005 PYTHONPATH=$PWD timeout 150 python3 examples/torch_digits.py --device cuda --config /tmp/inline.yaml --models cnn --reps 30 --layer-bench 4096 --out $OUT/torch-layer.json --run-dir /tmp/safemon-torch-run > $OUT/torch-layer.txt 2>&1
echo "== torch layer bench rc=$? $(( SECONDS - t0 )) s"
tail -8 $OUT/torch-layer.txt
cp /tmp/safemon-torch-run/daemon.log $OUT/torch-daemon.log 2>/dev/null
grep -E '"weight_registered"|"weight_evicted"|"channel_lost"|"fault"|warning|error' $OUT/torch-daemon.log | cut -c1-300 | tail -15
