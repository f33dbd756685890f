"""The serving image's inputs judged before anything changes (plugins/filter/image_inputs.py): each wrong input fails
its own check, named after the variable, with the fix; what the preflight gathers is all it needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter import image_inputs as ii

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "tests" / "doubles" / "vllm" / "patches"
CATALOGUE = yaml.safe_load((ROOT / "roles/a800/defaults/main/catalogue.yml").read_text())["a800_error_catalogue"]
DIFF = "--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n"
DIGEST = "sha256:" + "c" * 64


def patch_file(path: str, text: str | None = DIFF, **stat) -> dict:
    return {"path": path, "exists": True, "isreg": True, "readable": True, "text": text, **stat}


def build(**over) -> dict:
    ctx = {
        "source": "build",
        "name": "vllm/vllm-openai:v0.26.0-glm52-sm80",
        "patch_files": [patch_file("/p/0001-backend.patch")],
        "patch_commit": "abc123",
        "text_patches": [],
        "overlay_dir": "",
    }
    return ctx | over


def verdicts(ctx: dict) -> dict[str, dict]:
    return {c["name"]: c for c in ii.image_input_checks(ctx)}


def failed(ctx: dict) -> set[str]:
    return {name for name, c in verdicts(ctx).items() if c["status"] == "fail"}


def test_a_good_build_passes_and_counts_the_hunks():
    checks = verdicts(build())
    assert {c["status"] for c in checks.values()} == {"pass"}
    assert checks["image_patch_files"]["measured"] == "1 files, 1 hunks"


def test_a_build_without_patches_or_overlay_fails_naming_both_variables():
    check = verdicts(build(patch_files=[]))["image_patch_files"]
    assert check["status"] == "fail"
    assert "image_patch_files and image_overlay_dir are both empty" in check["detail"]
    assert "docs/sm80-image.md" in check["fix"]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        pytest.param(patch_file("/p/gone.patch", None, exists=False), "/p/gone.patch does not exist", id="missing"),
        pytest.param(patch_file("/p/dir", None, isreg=False), "/p/dir is not a regular file", id="not-a-file"),
        pytest.param(patch_file("/p/x.patch", None, readable=False), "cannot be read", id="unreadable"),
        pytest.param(patch_file("/p/x.patch", "not a diff\n"), "no file changes found", id="not-a-diff"),
        pytest.param(patch_file("/p/x.patch", DIFF.replace("a/vllm", "a/setup")), "not a file of the vllm/", id="path"),
    ],
)
def test_each_bad_patch_file_fails_the_check_with_its_reason(entry, says):
    check = verdicts(build(patch_files=[patch_file("/p/0001.patch"), entry]))["image_patch_files"]
    assert check["status"] == "fail"
    assert says in check["detail"]


def test_two_patch_files_of_one_name_fail():
    assert "image_patch_files" in failed(build(patch_files=[patch_file("/a/0001.patch"), patch_file("/b/0001.patch")]))


def test_no_patch_commit_fails():
    assert failed(build(patch_commit="")) == {"image_patch_commit"}


@pytest.mark.parametrize(
    ("overlay", "says"),
    [
        pytest.param({"exists": False, "files": []}, "does not exist on the controller", id="absent"),
        pytest.param({"exists": True, "files": []}, "holds no files", id="empty"),
        pytest.param(
            {"exists": True, "files": ["vllm/a.py", "setup.py"]}, "outside its vllm/ tree: setup.py", id="stray"
        ),
    ],
)
def test_a_bad_overlay_fails(overlay, says):
    check = verdicts(build(overlay_dir="/o", overlay=overlay))["image_overlay_dir"]
    assert check["status"] == "fail" and says in check["detail"]


def test_a_malformed_text_patch_fails():
    bad = [{"path": "../x.py", "search": "a", "replace": "b"}, {"path": "ok.py", "search": "", "replace": "b"}]
    check = verdicts(build(text_patches=bad))["image_text_patches"]
    assert check["status"] == "fail" and "entry 1" in check["detail"] and "entry 2" in check["detail"]


@pytest.mark.parametrize(
    ("name", "digest", "ok"),
    [
        ("registry.intranet/vllm:sm80", "", False),
        ("registry.intranet/vllm:sm80", "sha256:123", False),
        ("registry.intranet/vllm:sm80", DIGEST, True),
        (f"registry.intranet/vllm@{DIGEST}", "", True),
    ],
)
def test_a_registry_image_must_be_pinned_by_digest(name, digest, ok):
    check = verdicts({"source": "registry", "name": name, "digest": digest})["image_registry_pin"]
    assert (check["status"] == "pass") is ok
    if not ok:
        assert "bom.vllm_image.digest" in check["fix"]


def tarball(**over) -> dict:
    stat = {"where": "host", "exists": True, "isreg": True, "readable": True, "size": 2e10, "checksum": "d" * 64}
    return {"source": "tarball", "tarball": "/srv/img.tar", "tarball_src": "", "tarball_sha256": "d" * 64,
            "tarball_stat": stat} | over  # fmt: skip


@pytest.mark.parametrize(
    ("over", "says"),
    [
        pytest.param({"tarball": "img.tar"}, "not an absolute path", id="relative"),
        pytest.param({"tarball_sha256": ""}, "image_tarball_sha256 is empty", id="no-checksum"),
        pytest.param({"tarball_stat": {"where": "host", "exists": False}}, "/srv/img.tar does not exist", id="absent"),
        pytest.param({"tarball_sha256": "e" * 64}, "not the archive reviewed", id="other-archive"),
    ],
)
def test_a_tarball_must_be_there_with_its_checksum(over, says):
    check = verdicts(tarball(**over))["image_tarball"]
    assert check["status"] == "fail" and says in check["detail"]


def test_a_tarball_on_the_controller_is_named_there():
    stat = {"where": "controller", "exists": False}
    check = verdicts(tarball(tarball_src="/ctl/img.tar", tarball_stat=stat))["image_tarball"]
    assert check["status"] == "fail" and "/ctl/img.tar does not exist on the controller" in check["detail"]
    assert verdicts(tarball(tarball_sha256="sha256:" + "d" * 64))["image_tarball"]["status"] == "pass"


def test_an_unknown_source_fails():
    assert failed({"source": "docker-hub"}) == {"image_source"}


def test_the_driver_is_judged_only_against_an_image_on_the_host():
    image = {"inspected": True, "name": "vllm/vllm-openai:v0.26.0-glm52-sm80", "require_cuda": "cuda>=13.0"}
    assert verdicts(build(image_cuda=image, driver_version="575.57.08"))["image_cuda_driver"]["status"] == "fail"
    assert verdicts(build(image_cuda=image, driver_version="580.105.08"))["image_cuda_driver"]["status"] == "pass"
    assert "image_cuda_driver" not in verdicts(build(image_cuda=None, driver_version="575.57.08"))


def test_the_manifest_numbers_the_patches_in_order_and_the_label_keeps_it():
    files = [patch_file("/p/0002-guard.patch"), patch_file("/q/0001-backend.patch", DIFF.replace("y = 3", "y = 4"))]
    manifest = ii.image_patch_manifest(files, DIGEST)
    assert [p["file"] for p in manifest["patches"]] == ["0001-0002-guard.patch", "0002-0001-backend.patch"]
    assert manifest["base_digest"] == DIGEST
    label = json.loads(ii.image_patch_label(manifest))
    assert [p["name"] for p in label] == ["0002-guard.patch", "0001-backend.patch"]
    assert label[0]["sha256"] != label[1]["sha256"] and len(label[0]["sha256"]) == 64


def test_the_double_patch_set_parses_as_the_preflight_reads_it():
    files = sorted((PATCHES / "sm80").glob("*.patch"))
    assert len(files) == 5
    entries = [patch_file(str(p), p.read_text()) for p in files]
    check = verdicts(build(patch_files=entries))["image_patch_files"]
    assert check["status"] == "pass", check["detail"]


def test_a_self_check_failure_maps_to_the_catalogue_and_a_pass_never_does():
    output = "\n".join(
        [
            "sm80 self-check: ok enum: AttentionBackendEnum.TRITON_MLA_SPARSE = vllm.v1....TritonMLASparseBackend",
            "sm80 self-check: FAILED: metadata: TypeError: non-default argument 'num_decodes' follows default "
            "argument (end)",
            "sm80 self-check: FAILED: indexer: ModuleNotFoundError: No module named "
            "'vllm.v1.attention.ops.mqa_logits_triton' (end)",
        ]
    )
    names = [d["name"] for d in ii.image_self_check_diagnosis(output, CATALOGUE)]
    assert names == ["sparse_indexer_fallback_missing", "dataclass_field_order"]
    passing = "sm80 self-check: ok enum: AttentionBackendEnum.TRITON_MLA_SPARSE = x\nsm80 self-check: 5 of 5 passed"
    assert ii.image_self_check_diagnosis(passing, CATALOGUE) == []


# --- the image of a name, as the inputs' read found it (docker image inspect in a800.vllm.host_read) -----------------
# docker's own words (docker CLI 26-29): a missing image, and no engine answering.
NO_SUCH_IMAGE = "Error response from daemon: No such image: a800/vllm-openai:sm80"
NO_ENGINE = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"


def test_the_inspected_image_is_the_engine_apis_inspect_and_a_missing_one_is_none():
    image = {"Id": "sha256:" + "a" * 64, "Config": {"Env": ["NVIDIA_REQUIRE_CUDA=cuda>=12.8"], "Labels": None}}
    found = ii.docker_images_inspected({"rc": 0, "stdout": json.dumps([image]), "stderr": ""}, strict=True)
    assert found == [image]
    assert ii.docker_images_inspected({"rc": 1, "stdout": "[]", "stderr": NO_SUCH_IMAGE}, strict=True) == []


def test_no_engine_is_nothing_found_for_the_preflight_and_an_error_for_the_build():
    down = {"rc": 1, "stdout": "", "stderr": NO_ENGINE}
    assert ii.docker_images_inspected(down) == []
    assert ii.docker_images_inspected({"rc": 127, "stdout": "", "stderr": "docker: command not found"}) == []
    with pytest.raises(ii.AnsibleFilterError, match="Cannot connect to the Docker daemon"):
        ii.docker_images_inspected(down, strict=True)
