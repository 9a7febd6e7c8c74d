"""The systemd unit: parsed as INI, it has the service type, watchdog, restart policy, user and
hardening the deployment relies on."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.deploy.promql import DEPLOY_DIR

UNIT = DEPLOY_DIR / "systemd" / "safemon.service"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Parse a systemd unit (INI with repeatable keys): section -> key -> values in order.

    Raises ValueError on a line that is neither a comment, a section header nor `key=value`.
    """
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    logical = ""
    for raw in text.splitlines():
        line = logical + raw.strip()
        if line.endswith("\\"):  # continuation line
            logical = line[:-1] + " "
            continue
        logical = ""
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        if not sep or current is None or not key.strip():
            raise ValueError(f"not a unit-file line: {raw!r}")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_parse_unit_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a unit-file line"):
        parse_unit("[Service]\nthis is not a key\n")


def test_unit_has_the_required_keys() -> None:
    unit = parse_unit(UNIT.read_text(encoding="utf-8"))
    service = unit["Service"]
    expected_single = {
        "Type": "notify",
        "Restart": "on-failure",
        "User": "safemon",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "RuntimeDirectory": "safemon",
        "RuntimeDirectoryMode": "0700",
        "CapabilityBoundingSet": "",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
        "DevicePolicy": "closed",
    }
    for key, value in expected_single.items():
        assert service.get(key) == [value], key
    assert service["WatchdogSec"][0]
    assert any(
        v.startswith("char-nvidia") or v.startswith("/dev/nvidia") for v in service["DeviceAllow"]
    )
    assert "/dev/nvidia-uvm rw" in service["DeviceAllow"]
    assert "PrivateDevices" not in service, "PrivateDevices would hide /dev/nvidia*"
    (start,) = service["ExecStart"]
    assert start.split()[1:] == ["run", "--config", "/etc/safemon/config.yaml"]
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]
    assert service["NotifyAccess"] == ["main"]
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in service["Environment"]
    assert "SAFEMON_CONFIG=/etc/safemon/config.yaml" in service["Environment"]


def test_every_setting_is_commented() -> None:
    """Each Service setting (or block of related settings) has a comment explaining it."""
    lines = UNIT.read_text(encoding="utf-8").splitlines()
    in_service = False
    uncommented = []
    for i, line in enumerate(lines):
        if line.startswith("["):
            in_service = line == "[Service]"
            continue
        if not in_service or not line or line.startswith("#"):
            continue
        # Walk back over the block of settings this line belongs to, to its comment.
        j = i - 1
        while j >= 0 and lines[j] and not lines[j].startswith("#"):
            j -= 1
        if j < 0 or not lines[j].startswith("#"):
            uncommented.append(line)
    assert uncommented == []


def test_systemd_analyze_verify_knows_every_key(systemd_analyze: Path) -> None:
    proc = subprocess.run(
        [str(systemd_analyze), "verify", str(UNIT)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # The only acceptable complaint here: safemon is not installed at /opt/safemon on this host.
    problems = [
        line
        for line in (proc.stdout + proc.stderr).splitlines()
        if line.strip() and "is not executable: No such file or directory" not in line
    ]
    assert problems == []
