REQS=300 MODEL_REQS=60 REST_LIMIT=300 bash scripts/split-gpu vote rest
