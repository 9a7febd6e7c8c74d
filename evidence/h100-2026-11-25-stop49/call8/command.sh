bash scripts/gpu-suite rest
export PYTHONPATH=$PWD
timeout 200 python3 -m safemon audit determinism --repeats 10 --size 512 --out $OUT/det > $OUT/det.log 2>&1
