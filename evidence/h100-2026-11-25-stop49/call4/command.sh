LIMIT_rest=400 bash scripts/gpu-suite rest
