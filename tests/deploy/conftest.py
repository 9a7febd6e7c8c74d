"""Session fixtures for the deployment checks: the Prometheus tool chain (`promtool`, `prometheus`).

CI is a fresh Debian container where we are root, so the fixture installs Debian's `prometheus`
package (which ships both binaries) once per session when they are missing. It skips only when
apt itself is absent, because then there is no sanctioned way to get the binaries.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

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
    # noninteractive: no debconf prompts in CI. policy-rc.d is not touched: without systemd the
    # package's postinst cannot start the service, which is what we want (we start our own).
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"],
    ):
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} failed with exit code {proc.returncode}:\n"
                f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            )


@pytest.fixture(scope="session")
def prometheus_tools() -> PrometheusTools:
    """`promtool` and `prometheus`, installed through apt on first use (at most once per session)."""
    tools = _find_tools()
    if tools is not None:
        return tools
    if shutil.which("apt-get") is None:
        pytest.skip(
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
