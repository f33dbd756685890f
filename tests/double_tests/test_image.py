"""The double as an image: tagged like the prod base image, patched by applying the sm80 patch set (unified diffs,
tests/doubles/vllm/patches/sm80/) to the installed vllm package with the project's applier in a Dockerfile RUN (as
the image role patches the real image), and behaving differently before and after the patch."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT
from harness import ARTICLE_ARGS, BROKEN_PATCHES, SM80_PATCHES, STANDIN_SMI

BASE = "vllm/vllm-openai:v0.26.0"
PATCHED = "a800-testbed/vllm-openai:v0.26.0-glm52-sm80-test"
APPLIER = ROOT / "plugins" / "module_utils" / "unified_diff.py"
DOCKERFILE = f"""FROM {BASE}
COPY unified_diff.py manifest.json /tmp/a800-vllm-patch/
COPY patches/ /tmp/a800-vllm-patch/patches/
RUN set -eu; \\
    pkg="$(python3 -c 'import os, vllm; print(os.path.dirname(vllm.__file__))')"; \\
    python3 /tmp/a800-vllm-patch/unified_diff.py apply "$pkg" /tmp/a800-vllm-patch/manifest.json; \\
    rm -rf /tmp/a800-vllm-patch
"""


def docker(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, **kw)


pytestmark = pytest.mark.usefixtures("testbed_images")


def build_context(ctx: Path, patches: list[Path]) -> Path:
    """The build context: the applier, the patch files and their manifest (name, file, sha256, in order)."""
    (ctx / "patches").mkdir(parents=True)
    shutil.copy(APPLIER, ctx / "unified_diff.py")
    entries = []
    for patch in patches:
        shutil.copy(patch, ctx / "patches" / patch.name)
        digest = hashlib.sha256(patch.read_bytes()).hexdigest()
        entries.append({"name": patch.name, "file": f"patches/{patch.name}", "sha256": digest})
    manifest = {"base_digest": docker("image", "inspect", "-f", "{{.Id}}", BASE).stdout.strip(), "patches": entries}
    (ctx / "manifest.json").write_text(json.dumps(manifest, indent=2))
    (ctx / "Dockerfile").write_text(DOCKERFILE)
    return ctx


def build(ctx: Path, tag: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {"DOCKER_BUILDKIT": "0", "PATH": "/usr/bin:/usr/local/bin"}
    return docker("build", "--force-rm", "-t", tag, str(ctx), env=env, check=check)


@pytest.fixture(scope="module")
def patched_image(tmp_path_factory, testbed_images) -> str:
    build(build_context(tmp_path_factory.mktemp("patch"), SM80_PATCHES), PATCHED)
    return PATCHED


def run_image(image: str, weights, tmp_path, *extra: str, keep: bool = False) -> subprocess.CompletedProcess:
    """The image on the double's weights; `keep`: the container stays after it exits (its log can be read)."""
    hw = tmp_path / "gpus.json"
    hw.write_text(json.dumps({"driver": "580.95.05"}))
    return docker(
        "run",
        *([] if keep else ["--rm"]),
        "-v",
        f"{STANDIN_SMI}:/usr/bin/nvidia-smi:ro",
        "-v",
        f"{hw}:/etc/nvidia-standin/gpus.json:ro",
        "-v",
        f"{weights}:/models/GLM-5.2-NVFP4:ro",
        "-e",
        "VLLM_TEST_DOUBLE_TIME_SCALE=5000",
        # A load from evicted pages takes longer than vLLM's default 600 s (simulated): a cold load's timeout, as
        # the serve role sets it (tests/doubles/vllm/harness.py too).
        "-e",
        "VLLM_ENGINE_READY_TIMEOUT_S=3600",
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
    result = run_image(patched_image, weights, tmp_path, "-d", "--name", name, keep=True)
    assert result.returncode == 0, result.stderr
    try:
        # Until it is up or has exited (kept, so its log and exit code can be read), at most 600 s.
        deadline, logs, state = time.monotonic() + 600, "", {"Running": True}
        while time.monotonic() < deadline and "Application startup complete." not in logs and state["Running"]:
            time.sleep(0.5)
            state = json.loads(docker("inspect", "-f", "{{json .State}}", name).stdout)
            out = docker("logs", name, check=False)
            logs = out.stdout + out.stderr
        said = f"state {state}; log:\n{logs[-3000:]}"
        assert "Using TRITON_MLA_SPARSE attention backend out of potential backends" in logs, said
        assert "Application startup complete." in logs, said
    finally:
        docker("rm", "-f", name, check=False)


def test_a_patch_that_does_not_fit_fails_the_build_naming_the_hunk(tmp_path):
    patches = [SM80_PATCHES[0], BROKEN_PATCHES / "0002-indexer-deepgemm-guard-from-main.patch"]
    result = build(build_context(tmp_path / "ctx", patches), f"{PATCHED}-broken", check=False)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert (
        "image patches: FAILED: 0002-indexer-deepgemm-guard-from-main.patch: "
        "vllm/model_executor/layers/sparse_attn_indexer.py hunk 2 (@@ -"
    ) in out
    assert "nothing written to" in out
