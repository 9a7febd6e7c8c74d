"""safemon: a runtime safety-pattern framework for GPU inference.

The public surface is re-exported here; see README.md for a tour.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from safemon.client import Client
from safemon.errors import (
    BackendUnavailableError,
    CompileError,
    ConfigError,
    DaemonSilentError,
    DaemonUnreachableError,
    DisagreementError,
    InvalidInputError,
    KernelCheckError,
    PatternError,
    SafemonError,
    SafeStateError,
    UncorrectableError,
    VoteTimeoutError,
)
from safemon.kernels.api import MatmulResult, matmul, protected_matmul
from safemon.kernels.catalog import TileConfig, Variant

try:
    __version__ = version("safemon")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "BackendUnavailableError",
    "Client",
    "CompileError",
    "ConfigError",
    "DaemonSilentError",
    "DaemonUnreachableError",
    "DisagreementError",
    "InvalidInputError",
    "KernelCheckError",
    "MatmulResult",
    "PatternError",
    "SafeStateError",
    "SafemonError",
    "TileConfig",
    "UncorrectableError",
    "Variant",
    "VoteTimeoutError",
    "__version__",
    "matmul",
    "protected_matmul",
]
