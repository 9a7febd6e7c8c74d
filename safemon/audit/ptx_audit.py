"""The PTX audit of whole builds: compile each to PTX, run every static check, collect.

`audit_builds` is what `safemon audit ptx` runs: by default over `builds.shipped_builds()`,
or over one `--source` file.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from safemon.audit.builds import compile_ptx, describe, is_exact, param_kinds
from safemon.audit.findings import Finding
from safemon.audit.ptx import parse_ptx
from safemon.audit.static_audit import audit_ptx_text
from safemon.kernels.compiler import KernelBuild

__all__ = ["BuildReport", "audit_build", "audit_builds"]


@dataclass
class BuildReport:
    """The audit of one build: its label, whether exact, the kernels seen and the findings."""

    build: str
    exact: bool
    kernels: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"build": self.build, "exact": self.exact, "kernels": self.kernels,
                "findings": [f.as_dict() for f in self.findings]}


def audit_build(build: KernelBuild, *, nvcc: str = "nvcc", arch: str = "sm_90") -> BuildReport:
    """Compile `build` to PTX and audit it.

    Raises:
        NvccError: nvcc is missing or rejects the source.
    """
    label = describe(build)
    ptx = compile_ptx(build, nvcc=nvcc, arch=arch)
    names = [k.name for k in parse_ptx(ptx)[0]]
    kinds = param_kinds(build, names, nvcc=nvcc)
    findings, kernels = audit_ptx_text(ptx, label, exact=is_exact(build), params=kinds)
    return BuildReport(label, is_exact(build), kernels, findings)


def audit_builds(builds: Sequence[KernelBuild], *, nvcc: str = "nvcc", arch: str = "sm_90",
                 jobs: int = 2) -> list[BuildReport]:
    """`audit_build` over `builds`, `jobs` nvcc processes at a time, in the given order."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda b: audit_build(b, nvcc=nvcc, arch=arch), builds))
