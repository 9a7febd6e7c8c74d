"""Compile GPU test kernels in parallel before the tests run them (device machine only).

The suites use hundreds of builds; compiled one after the other in the test process, the
compiles alone outlast a device call. They use `safemon.kernels.precompile` (the same
helper `safemon bench` uses): `warm_kernel` in the reference workers that already run per
case, `warm_kernels` for a whole module's builds at once.
"""

from __future__ import annotations

from collections.abc import Iterable

from safemon.kernels.catalog import Variant
from safemon.kernels.precompile import compile_variant, precompile


def warm_kernel(variant: Variant) -> bool:
    """Compile `variant`'s kernel in this process; True when it compiled."""
    return compile_variant(variant)


def warm_kernels(variants: Iterable[Variant]) -> int:
    """Compile every distinct build among `variants` in worker processes; how many compiled."""
    return precompile(variants)
