LIMIT_kernels_other=540 bash scripts/gpu-suite kernels-other
