"""Run the vLLM test double as a local process (no container): its package unpatched, or with the sm80 patch set
(patches/sm80/*.patch, unified diffs) applied by the project's own applier (plugins/module_utils/unified_diff.py),
as the image role patches the real image; the stand-in nvidia-smi on PATH presenting the GPUs asked for, and a
small checkpoint. Used by the pytest fixtures (tests/double_tests, tests/unit) and by bench_speed.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DOUBLE = Path(__file__).resolve().parent
ROOT = DOUBLE.parents[2]
STANDIN_SMI = ROOT / "tests" / "testbed" / "standin-nvidia" / "bin" / "nvidia-smi"
MAKE_WEIGHTS = ROOT / "tests" / "testbed" / "make_test_weights.py"
ARTICLE_ARGS = [
    "--host", "127.0.0.1", "--tensor-parallel-size", "8", "--trust-remote-code", "--dtype", "bfloat16",
    "--gpu-memory-utilization", "0.95", "--max-model-len", "65536", "--kv-cache-dtype", "bfloat16",
    "--max-num-seqs", "16", "--max-num-batched-tokens", "8192", "--served-model-name", "glm-5.2-nvfp4",
    "--attention-config", '{"sparse_mla_force_mqa": true}', "--tool-call-parser", "glm47",
    "--enable-auto-tool-choice", "--reasoning-parser", "glm45",
    "--speculative-config", '{"method":"mtp","num_speculative_tokens":5}',
]  # fmt: skip


BIND_ATTEMPTS = 3  # starts of the double on a fresh port when the one chosen was taken before it bound


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PATCHES = DOUBLE / "patches"
SM80_PATCHES = sorted((PATCHES / "sm80").glob("*.patch"))  # 0001 ... 0005, applied in this order
BROKEN_PATCHES = PATCHES / "broken"
NO_DEFAULTS = "0004-xpu-sparse-metadata-fields-without-defaults.patch"


def _sm80(*, without: str | None = None, replace: tuple[str, Path] | None = None) -> list[Path]:
    """The sm80 patch set, one patch (a name prefix such as "0004") left out or replaced."""
    chosen = []
    for patch in SM80_PATCHES:
        if replace and patch.name.startswith(replace[0]):
            chosen.append(replace[1])
        elif not (without and patch.name.startswith(without)):
            chosen.append(patch)
    return chosen


# The installs the tests start: Python paths whose vllm package is the double's, unpatched or patched with
# (a variant of) the sm80 patch set.
INSTALLS: dict[str, list[Path]] = {
    "unpatched": [],
    "patched": _sm80(),
    "no-deepgemm-guard": _sm80(without="0002"),
    "no-sm89-guard": _sm80(without="0003"),
    "no-metadata-fields": _sm80(without="0004"),
    "no-warmup": _sm80(without="0005"),
    "dataclass-mistake": _sm80(replace=("0004", BROKEN_PATCHES / NO_DEFAULTS)),
}


class PatchSetError(Exception):
    """A patch of the set does not apply (every failing hunk, as the image build reports it)."""


def _applier():
    try:
        from ansible_collections.a800.vllm.plugins.module_utils import unified_diff
    except ImportError:  # outside pytest (tests/conftest.py puts collections/ on the path)
        sys.path.insert(0, str(ROOT / "collections"))
        from ansible_collections.a800.vllm.plugins.module_utils import unified_diff
    return unified_diff


def apply_patches(package_dir: Path, patches: list[Path]) -> list[str]:
    """Apply unified diffs to a vllm package directory with the project's applier (all or nothing); returns its
    log, one line per hunk. PatchSetError names every hunk that does not fit."""
    state, failures, log = _applier().apply_all(package_dir, [(p.name, p.read_text(encoding="utf-8")) for p in patches])
    if failures:
        raise PatchSetError("\n".join(failure.line("test double (tests/doubles/vllm/src)") for failure in failures))
    for rel, lines in state.items():
        target = package_dir / rel
        if lines is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("".join(lines), encoding="utf-8")
    return log


def make_install(base: Path, name: str, patches: list[Path]) -> Path:
    """A Python path holding the double's vllm package with `patches` applied in order."""
    path = base / name
    shutil.copytree(DOUBLE / "src", path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    apply_patches(path / "vllm", patches)
    return path


def make_installs(base: Path) -> dict[str, Path]:
    """Every install of INSTALLS: "unpatched" (the base image's package), "patched" (the sm80 patch set) and the
    variants with one patch missing or broken."""
    return {name: make_install(base, name, patches) for name, patches in INSTALLS.items()}


def make_weights(out: Path, shards: int = 4, shard_mib: int = 8) -> Path:
    subprocess.run(
        [sys.executable, str(MAKE_WEIGHTS), "--out", str(out), "--shards", str(shards), "--shard-mib", str(shard_mib)],
        check=True,
        capture_output=True,
    )
    return out


@dataclass
class Run:
    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def log(self) -> str:
        return self.log_path.read_text().replace("\r", "\n")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Launcher:
    def __init__(self, tmp: Path, installs: dict[str, Path], weights: Path) -> None:
        self.tmp, self.installs, self.weights = tmp, installs, weights
        self.runs: list[Run] = []

    def start(
        self,
        extra: list[str] | None = None,
        *,
        image: str = "patched",
        gpus: dict | None = None,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        wait: bool = True,
        timeout: float = 300,
    ) -> Run:
        """Start the double; with `wait`, until it logs that it serves or exits (a start the test expects to fail:
        the caller reads the log). A start still not ready after `timeout` real seconds is stopped and raises,
        with its log: a test never goes on against a server that is not there. The bound is only a safety net
        (a healthy start returns the moment it is ready), so it is wide enough for a saturated CI machine.

        The engine-ready timeout is the one the serve role sets for a cold load (VLLM_ENGINE_READY_TIMEOUT_S,
        simulated seconds): with vLLM's default of 600, a start whose weights the machine's memory pressure evicted
        from the page cache (a cold 433 GB load takes 1,320 simulated seconds) would fail, and whether it does
        would depend on what else ran before. A test of that timeout sets it itself."""
        for attempt in range(1, BIND_ATTEMPTS + 1):
            n = len(self.runs)
            bindir = self.tmp / f"bin-{n}"
            bindir.mkdir(parents=True)
            shutil.copy(STANDIN_SMI, bindir / "nvidia-smi")
            hw = self.tmp / f"gpus-{n}.json"
            hw.write_text(json.dumps({"driver": "580.95.05", **(gpus or {})}))
            port = free_port()
            full_env = {
                **os.environ,
                "PATH": f"{bindir}:{os.environ['PATH']}",
                "NVIDIA_STANDIN_CONFIG": str(hw),
                "PYTHONPATH": str(self.installs[image]),
                "VLLM_TEST_DOUBLE_TIME_SCALE": "2000",
                "VLLM_TEST_DOUBLE_SPEED": "50",
                "VLLM_ENGINE_READY_TIMEOUT_S": "3600",  # the catalogue's fix for a cold load (engine_ready_timeout)
                # vLLM's cache (the compiled graphs), one per launcher: its second start finds what the first left
                "VLLM_CACHE_ROOT": str(self.tmp / "vllm-cache"),
                **(env or {}),
            }
            argv = [str(self.weights), "--port", str(port), *(ARTICLE_ARGS if args is None else args), *(extra or [])]
            log_path = self.tmp / f"log-{n}.txt"
            with log_path.open("w") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "vllm", "serve", *argv], stdout=out, stderr=subprocess.STDOUT, env=full_env
                )
            run = Run(proc, port, log_path)
            self.runs.append(run)
            if wait:
                self.wait_ready(run, timeout)
            # free_port() gave a port that was free then; another process may have taken it before the double
            # bound it (an outgoing connection's ephemeral port): start again on another one.
            if not (wait and attempt < BIND_ATTEMPTS and "address already in use" in run.log.lower()):
                break
        return run

    @staticmethod
    def wait_ready(run: Run, timeout: float) -> None:
        """Wait until `run` logs that it serves or exits; one still not ready after `timeout` real seconds is
        stopped, and the TimeoutError carries its log."""
        began = time.monotonic()
        while "Application startup complete." not in run.log and run.proc.poll() is None:
            if time.monotonic() - began > timeout:
                run.proc.kill()
                run.proc.wait()
                raise TimeoutError(
                    f"the double on port {run.port} was not ready after {timeout:g} s (no 'Application startup "
                    f"complete.'); its log ends:\n{run.log[-3000:]}"
                )
            time.sleep(0.05)

    @staticmethod
    def finish(run: Run, timeout: float = 30) -> int:
        return run.proc.wait(timeout=timeout)

    def stop_all(self) -> None:
        for run in self.runs:
            if run.proc.poll() is None:
                run.proc.terminate()
                try:
                    run.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    run.proc.kill()
