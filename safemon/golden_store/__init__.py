"""The golden-pattern file store (`store`) and the built-in store's files (`data/`).

See `safemon.golden_store.store` for the layout; the patterns and their generator are
`safemon.patterns.golden` (no I/O).
"""

from safemon.golden_store.store import (
    BUILTIN_DIR,
    MANIFEST_NAME,
    build_patterns,
    load_patterns,
    verify_patterns,
)

__all__ = ["BUILTIN_DIR", "MANIFEST_NAME", "build_patterns", "load_patterns", "verify_patterns"]
