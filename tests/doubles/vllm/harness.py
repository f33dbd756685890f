"""Run the vLLM test double as a local process (no container): its package unpatched or with the sm80 overlay
copied over it, the stand-in nvidia-smi on PATH presenting the GPUs asked for, and a small checkpoint.
Used by the pytest fixtures (tests/double) and by bench_speed.py."""

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_installs(base: Path) -> dict[str, Path]:
    """Two Python paths holding the double's vllm package: as built, and with overlay/ copied over it."""
    unpatched, patched = base / "unpatched", base / "patched"
    shutil.copytree(DOUBLE / "src", unpatched, dirs_exist_ok=True)
    shutil.copytree(DOUBLE / "src", patched, dirs_exist_ok=True)
    shutil.copytree(DOUBLE / "overlay", patched, dirs_exist_ok=True)
    return {"unpatched": unpatched, "patched": patched}


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
        timeout: float = 30,
    ) -> Run:
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
            deadline = time.monotonic() + timeout
            while "Application startup complete." not in run.log:
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        return run

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
