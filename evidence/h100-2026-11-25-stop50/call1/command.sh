ROUNDS=2 PINS="3 3,4" timeout 580 bash scripts/affinity-gpu hop span
