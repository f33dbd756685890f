"""The test bed shows NVIDIA's "GPUs lost on systemctl daemon-reload" (https://github.com/NVIDIA/nvidia-docker/issues/1730)
on a throw-away simulated host: tests/testbed/check-nvml-reload.sh, run end to end (docs/testbed.md).

Without /dev/char links a --gpus container's nvidia-smi fails after a daemon-reload; after
`nvidia-ctk system create-dev-char-symlinks --create-all` a new container keeps its GPUs. The script removes its
host and volume itself; about 15 s when the images are up to date, bounded here at 10 minutes.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import ROOT

pytestmark = pytest.mark.usefixtures("testbed_images")
SCRIPT = ROOT / "tests" / "testbed" / "check-nvml-reload.sh"
NVML_LOST = "Failed to initialize NVML: Unknown Error"


def docker_names(kind: str) -> list[str]:
    cmd = ["docker", kind, "ls", "-q"] if kind == "volume" else ["docker", "ps", "-a", "--format", "{{.Names}}"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout.split()


def test_gpus_lost_on_daemon_reload_without_dev_char_links():
    name = f"nvml-test-pytest-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if k != "KEEP"}
    run = subprocess.run([str(SCRIPT), name], capture_output=True, text=True, timeout=600, env=env)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "PASS: GPUs lost on daemon-reload without /dev/char links, kept with them" in out
    section_a = out.split("=== (a)")[1].split("=== (b)")[0]
    section_b = out.split("=== (b)")[1]
    assert f"{NVML_LOST}\n(rc 255)" in section_a
    assert '"protected": false' in section_a
    assert "INFO[0000] Creating link /dev/char/195:0 => /dev/nvidia0" in section_b
    assert '"protected": true' in section_b
    assert "ok: nvidia-smi -L in it after the reload\n" in section_b
    assert name not in docker_names("container")
    assert f"{name}-docker" not in docker_names("volume")
