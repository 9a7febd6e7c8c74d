export BENCH_DIMS=1024,4096,64x4096x4096,256x1024x4096,1x4096x4096
export KERNELS_LIMIT=440 KERNEL_FILES="tests/kernels/test_gpu_splitk.py tests/kernels/test_gpu.py tests/kernels/test_gpu_transpose.py tests/kernels/test_gpu_rmt.py"
bash scripts/split-gpu bench kernels
