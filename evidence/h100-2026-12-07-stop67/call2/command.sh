# device tool, carry [".device"], on the machine call 1 left warm
mkdir -p $OUT && (date -u +%FT%TZ; echo "tree $(bash scripts/tree-digest)") > $OUT/device.txt; MPS_AFTER_TESTS=1 BASE=. SPAN_LIMIT=9999 BASE_LIMIT=9999 TEST_LIMIT=9999 SPIN_LIMIT=9999 FLOOR_LIMIT=9999 VOTE_LIMIT=160 TORCH_LIMIT=160 TORCH_MODELS=transformer,cnn LAYER_BENCH=4096 DEADLINE=335 bash scripts/stop-gpu 2>&1 | tail -40
