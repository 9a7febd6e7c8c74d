LIMIT_kernels_main=530 bash scripts/gpu-suite kernels-main
