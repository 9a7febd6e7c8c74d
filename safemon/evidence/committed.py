"""Where `safemon select` finds evidence when it is given no `--evidence` directory.

The evidence sets are committed in the source repository, under `evidence/<set>/store`
(one set per device and date, e.g. `evidence/h100-2026-11-22-levels/store`). They are not
package data: an installed wheel carries none, so outside a source checkout the caller must
name a store. `find_committed_store` looks in the repository that holds the imported
`safemon` package (a source or editable install) and returns the newest set, by directory
name, that holds readable evidence (schema 2) for the wanted device; sets written with an
older schema are skipped, never reinterpreted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from safemon.evidence.store import EvidenceError, EvidenceStore

__all__ = ["CommittedStore", "find_committed_store", "repository_evidence_dir"]


@dataclass(frozen=True)
class CommittedStore:
    """A found store: its root, the device slug in it, and where it was found (for the user)."""

    root: Path
    device: str
    origin: str


def repository_evidence_dir() -> Path | None:
    """`<repo>/evidence` of the checkout the imported package lives in, or None (a wheel)."""
    import safemon

    repo = Path(safemon.__file__).resolve().parent.parent
    ev = repo / "evidence"
    if ev.is_dir() and (repo / "pyproject.toml").is_file():
        return ev
    return None


def find_committed_store(device: str | None) -> CommittedStore:
    """The newest committed store with readable evidence for `device` (any device if None,
    provided the newest readable set holds exactly one).

    Raises:
        EvidenceError: not a source checkout, or no set holds readable evidence for the device.
    """
    base = repository_evidence_dir()
    if base is None:
        raise EvidenceError("no --evidence given and safemon is not running from a source "
                            "checkout (an installed package carries no evidence): pass --evidence DIR")
    skipped: list[str] = []
    for root in sorted((p for p in base.glob("*/store") if p.is_dir()), reverse=True):
        store = EvidenceStore(root)
        slugs = store.devices()
        if device is not None:
            from safemon.evidence.store import device_slug

            slugs = [s for s in slugs if s == device_slug(device)]
        elif len(slugs) != 1:
            continue
        for slug in slugs:
            try:
                store.dc_records(slug)
            except EvidenceError as exc:
                skipped.append(f"{root}: {str(exc).splitlines()[0]}")
                continue
            return CommittedStore(root, slug, f"committed evidence of the repository checkout ({root})")
    detail = ("; skipped: " + " | ".join(skipped)) if skipped else ""
    raise EvidenceError(f"no committed evidence set under {base} holds readable evidence for "
                        f"{device or 'a single device'}{detail}")
