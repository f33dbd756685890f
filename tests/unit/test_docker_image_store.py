"""Docker's image store (plugins/module_utils/docker_daemon.py): which store the running engine uses, from `docker
info`, and the check that stops container_runtime_daemon_extra from switching it (the preflight and the role
container_runtime, before daemon.json changes). docs/testbed.md, "Docker's containerd image store"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter import docker_daemon
from ansible_collections.a800.vllm.plugins.module_utils.docker_daemon import (
    daemon_image_store_check,
    docker_image_store,
    registry_pull_needed,
)
from conftest import ROOT

# `docker info --format '{{json .DriverStatus}}'`, recorded: Debian 12's docker.io 20.10.24 (overlay2, the CI
# machine's engine) and Debian 13's docker.io 26.1.5 with features.containerd-snapshotter (the default scenario's host).
CLASSIC = (
    '[["Backing Filesystem","extfs"],["Supports d_type","true"],["Native Overlay Diff","true"],["userxattr","false"]]'
)
CONTAINERD = '[["driver-type","io.containerd.snapshotter.v1"]]'
ON = {"features": {"containerd-snapshotter": True}}
OFF = {"features": {"containerd-snapshotter": False}}


@pytest.mark.parametrize(
    ("status", "store"),
    [
        (CLASSIC, "classic"),
        (CONTAINERD, "containerd"),
        (json.loads(CONTAINERD), "containerd"),
        (json.loads(CLASSIC), "classic"),
        ("", ""),  # docker info failed: no running engine
        ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock", ""),
        (None, ""),
    ],
)
def test_the_store_is_read_from_docker_info(status, store):
    assert docker_image_store(status) == store


def test_an_extra_without_the_feature_leaves_the_store_alone():
    for store in ("classic", "containerd", ""):
        record = daemon_image_store_check({"log-driver": "journald"}, store)
        assert record["name"] == "docker_image_store" and record["status"] == "pass", record
    assert daemon_image_store_check({"features": {"other": True}}, "classic")["status"] == "pass"


@pytest.mark.parametrize(
    ("extra", "store"),
    [(ON, "containerd"), (OFF, "classic"), ({"features": {"containerd-snapshotter": "true"}}, "containerd")],
)
def test_the_feature_that_matches_the_store_in_use_passes(extra, store):
    assert daemon_image_store_check(extra, store)["status"] == "pass"


@pytest.mark.parametrize(("extra", "store", "wants"), [(ON, "classic", "containerd"), (OFF, "containerd", "classic")])
def test_the_feature_against_the_store_in_use_fails_naming_the_variable_and_the_fix(extra, store, wants):
    record = daemon_image_store_check(extra, store)
    assert record["status"] == "fail"
    assert record["measured"] == f"the {store} image store"
    assert record["expected"].startswith(f"the {wants} image store")
    assert "container_runtime_daemon_extra sets features.containerd-snapshotter" in record["detail"]
    assert "hidden, the running server included" in record["detail"]
    assert record["fix"].startswith("remove features.containerd-snapshotter from container_runtime_daemon_extra")
    assert "docker save" in record["fix"] and "docker load" in record["fix"]


def test_without_a_running_engine_the_feature_chooses_the_store():
    record = daemon_image_store_check(ON, "")
    assert record["status"] == "pending" and "containerd image store" in record["detail"]


def test_the_filters_are_the_module_utils_functions():
    filters = docker_daemon.FilterModule().filters()
    assert filters["daemon_image_store_check"] is daemon_image_store_check
    assert filters["docker_image_store"] is docker_image_store


def test_the_preflight_and_the_role_judge_it_before_daemon_json_is_written():
    """The preflight includes the role's check; the role runs it and stops before its write of daemon.json."""
    preflight = (ROOT / "roles/preflight/tasks/main.yml").read_text()
    assert "tasks_from: preflight.yml" in preflight.split("name: container_runtime", 1)[1].split("\n- name:")[0]
    assert "container_runtime_preflight_results" in preflight
    daemon_json = (ROOT / "roles/container_runtime/tasks/daemon_json.yml").read_text()
    stop, write = daemon_json.index("Stop when it would switch the image store"), daemon_json.index("Write daemon.json")
    assert daemon_json.index("include_tasks: preflight.yml") < stop < write


# --- the role's own tasks (roles/container_runtime/tasks/daemon_json.yml, run by ansible-playbook) -----------------


def run_daemon_json(tmp_path, driver_status: str, daemon: dict, extra: dict):
    """The role's daemon.json tasks on the local host, with a daemon.json under tmp_path, a `docker` on PATH that
    answers `docker info` as the recorded engine did and a `systemctl` that refuses everything."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(f"#!/bin/sh\nprintf '%s\\n' '{driver_status}'\n")
    (bin_dir / "docker").chmod(0o755)
    # A notified handler (a write that should not have happened) must not reload this machine's Docker.
    (bin_dir / "systemctl").write_text("#!/bin/sh\necho 'systemctl of the test: refused' >&2\nexit 1\n")
    (bin_dir / "systemctl").chmod(0o755)
    daemon_json = tmp_path / "daemon.json"
    daemon_json.write_text(json.dumps(daemon))
    play = {
        "name": "The daemon.json tasks of the container_runtime role",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {
            "ansible_python_interpreter": sys.executable,
            "container_runtime_daemon_json": str(daemon_json),
            "container_runtime_daemon_extra": extra,
            "container_runtime_default_runtime": False,
            "container_runtime_live_restore": True,
            "container_runtime_registry_mirrors": [],
        },
        "tasks": [{"ansible.builtin.include_role": {"name": "container_runtime", "tasks_from": "daemon_json.yml"}}],
    }
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_HOME=str(ROOT / ".ansible-home"),
        ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
        ANSIBLE_LOCALHOST_WARNING="false",
    )
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml")]
    run = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return run, json.loads(daemon_json.read_text())


def test_the_role_stops_before_it_writes_a_daemon_json_that_would_switch_the_store(tmp_path):
    operator = {"log-driver": "json-file"}
    run, after = run_daemon_json(tmp_path, CLASSIC, operator, ON)
    assert run.returncode != 0, run.stdout[-3000:]
    assert "container_runtime_daemon_extra sets features.containerd-snapshotter: true" in run.stdout, run.stdout[-3000:]
    assert "Fix: remove features.containerd-snapshotter from container_runtime_daemon_extra" in run.stdout
    assert after == operator  # nothing written


def test_the_role_keeps_a_daemon_json_whose_feature_matches_the_store(tmp_path):
    current = {
        "features": {"containerd-snapshotter": True},
        "live-restore": True,
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    }
    run, after = run_daemon_json(tmp_path, CONTAINERD, current, ON)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert after == current


# --- the image role's registry source: which images it pulls --------------------------------------------------------

REPO = "vllm/vllm-openai"
# `docker image inspect vllm/vllm-openai:v0.26.0` (the fields read) after `docker save | docker load` from this
# machine's engine, never pulled: Debian 12's 20.10.24 (classic) and Debian 13's 26.1.5 on the containerd store.
LOADED_CLASSIC = {"Id": "sha256:78184712df1e5825e73170788ff5d0b6574a4e88f4182c4437216e0f1434d94d", "RepoDigests": []}
LOADED_CONTAINERD = {
    "Id": "sha256:930dec1562c1d6d03c2b845632460ca96e5d55c5c9b1e15dd156779a4c737abb",
    "RepoDigests": ["vllm/vllm-openai@sha256:930dec1562c1d6d03c2b845632460ca96e5d55c5c9b1e15dd156779a4c737abb"],
}
PULLED_CLASSIC = {**LOADED_CLASSIC, "RepoDigests": [f"{REPO}@sha256:{'1' * 64}"]}


def test_the_classic_store_pulls_an_image_that_was_only_loaded_and_keeps_a_pulled_one():
    assert registry_pull_needed(LOADED_CLASSIC, REPO, "", "classic")["needed"] is True
    kept = registry_pull_needed(PULLED_CLASSIC, REPO, "", "classic")
    assert kept == {"needed": False, "digests": PULLED_CLASSIC["RepoDigests"], "why": "pulled before"}
    assert registry_pull_needed({}, REPO, "", "classic")["needed"] is True
    # another repository's digest proves nothing about this one
    assert registry_pull_needed({**PULLED_CLASSIC, "RepoDigests": ["other/repo@sha256:" + "2" * 64]}, REPO)["needed"]


def test_on_the_containerd_store_a_loaded_image_is_not_taken_for_a_pulled_one():
    """Its tag carries a digest although it was never pulled (the recorded inspection): unpinned, it is pulled."""
    decision = registry_pull_needed(LOADED_CONTAINERD, REPO, "", "containerd")
    assert decision["needed"] is True and "gives every tag a digest" in decision["why"]
    # the rule of the classic store, applied to this inspection, would keep it: the bug the store check fixes
    assert registry_pull_needed(LOADED_CONTAINERD, REPO, "", "classic")["needed"] is False


def test_on_the_containerd_store_a_pinned_image_on_the_host_is_kept():
    """Inspected by repo@digest: present means that manifest is here, whatever brought it."""
    pinned = LOADED_CONTAINERD["Id"]
    assert registry_pull_needed(LOADED_CONTAINERD, REPO, pinned, "containerd")["needed"] is False
    assert registry_pull_needed({}, REPO, pinned, "containerd")["needed"] is True


def test_the_registry_source_decides_with_the_engines_store():
    tasks = (ROOT / "roles/image/tasks/registry.yml").read_text()
    assert "a800.vllm.registry_pull_needed(__image_repo, image_digest," in tasks
    assert "a800.vllm.docker_image_store" in tasks and "json .DriverStatus" in tasks
    assert docker_daemon.FilterModule().filters()["registry_pull_needed"] is registry_pull_needed
