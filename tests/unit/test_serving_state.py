"""What the serve role reads in one module run (plugins/module_utils/serving_state.py): the shapes of the seven
tasks it replaced (docker_container_info, docker_image_info, ss, docker ps, docker container inspect, stat, slurp),
from the Docker CLI's recorded answers (tests/fixtures/docker-inspect: real `docker inspect` output) and real files.
The scenarios run it on the simulated hosts' Docker engines (molecule/serve, default)."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from ansible_collections.a800.vllm.plugins.module_utils.serving_state import ReadError, serving_state
from conftest import ROOT

ARTICLE = json.loads((ROOT / "tests/fixtures/docker-inspect/article-docker-run.json").read_text())[0]
IMAGE = "vllm/vllm-openai:v0.26.0-glm52-sm80"
NO_ENGINE = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n"


def docker(answers: dict[tuple[str, ...], tuple[int, str, str]]):
    """A runner that answers the commands it knows (the Docker CLI's own texts) and records every call."""
    calls: list[list[str]] = []

    def run(argv):
        calls.append(list(argv))
        return answers[tuple(argv)]

    return run, calls


def test_a_serving_host_is_read_in_the_shapes_of_the_tasks_it_replaced(tmp_path):
    key, rejected = tmp_path / "api-key", tmp_path / "rejected.json"
    key.write_text("sk-" + "x" * 45)
    key.chmod(0o600)
    rejected.write_text('{"abc": {"canary": "h1"}}')
    image = {"Id": "sha256:1", "RepoTags": [IMAGE]}
    run, calls = docker({
        ("docker", "container", "inspect", "glm52-nvfp4"): (0, json.dumps([ARTICLE]), ""),
        ("docker", "image", "inspect", IMAGE, ARTICLE["Image"]): (0, json.dumps([image, {"Id": ARTICLE["Image"]}]), ""),
        ("ss", "-H", "-ltn", "sport = :8001"): (0, "LISTEN 0 4096 0.0.0.0:8001 0.0.0.0:*\n", ""),
        ("docker", "ps", "--quiet", "--no-trunc"): (0, "aaa\nbbb\n", ""),
        ("docker", "container", "inspect", "aaa", "bbb"): (1, "[{\"Id\": \"aaa\"}]", "Error: No such container: bbb"),
    })  # fmt: skip
    last_good = tmp_path / "last-good.json"
    last_good.write_text('{"image": "x"}\n')
    state = serving_state(run, "glm52-nvfp4", [IMAGE], 8001, str(key), str(rejected), str(last_good))
    assert state["current"] == {"exists": True, "container": ARTICLE}  # docker_container_info's shape
    assert [i["Id"] for i in state["images"]] == ["sha256:1", ARTICLE["Image"]]  # docker_image_info's list
    assert state["port_listener"] == "LISTEN 0 4096 0.0.0.0:8001 0.0.0.0:*"
    assert state["running"] == ["aaa", "bbb"]
    assert state["running_inspect"] == '[{"Id": "aaa"}]'  # one exited meanwhile: the rest as read
    assert state["key"] == {"exists": True, "mode": "0600", "checksum": hashlib.sha1(key.read_bytes()).hexdigest()}
    assert json.loads(base64.b64decode(state["rejected"]["content"])) == {"abc": {"canary": "h1"}}  # slurp's
    # the serve role writes last-good.json again only when this differs from what it would write
    assert state["last_good"] == {"exists": True, "mode": f"{last_good.stat().st_mode & 0o7777:04o}",
                                  "checksum": hashlib.sha1(b'{"image": "x"}\n').hexdigest()}  # fmt: skip
    assert [c[:3] for c in calls] == [["docker", "container", "inspect"], ["docker", "image", "inspect"],
                                      ["ss", "-H", "-ltn"], ["docker", "ps", "--quiet"],
                                      ["docker", "container", "inspect"]]  # fmt: skip


def test_a_host_that_serves_nothing_yet(tmp_path):
    run, calls = docker({
        ("docker", "container", "inspect", "glm52-nvfp4"): (1, "[]\n", "Error: No such container: glm52-nvfp4\n"),
        ("docker", "image", "inspect", IMAGE): (1, "[]\n", f"Error: No such image: {IMAGE}\n"),
        ("ss", "-H", "-ltn", "sport = :8001"): (0, "", ""),
        ("docker", "ps", "--quiet", "--no-trunc"): (0, "", ""),
    })  # fmt: skip
    state = serving_state(run, "glm52-nvfp4", [IMAGE], 8001, str(tmp_path / "api-key"), str(tmp_path / "r.json"))
    assert state == {
        "current": {"exists": False, "container": None},
        "images": [],
        "port_listener": "",
        "running": [],
        "running_inspect": "",
        "key": {"exists": False},
        "rejected": {},
    }
    assert len(calls) == 4  # no inspect of running containers when none runs


@pytest.mark.parametrize(
    ("failing", "says"),
    [
        (("docker", "container", "inspect", "glm52-nvfp4"), "docker container inspect glm52-nvfp4 failed (rc 1)"),
        (("ss", "-H", "-ltn", "sport = :8001"), "ss -H -ltn 'sport = :8001' failed (rc 1)"),
        (("docker", "ps", "--quiet", "--no-trunc"), "docker ps failed (rc 1)"),
    ],
)
def test_an_engine_or_ss_that_does_not_answer_fails_the_read_naming_the_command(tmp_path, failing, says):
    answers = {
        ("docker", "container", "inspect", "glm52-nvfp4"): (1, "[]\n", "Error: No such container: glm52-nvfp4\n"),
        ("ss", "-H", "-ltn", "sport = :8001"): (0, "", ""),
        ("docker", "ps", "--quiet", "--no-trunc"): (0, "", ""),
    }
    answers[failing] = (1, "", NO_ENGINE)
    run, _ = docker(answers)
    with pytest.raises(ReadError) as raised:
        serving_state(run, "glm52-nvfp4", [], 8001, str(tmp_path / "k"), str(tmp_path / "r"))
    assert says in str(raised.value) and "Cannot connect to the Docker daemon" in str(raised.value)
