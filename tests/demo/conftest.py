"""One trained model for the whole demo test session (training takes a few seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from safemon.demo.app import F32, I64, DigitsMLP, load_or_train


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("safemon-cache")


@pytest.fixture(scope="session")
def trained(model_cache: Path) -> tuple[DigitsMLP, F32, I64]:
    model, x, y, _ = load_or_train(model_cache)
    return model, x, y
