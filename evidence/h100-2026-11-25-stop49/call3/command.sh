LIMIT_rest=330 bash scripts/gpu-suite rest
export PYTHONPATH=$PWD
timeout 150 python3 -m safemon bench --dims 80,1024,4096,1x4096x4096,64x4096x4096,256x1024x4096 --modes fma \
  --variants ones/T,ones/M,twos/M --api-dims 80x80x80,64x4096x4096,256x1024x4096,1x4096x4096,1024x1024x1024,4096 \
  --no-ecc --json $OUT/bench.json --markdown $OUT/bench.md 2>$OUT/bench.err | tail -42
timeout 90 python3 -m safemon bench --dims 1024,4096 --modes exact --variants crc32c/I,ones/I --api-dims none \
  --no-ecc --json $OUT/crc.json --markdown $OUT/crc.md 2>>$OUT/bench.err | tail -12
