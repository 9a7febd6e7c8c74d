"""The Docker image and compose stack: CUDA runtime base, cuda13 extra, non-root user,
`/readyz` health check, and compose mounts that exist in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from safemon.config import DEFAULT_METRICS_PORT
from tests.deploy.promql import DEPLOY_DIR

DOCKER = DEPLOY_DIR / "docker"


def _instructions() -> list[tuple[str, str]]:
    """Dockerfile instructions as (KEYWORD, arguments), continuations joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (DOCKER / "Dockerfile").read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, args = line.partition(" ")
            out.append((keyword.upper(), args.strip()))
    return out


def _args(keyword: str) -> list[str]:
    return [a for k, a in _instructions() if k == keyword]


def test_image_is_cuda13_runtime_and_installs_the_cuda13_extra() -> None:
    (arg,) = [a for a in _args("ARG") if a.startswith("CUDA_IMAGE=")]
    assert re.fullmatch(r"CUDA_IMAGE=nvidia/cuda:13\.0\.\d+-runtime-ubuntu24\.04", arg)
    assert all(f.startswith("${CUDA_IMAGE}") for f in _args("FROM"))
    assert any("[cuda13]" in r for r in _args("RUN"))


def test_image_runs_as_non_root_with_healthcheck_and_metrics_port() -> None:
    (user,) = _args("USER")
    assert user.split(":")[0] not in {"root", "0"}
    # USER must come after the last RUN that needs root, and before the entrypoint.
    keywords = [k for k, _ in _instructions()]
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k == "RUN")
    (health,) = _args("HEALTHCHECK")
    assert health.endswith('CMD ["python3", "-m", "safemon.health"]')
    assert _args("EXPOSE") == [str(DEFAULT_METRICS_PORT)]
    env = " ".join(_args("ENV"))
    assert "SAFEMON_CONFIG=/etc/safemon/config.yaml" in env and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in env


def test_compose_runs_safemon_prometheus_grafana_with_existing_mounts() -> None:
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert set(services) == {"safemon", "prometheus", "grafana"}
    # Prometheus shares the daemon's network namespace, so 127.0.0.1:17650 in prometheus.yml works.
    assert services["safemon"]["environment"]["SAFEMON_METRICS__PORT"] == str(DEFAULT_METRICS_PORT)
    assert services["prometheus"]["network_mode"] == "service:safemon"
    for name in ("prometheus", "grafana"):
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DOCKER / source).resolve().exists(), f"{name}: {source} does not exist"
    assert "selftest" in " ".join(services["safemon"]["entrypoint"])
    # SAFEMON_CONFIG is a config file's path here too; its default exists.
    (config_mount,) = [v for v in services["safemon"]["volumes"] if v.endswith(":/etc/safemon/config.yaml:ro")]
    default = re.fullmatch(r"\$\{SAFEMON_CONFIG:-([^}]+)\}:.*", config_mount)
    assert default is not None and (DOCKER / default.group(1)).is_file(), config_mount
    devices = services["safemon"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    build = services["safemon"]["build"]
    assert (DOCKER / build["context"] / build["dockerfile"]).resolve() == (
        DOCKER / "Dockerfile"
    ).resolve()


def test_dockerfile_copies_only_paths_that_exist_in_the_build_context() -> None:
    context = (DOCKER / "../..").resolve()
    for args in _args("COPY"):
        if args.startswith("--from"):
            continue
        *sources, _dest = args.split()
        for source in sources:
            # README.md is the lead's (pyproject's `readme`); everything else is checked now.
            if source == "README.md":
                continue
            assert (context / source).exists() or Path(source).is_absolute(), source
