"""The double as an image: tagged like the prod base image, patched by copying overlay/ over the installed vllm
package (as the image role patches the real image), and behaving differently before and after the patch."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from harness import ARTICLE_ARGS, DOUBLE, STANDIN_SMI

BASE = "vllm/vllm-openai:v0.26.0"
PATCHED = "a800-testbed/vllm-openai:v0.26.0-glm52-sm80-test"


def docker(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, **kw)


pytestmark = pytest.mark.usefixtures("testbed_images")


@pytest.fixture(scope="module")
def patched_image(tmp_path_factory, testbed_images) -> str:
    site = docker(
        "run", "--rm", "--entrypoint", "python3", BASE, "-c", "import os, vllm; print(os.path.dirname(vllm.__file__))"
    ).stdout.strip()
    ctx = tmp_path_factory.mktemp("patch")
    subprocess.run(["cp", "-r", str(DOUBLE / "overlay" / "vllm"), str(ctx / "overlay")], check=True)
    (ctx / "Dockerfile").write_text(f"FROM {BASE}\nCOPY overlay/ {site}/\n")
    docker("build", "-q", "-t", PATCHED, str(ctx), env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/bin:/usr/local/bin"})
    return PATCHED


def run_image(image: str, weights, tmp_path, *extra: str) -> subprocess.CompletedProcess:
    hw = tmp_path / "gpus.json"
    hw.write_text(json.dumps({"driver": "580.95.05"}))
    return docker(
        "run",
        "--rm",
        "-v",
        f"{STANDIN_SMI}:/usr/bin/nvidia-smi:ro",
        "-v",
        f"{hw}:/etc/nvidia-standin/gpus.json:ro",
        "-v",
        f"{weights}:/models/GLM-5.2-NVFP4:ro",
        "-e",
        "VLLM_TEST_DOUBLE_TIME_SCALE=5000",
        *extra,
        image,
        "/models/GLM-5.2-NVFP4",
        *ARTICLE_ARGS,
        check=False,
        timeout=120,
    )


def test_base_image_is_tagged_like_the_prod_base():
    labels = json.loads(docker("image", "inspect", "-f", "{{json .Config.Labels}}", BASE).stdout)
    assert labels["a800-testbed.double"] == "vllm"
    entrypoint = json.loads(docker("image", "inspect", "-f", "{{json .Config.Entrypoint}}", BASE).stdout)
    assert entrypoint == ["vllm", "serve"]


def test_unpatched_image_fails_on_sm80(weights, tmp_path):
    result = run_image(BASE, weights, tmp_path)
    assert result.returncode == 1
    assert "No valid attention backend found" in result.stderr + result.stdout


def test_patched_image_serves(patched_image, weights, tmp_path):
    name = f"double-{int(time.time() * 1000)}"
    result = run_image(patched_image, weights, tmp_path, "-d", "--name", name)
    assert result.returncode == 0, result.stderr
    try:
        deadline = time.monotonic() + 60
        logs = ""
        while time.monotonic() < deadline and "Application startup complete." not in logs:
            time.sleep(0.5)
            out = docker("logs", name, check=False)
            logs = out.stdout + out.stderr
        assert "Using TRITON_MLA_SPARSE attention backend out of potential backends" in logs
        assert "Application startup complete." in logs
    finally:
        docker("rm", "-f", name, check=False)
