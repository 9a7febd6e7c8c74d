"""Repository hygiene the deployment docs rely on: every relative link and cited file exists,
no text cites the design document that is not in the repository, every `safemon COMMAND` in
the docs and examples is a real sub-command, and LICENSE is the licence pyproject declares."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from safemon.cli import COMMAND_MODULES
from tests.deploy.promql import REPO_ROOT

#: Text the project writes (generated evidence and third-party schemas excluded).
TEXT_GLOBS = ("*.md", "safemon/**/*.py", "tests/**/*.py", "examples/**/*.py", "deploy/**/*.yaml",
              "deploy/**/*.yml", "deploy/**/*.md", "deploy/**/Dockerfile", "deploy/**/*.service",
              "configs/*.yaml", "docs/*.md", "scripts/*")
_MD_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_COMMAND = re.compile(r"`safemon ([a-z][a-z-]*)")


def text_files() -> list[Path]:
    files = {p for g in TEXT_GLOBS for p in REPO_ROOT.glob(g) if p.is_file()}
    return sorted(p for p in files if ".venv" not in p.parts)


def test_nothing_cites_the_missing_design_document() -> None:
    assert not (REPO_ROOT / "DESIGN.md").exists()
    citing = [str(p.relative_to(REPO_ROOT)) for p in text_files()
              if "DESIGN.md" in p.read_text(encoding="utf-8", errors="replace")
              and p.name != Path(__file__).name]
    assert citing == []


@pytest.mark.parametrize("doc", sorted({*REPO_ROOT.glob("*.md"), *REPO_ROOT.glob("docs/*.md"),
                                        *REPO_ROOT.glob("deploy/**/*.md")}),
                         ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_relative_markdown_links_exist(doc: Path) -> None:
    for target in _MD_LINK.findall(doc.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (doc.parent / target).exists(), f"{doc.name}: broken link {target}"


def test_documented_commands_exist() -> None:
    for path in [*REPO_ROOT.glob("*.md"), *REPO_ROOT.glob("deploy/**/*.md"),
                 *REPO_ROOT.glob("examples/*.py")]:
        for command in _COMMAND.findall(path.read_text(encoding="utf-8")):
            assert command in COMMAND_MODULES, f"{path.name}: `safemon {command}` does not exist"


def test_license_file_matches_pyproject() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    text = (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
