DEADLINE=555 LIMIT_kernels_main=300 bash scripts/gpu-suite kernels-main kernels-other
