"""Fixtures that run the vLLM test double (tests/doubles/vllm/harness.py) as local processes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "doubles" / "vllm"))

from harness import ARTICLE_ARGS, DOUBLE, STANDIN_SMI, Launcher, make_installs, make_weights

__all__ = ["ARTICLE_ARGS", "DOUBLE", "STANDIN_SMI", "Launcher"]


@pytest.fixture(scope="session")
def installs(tmp_path_factory) -> dict[str, Path]:
    return make_installs(tmp_path_factory.mktemp("vllm-installs"))


@pytest.fixture(scope="session")
def weights(tmp_path_factory) -> Path:
    return make_weights(tmp_path_factory.mktemp("weights") / "GLM-5.2-NVFP4")


@pytest.fixture
def launcher(tmp_path, installs, weights) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path, installs, weights)
    yield launcher
    launcher.stop_all()
