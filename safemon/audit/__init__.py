"""Kernel audits behind bit-exact voting (docs/AUDIT.md).

Static (no GPU): `safemon.audit.ptx_audit.audit_builds` parses the PTX of every shipped build
and checks barrier intervals, races, barrier divergence, fma in exact builds, float atomics,
`.ftz` and global stores. GPU: `safemon.audit.determinism_run.run_determinism` measures
run-to-run differences and block orderings. Metrics: `safemon.audit.determinism`.
"""

from safemon.audit.determinism import differing_elements, kendall_tau
from safemon.audit.findings import Finding

__all__ = ["Finding", "differing_elements", "kendall_tau"]
