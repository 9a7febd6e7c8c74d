"""The demo: a digits MLP protected by safemon, with live fault injection (`safemon demo`).

- `safemon.demo.app`: the model, its training and cache, pluggable `matmul(x, weight_id)`.
- `safemon.demo.faulty`: the fault schedule and the app run without safemon.
- `safemon.demo.runner`: the protected run through `safemon.Client` and `run_demo`.
- `safemon.demo.report`: the report (table and JSON).
"""
