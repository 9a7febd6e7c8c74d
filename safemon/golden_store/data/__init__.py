"""Package data: the built-in golden pattern store (see safemon.patterns.golden)."""
