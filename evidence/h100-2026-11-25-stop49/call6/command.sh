LIMIT_rest=300 bash scripts/gpu-suite rest
