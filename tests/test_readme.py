"""The README's short tour says what the code does (issue 11: its `r.variant` repr was
false once)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import safemon

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_tours_variant_repr_is_what_protected_matmul_returns() -> None:
    text = README.read_text()
    m = re.search(r"^r\.variant +# (.+)$", text, re.MULTILINE)
    assert m, "the tour's r.variant line is gone"
    a = np.random.default_rng(0).standard_normal((80, 80)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((80, 80)).astype(np.float32)
    r = safemon.protected_matmul(a, b, checksum="ones", level="I", backend="numpy")
    assert repr(r.variant) == m.group(1)
    assert r.c.shape == (80, 80) and r.c.dtype == np.float32 and r.es.dtype == np.uint32
