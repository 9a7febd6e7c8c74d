"""The benchmarks: every timing safemon reports comes from a module here.

Modules: `timing` (the one kernel timer and wall-clock percentiles every benchmark uses),
`overhead` (protected vs unprotected vs cuBLAS per variant and size, GPU), `api` (what a user
pays per call, wall clock, against `cupy.matmul`), `ecc` (ECC encode/check/decode throughput
against a device copy) and `vote` (end-to-end vote latency through a running daemon).
Results are reported, never asserted in tests. `safemon bench` is the command line.
"""
