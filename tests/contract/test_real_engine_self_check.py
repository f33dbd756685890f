"""The real-engine image's CPU self-check (tests/testbed/real-engine/self_check.py, the image role's image_self_check
in molecule/real-engine) held to the real vLLM CPU build of .venv-vllm, on this machine's CPU.

The wheel carries three builds of its kernels (AVX-512 with BF16, AVX-512, AVX2) and vLLM loads the one the CPU runs.
A self-check that imported ``vllm._C`` itself, the AVX-512-BF16 build, died of SIGILL (exit 132) on a CI machine with
only AVX2 and failed the real-engine scenario's converge; on an AVX-512 machine it passed. Run here, where the
contract suite runs, it fails on such a machine before the scenario does."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from real_vllm import vllm_env, vllm_python

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "testbed" / "real-engine" / "self_check.py"

pytestmark = pytest.mark.contract


def test_the_cpu_self_check_passes_on_this_machines_cpu():
    # as the image role runs it: python3 -c <the script>, with the image's VLLM_TARGET_DEVICE=cpu (vllm_env sets it)
    run = subprocess.run([vllm_python(), "-c", SCRIPT.read_text()], capture_output=True, text=True,
                         env=vllm_env(), timeout=300)  # fmt: skip
    assert run.returncode == 0, f"rc {run.returncode}: {run.stdout[-1000:]} {run.stderr[-2000:]}"
    ok = "cpu self-check: ok (platform cpu, CPU_ATTN, KV cache layouts ['LBHNC'])"
    assert run.stdout.strip().splitlines()[-1] == ok, run.stdout
