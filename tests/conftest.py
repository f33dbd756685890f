"""Shared helpers of the tests: import paths of the plugins, the nvidia-smi fixtures, and fixtures that run the
vLLM test double (tests/doubles/vllm/harness.py) as local processes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The plugins are plain modules (no Ansible import needed): load them by their file names.
for _sub in ("plugins/module_utils", "plugins/filter", "tests/doubles/vllm"):
    _path = str(ROOT / _sub)
    if _path not in sys.path:
        sys.path.insert(0, _path)

FIXTURES = ROOT / "tests" / "fixtures"
NVIDIA_SMI_FIXTURES = FIXTURES / "nvidia-smi"
REAL_H200 = NVIDIA_SMI_FIXTURES / "h200-x2"  # captured on a real 2x H200 machine
SYNTHETIC = NVIDIA_SMI_FIXTURES / "synthetic"  # hand-made, see synthetic/README.md
STANDIN_NVIDIA_SMI = ROOT / "tests" / "testbed" / "standin-nvidia" / "bin" / "nvidia-smi"


def read_fixture(path: Path | str) -> str:
    """A fixture file's text; a relative path is taken under tests/fixtures/nvidia-smi."""
    path = Path(path)
    if not path.is_absolute():
        path = NVIDIA_SMI_FIXTURES / path
    return path.read_text(encoding="utf-8")


def strip_rc(text: str) -> str:
    """The output without the `# rc=N` line that capture.sh appends."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("# rc="))


@pytest.fixture
def real() -> Callable[[str], str]:
    """read a file of the real H200 capture: real("query.csv")."""
    return lambda name: read_fixture(REAL_H200 / name)


@pytest.fixture
def synthetic() -> Callable[[str], str]:
    """read a synthetic fixture file: synthetic("a800-x8-query.csv")."""
    return lambda name: read_fixture(SYNTHETIC / name)


@pytest.fixture(scope="session")
def installs(tmp_path_factory) -> dict[str, Path]:
    """The double's vllm package, unpatched and with the sm80 overlay."""
    from harness import make_installs

    return make_installs(tmp_path_factory.mktemp("vllm-installs"))


@pytest.fixture(scope="session")
def weights(tmp_path_factory) -> Path:
    """A small checkpoint shaped like GLM-5.2-NVFP4's (declared 433 GB)."""
    from harness import make_weights

    return make_weights(tmp_path_factory.mktemp("weights") / "GLM-5.2-NVFP4")


@pytest.fixture
def launcher(tmp_path, installs, weights):
    """Starts the double as local processes; stops them after the test."""
    from harness import Launcher

    launcher = Launcher(tmp_path, installs, weights)
    yield launcher
    launcher.stop_all()
