"""How a runtime-bench report names a placement: its name, and who spins.

`placement_label(pl)` for one entry of a `safemon.bench_runtime/2` file's `placements`:
"inline (spin 5 ms)" when the daemon and client spin (`spin_s`), "stream (client spin 5
ms)" when only the client does (`client_spin_s`: stream channels' daemon does not), else
the placement's name alone (evidence without either key included).
"""

from __future__ import annotations

from typing import Any

__all__ = ["placement_label"]


def placement_label(pl: dict[str, Any]) -> str:
    """The placement's name with its busy-wait window, as the reports print it."""
    spin, client_spin = pl.get("spin_s") or 0.0, pl.get("client_spin_s") or 0.0
    return str(pl["placement"]) + (f" (spin {spin * 1e3:g} ms)" if spin else
                                   f" (client spin {client_spin * 1e3:g} ms)" if client_spin
                                   else "")
