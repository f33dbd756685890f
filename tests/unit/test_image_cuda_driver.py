"""The driver floor from the serving image's CUDA (docs/field.md#cuda-version-of-the-image): NVIDIA_REQUIRE_CUDA read
and parsed (plugins/module_utils/cuda_requirement.py), its release mapped to the CUDA Toolkit's minimum driver, and
the launch rule image_cuda_driver (plugins/filter/vllm_launch_rules.py) failing before a restart on a driver that
the container toolkit would refuse."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter.serve_inspect import serve_image_facts
from ansible_collections.a800.vllm.plugins.filter.vllm_launch_rules import vllm_launch_checks
from ansible_collections.a800.vllm.plugins.module_utils.cuda_requirement import (
    CUDA_MIN_DRIVER,
    env_value,
    min_driver_for_cuda,
    newest_cuda_for_driver,
    parse_require_cuda,
    version_tuple,
)
from conftest import ROOT

FIXTURES = ROOT / "tests/fixtures/docker-inspect"
IMAGE = json.loads((FIXTURES / "vllm-double-image.json").read_text())[0]
REQUIRE = env_value(IMAGE["Config"]["Env"], "NVIDIA_REQUIRE_CUDA")
PROFILE = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"]
BOM = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/bom.yml").read_text())["bom"]


def image_with(env: list[str] | None) -> dict:
    image = json.loads(json.dumps(IMAGE))
    image["Config"]["Env"] = env
    return image


def rule(image_cuda: dict | None, driver: str | None) -> dict:
    ctx = {"image_cuda": image_cuda, "driver_version": driver, "container_name": "glm52-nvfp4"}
    checks = {c["name"]: c for c in vllm_launch_checks({"tensor_parallel_size": 8}, ctx)}
    return checks["image_cuda_driver"]


def facts(image: dict = IMAGE) -> dict:
    return serve_image_facts([image], image["Id"])


@pytest.mark.parametrize(
    ("text", "cuda"),
    [
        (REQUIRE, (13, 0)),  # the recorded image's whole string, brand alternatives and all
        ("cuda>=12.9", (12, 9)),
        ("cuda>=12.8.1 brand=tesla,driver>=470,driver<471", (12, 8)),
        ("brand=tesla,driver>=535,driver<536", None),  # no cuda>= clause
        ("xcuda>=13.0", None),
        ("", None),
        (None, None),
    ],
)
def test_the_cuda_clause_is_parsed(text, cuda):
    assert parse_require_cuda(text) == cuda


def test_env_value_reads_docker_inspect_lists_and_mappings():
    assert env_value(["A=1", "B=x=y", "A=2"], "A") == "2"  # the last one wins
    assert env_value(["A=1", "B=x=y"], "B") == "x=y"
    assert env_value(["A=1"], "C") is None and env_value(None, "A") is None
    assert env_value({"A": 1}, "A") == "1"


def test_the_table_holds_the_release_notes_values():
    # CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions" (docs/field.md)
    assert CUDA_MIN_DRIVER == {(12, 8): "570.26", (12, 9): "575.51.03", (13, 0): "580.65.06"}
    assert min_driver_for_cuda((13, 0))["exact"] == "580.65.06"
    assert min_driver_for_cuda((12, 9))["exact"] == "575.51.03"
    # a release the table lacks: bounded by its neighbours, never guessed
    assert min_driver_for_cuda((13, 1)) == {"exact": None, "at_least": "580.65.06", "enough": None}
    assert min_driver_for_cuda((12, 4)) == {"exact": None, "at_least": None, "enough": "570.26"}


def test_driver_versions_compare_as_numbers():
    assert version_tuple("580.65.06") > version_tuple("580.7")
    assert newest_cuda_for_driver("580.95.05") == (13, 0)
    assert newest_cuda_for_driver("580.65.05") == (12, 9)
    assert newest_cuda_for_driver("570.26") == (12, 8)
    assert newest_cuda_for_driver("560.35.03") is None


def test_the_profile_floor_is_the_image_cuda_floor_and_the_pin_meets_it():
    floor = PROFILE["hardware"]["min_driver_version"]
    assert floor == CUDA_MIN_DRIVER[parse_require_cuda(REQUIRE)]
    assert version_tuple(BOM["nvidia_driver"]["version"]) >= version_tuple(floor)


def test_the_test_double_carries_the_requirement_of_the_real_image():
    dockerfile = (ROOT / "tests/doubles/vllm/Dockerfile").read_text()
    line = next(x for x in dockerfile.splitlines() if x.startswith("ENV NVIDIA_REQUIRE_CUDA="))
    value = shlex.split(line.removeprefix("ENV "))[0].partition("=")[2]
    assert parse_require_cuda(value) == (13, 0)
    assert re.search(r"brand=tesla,driver>=535,driver<536", value)
    assert value == REQUIRE  # the recorded image inspection was made from this Dockerfile


def test_an_old_driver_fails_naming_image_requirement_driver_minimum_and_fix():
    check = rule(facts(), "575.51.03")
    assert check["status"] == "fail"
    assert check["fact"] == "gpu_facts.driver_version" and check["measured"] == "575.51.03"
    assert check["expected"] == ">= 580.65.06"
    for text in ("vllm/vllm-openai:v0.26.0", "cuda>=13.0", "575.51.03", "580.65.06", "unsatisfied condition"):
        assert text in check["detail"], text
    assert "bom.nvidia_driver.version to 580.65.06" in check["fix"]
    assert "branch 580" in check["fix"]
    assert "-cu129" in check["fix"]  # 575 runs the CUDA 12.9 image


def test_a_driver_too_old_even_for_cuda_12_9_is_not_offered_the_cu129_image():
    check = rule(facts(), "570.124.06")
    assert check["status"] == "fail" and "-cu129" not in check["fix"] and "CUDA 12.8" in check["fix"]


def test_the_pinned_driver_passes():
    check = rule(facts(), "580.95.05")
    assert check["status"] == "pass" and "580.65.06" in check["detail"]


def test_no_driver_yet_is_pending_and_says_so():
    check = rule(facts(), None)
    assert check["status"] == "pending" and "no driver answers yet" in check["detail"]
    assert check["expected"] == ">= 580.65.06"


def test_an_image_without_the_variable_passes_and_says_so():
    bare = image_with(["PATH=/usr/bin"])
    check = rule(facts(bare), "550.54.14")
    assert check["status"] == "pass" and "declares no NVIDIA_REQUIRE_CUDA" in check["detail"]
    no_clause = rule(facts(image_with(["NVIDIA_REQUIRE_CUDA=brand=tesla,driver>=535"])), "550.54.14")
    assert no_clause["status"] == "pass" and "no cuda>= clause" in no_clause["detail"]


def test_an_image_not_on_the_host_is_pending():
    missing = serve_image_facts([IMAGE], "sha256:" + "0" * 64)
    assert missing["inspected"] is False
    assert rule(missing, "580.95.05")["status"] == "pending"
    assert rule(None, "580.95.05")["status"] == "pending"


def test_a_release_the_table_lacks_warns_unless_the_driver_is_certainly_too_old():
    newer = facts(image_with(["NVIDIA_REQUIRE_CUDA=cuda>=13.1"]))
    warn = rule(newer, "580.95.05")
    assert warn["status"] == "warn" and "CUDA_MIN_DRIVER" in warn["fix"]
    assert rule(newer, "575.51.03")["status"] == "fail"
    older = facts(image_with(["NVIDIA_REQUIRE_CUDA=cuda>=12.4"]))
    assert rule(older, "570.26")["status"] == "pass"  # the floor of a newer release is certainly enough


def test_image_facts_name_the_image_and_read_its_requirement():
    got = facts()
    assert got["inspected"] and got["id"] == IMAGE["Id"]
    assert got["name"].startswith("vllm/vllm-openai:v0.26.0 (") and got["require_cuda"] == REQUIRE
    by_tag = serve_image_facts([IMAGE], "vllm/vllm-openai:v0.26.0")
    assert by_tag["id"] == IMAGE["Id"]
