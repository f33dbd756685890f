"""Shared helpers of the tests: import paths of the plugins, the nvidia-smi fixtures, and fixtures that run the
vLLM test double (tests/doubles/vllm/harness.py) as local processes."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
# The plugins are the collection a800.vllm (galaxy.yml; collections/ links to the repository): tests import them as
# ansible_collections.a800.vllm.plugins.{module_utils,filter,modules}.NAME, as Ansible does. The double's harness is
# importable by its name, and the a800vllm package from the repository root (which `pytest` alone does not import).
for _sub in ("collections", "tests/doubles/vllm", "."):
    _path = str(ROOT / _sub)
    if _path not in sys.path:
        sys.path.insert(0, _path)

ORDERS = ("default", "reverse", "shuffle")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("a800 test order", "prove that no test depends on the order tests run in")
    group.addoption(
        "--order",
        choices=ORDERS,
        default=os.environ.get("A800_TEST_ORDER", "default"),
        help="default: as collected; reverse: the whole collection reversed; shuffle: the test files in a random "
        "order, each file's tests forwards or backwards (groups of a parametrised module fixture stay together, "
        "so a server fixture starts once). Env A800_TEST_ORDER sets the default.",
    )
    group.addoption("--order-seed", type=int, default=None, help="the seed of --order shuffle (printed in the header)")


def _order_seed(config: pytest.Config) -> int:
    if config.getoption("order_seed") is None:
        config.option.order_seed = random.SystemRandom().randrange(10**6)
    return config.getoption("order_seed")


def _order_line(config: pytest.Config) -> str:
    order = config.getoption("order")
    if order == "shuffle":
        seed = _order_seed(config)
        return f"test order: shuffle, seed {seed} (again: --order shuffle --order-seed {seed})"
    return f"test order: {order}"


def pytest_report_header(config: pytest.Config) -> str:
    return _order_line(config)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The order again at the end, where `pytest -q` (which has no header) shows it too."""
    if config.getoption("order") != "default":
        terminalreporter.write_line(_order_line(config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = config.getoption("order")
    if order == "reverse":
        items.reverse()
    elif order == "shuffle":
        rng = random.Random(_order_seed(config))
        files: dict[str, list[pytest.Item]] = {}
        for item in items:
            files.setdefault(item.nodeid.split("::")[0], []).append(item)
        blocks = list(files.values())
        rng.shuffle(blocks)
        items[:] = [item for block in blocks for item in (block if rng.random() < 0.5 else reversed(block))]


FIXTURES = ROOT / "tests" / "fixtures"
# The vocabulary (roles/a800, listed first in every play): what a role's defaults point at, for the tests that run
# or render a role's files without a play of the project.
VOCABULARY_FILE = ROOT / "roles" / "a800" / "defaults" / "main" / "vocabulary.yml"
VOCABULARY = yaml.safe_load(VOCABULARY_FILE.read_text())
NVIDIA_SMI_FIXTURES = FIXTURES / "nvidia-smi"
REAL_H200 = NVIDIA_SMI_FIXTURES / "h200-x2"  # captured on a real 2x H200 machine
SYNTHETIC = NVIDIA_SMI_FIXTURES / "synthetic"  # hand-made, see synthetic/README.md
STANDIN_NVIDIA_SMI = ROOT / "tests" / "testbed" / "standin-nvidia" / "bin" / "nvidia-smi"


def load_script(path: Path | str, name: str | None = None) -> ModuleType:
    """A Python file that is not a plugin (a role's files/ script, a script without .py) as a module, registered in
    sys.modules (dataclasses look their module up there). The one loader of the tests."""
    import importlib.machinery
    import importlib.util

    path = Path(path)
    name = name or path.stem.replace("-", "_")
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


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
    """The double's vllm package, unpatched and with the sm80 patch set (and its variants, harness.py)."""
    from harness import make_installs

    return make_installs(tmp_path_factory.mktemp("vllm-installs"))


@pytest.fixture(scope="session")
def weights(tmp_path_factory) -> Path:
    """A small checkpoint shaped like GLM-5.2-NVFP4's (declared 433 GB)."""
    from harness import make_weights

    return make_weights(tmp_path_factory.mktemp("weights") / "GLM-5.2-NVFP4")


@pytest.fixture(scope="session")
def testbed_images() -> None:
    """The test bed's images in this machine's Docker engine (the simulated host, the vLLM test double tagged like
    the base image, the gateway stand-in, the probe) and the stand-in apt repository: tests/testbed/build-images.sh
    builds what is missing or changed (and starts an engine if none answers); a no-op when all is up to date."""
    import subprocess

    build = subprocess.run([str(ROOT / "tests" / "testbed" / "build-images.sh")], capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail(f"tests/testbed/build-images.sh failed ({build.returncode}):\n{build.stdout}{build.stderr}")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The real vLLM's tiny random-weight model (tests/contract/tiny_model.py), built in this run's temporary
    directory by whichever test asks first (locked, renamed into place when complete); never a left-over."""
    sys.path.insert(0, str(ROOT / "tests" / "contract"))
    try:
        import real_vllm
    finally:
        sys.path.remove(str(ROOT / "tests" / "contract"))
    return real_vllm.build_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture
def launcher(tmp_path, installs, weights):
    """Starts the double as local processes; stops them after the test."""
    from harness import Launcher

    launcher = Launcher(tmp_path, installs, weights)
    yield launcher
    launcher.stop_all()


def ansible_adhoc(*args: str) -> tuple[int, dict | None, str]:
    """Run `ansible ARGS` (a project module on this machine) with the JSON callback from the repository root.
    Returns (exit code, the JSON document or None, the raw output)."""
    import json
    import os
    import subprocess

    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(Path(sys.executable).parent / "ansible"), *args,
                          "-e", f"ansible_python_interpreter={sys.executable}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    out = run.stdout
    # ansible.cfg enables profile_tasks, whose timing lines come before and after the JSON document
    document = json.loads(out[out.index("{\n") : out.rindex("}") + 1]) if "{\n" in out else None
    return run.returncode, document, out + run.stderr


def evict_from_page_cache(paths) -> None:
    """Drop the files' pages from the page cache (posix_fadvise DONTNEED), so that a test starts cold."""
    import os

    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@contextlib.contextmanager
def locked_in_memory(paths):
    """Map the files and mlock(2) the mappings: their pages stay in the page cache whatever else presses on memory
    (the kernel neither reclaims nor drops locked pages), so that a test can rely on them being resident."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mlock.argtypes = libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    maps = []
    try:
        for path in paths:
            size = os.path.getsize(path)
            fd = os.open(path, os.O_RDONLY)
            try:
                addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            finally:
                os.close(fd)
            assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
            maps.append((addr, size))
            assert libc.mlock(addr, size) == 0, f"mlock: {os.strerror(ctypes.get_errno())} (root or RLIMIT_MEMLOCK)"
        yield
    finally:
        for addr, size in maps:
            libc.munmap(addr, size)
