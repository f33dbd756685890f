"""A server started by hand (the article's `docker run`): how its `docker inspect` differs from the rendered launch
(plugins/filter/serve_inspect.py), the serve role's decision over it (roles/serve/tasks/facts.yml: replace once, or
adopt when it is the same), and other containers holding the GPUs or the port (launch rules gpus_free, port_free).

The inspections are real: tests/fixtures/docker-inspect/README.md says how they were recorded."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter.serve_inspect import (
    argv_options,
    gpu_selection,
    serve_launch_differences,
    serve_other_containers,
    serve_restart_decision,
)
from ansible_collections.a800.vllm.plugins.filter.vllm_launch_rules import vllm_launch_checks
from conftest import ROOT

FIXTURES = ROOT / "tests/fixtures/docker-inspect"
ARTICLE = json.loads((FIXTURES / "article-docker-run.json").read_text())[0]  # the article's docker run
SAME = json.loads((FIXTURES / "rendered-launch-by-hand.json").read_text())[0]  # the rendered launch, run by hand
IMAGES = json.loads((FIXTURES / "vllm-double-image.json").read_text())
SPEC = json.loads((FIXTURES / "rendered-launch.spec.json").read_text())  # __serve_spec of the recording
SECRET = "sk-helper-test-0123456789abcdef"


def changed(container: dict, **paths) -> dict:
    """A copy with `Section__Key=value` replaced (`Config__Env`, `HostConfig__ShmSize`, ...)."""
    out = copy.deepcopy(container)
    for path, value in paths.items():
        node = out
        *parents, last = path.split("__")
        for key in parents:
            node = node[key]
        node[last] = value
    return out


def running(container: dict, name: str) -> dict:
    return changed(container, Name="/" + name, State__Running=True, State__Status="running")


def stopped(container: dict) -> dict:
    return changed(container, Name="/glm52-nvfp4", State__Running=False, State__Status="exited")


def diff(container: dict, spec: dict | None = None) -> list[str]:
    return serve_launch_differences(container, SPEC if spec is None else spec, IMAGES)


def fields(differences: list[str]) -> list[str]:
    return sorted({d.split(":", 1)[0] for d in differences})


# --- the comparison -----------------------------------------------------------------------------------------------


def test_the_rendered_launch_run_by_hand_is_the_same():
    assert diff(SAME) == []


def test_the_article_launch_differs_in_what_the_rendering_corrects_and_adds():
    differences = diff(ARTICLE)
    assert fields(differences) == [
        "arguments",
        "entrypoint",
        "environment",
        "ipc mode",
        "mounts",
        "restart policy",
        "ulimits",
    ]
    text = "\n".join(differences)
    assert "arguments: --attention-backend TRITON_MLA_SPARSE missing" in text  # docs/vllm.md#backend-selection
    assert "environment: VLLM_ATTENTION_BACKEND=TRITON_MLA_SPARSE set by hand" in text
    assert "environment: VLLM_ENGINE_READY_TIMEOUT_S unset, the launch sets VLLM_ENGINE_READY_TIMEOUT_S=2460" in text
    assert "ipc mode: private, the launch renders host" in text
    assert "mounts: /models read-write, the launch mounts it read-only" in text
    # the same in substance, not reported: the image (same ID), --gpus all, -p 8001:8001 (every interface),
    # --attention-config with other spacing, the image's own environment (PATH, NVIDIA_REQUIRE_CUDA)
    for absent in ("image:", "gpus:", "published ports:", "attention-config", "PATH", "NVIDIA_REQUIRE_CUDA"):
        assert absent not in text, absent


OTHER_IMAGE = "sha256:" + "ab" * 32
CMD, ENV = SAME["Config"]["Cmd"], SAME["Config"]["Env"]
GPUS_0_1 = [{"Driver": "", "Count": 0, "DeviceIDs": ["0", "1"], "Capabilities": [["gpu"]]}]


def ports(address: str, host_port: str) -> dict:
    return {"8001/tcp": [{"HostIp": address, "HostPort": host_port}]}


# (the change to the recorded same launch, the field named, what the difference says)
FIELD_CASES = {
    "image": ({"Image": OTHER_IMAGE}, "image", "(abababababab), the launch renders"),
    "entrypoint": ({"Config__Entrypoint": ["vllm", "serve"], "Config__Cmd": SPEC["command"]}, "entrypoint", "vllm"),
    "extra-flag": ({"Config__Cmd": [*CMD, "--max-log-len", "100"]}, "arguments", "--max-log-len 100 set by hand"),
    "flag-value": (
        {"Config__Cmd": [a if a != "16" else "32" for a in CMD]},
        "arguments",
        "--max-num-seqs 32, the launch renders --max-num-seqs 16",
    ),
    "missing-flag": ({"Config__Cmd": [a for a in CMD if a != "--trust-remote-code"]}, "arguments", "code missing"),
    "model": ({"Config__Cmd": [a.replace("5.2", "5.1") for a in CMD]}, "arguments", "model /models/GLM-5.1-NVFP4"),
    "env-value": ({"Config__Env": [e.replace("=2460", "=600") for e in ENV]}, "environment", "S=600, the launch"),
    "env-extra": ({"Config__Env": [*ENV, "NCCL_P2P_DISABLE=1"]}, "environment", "NCCL_P2P_DISABLE=1 set by hand"),
    "env-missing": ({"Config__Env": [e for e in ENV if e[:7] != "PYTORCH"]}, "environment", "ALLOC_CONF unset"),
    "no-gpus": ({"HostConfig__DeviceRequests": None}, "gpus", "none, the launch renders --gpus all"),
    "gpu-devices": ({"HostConfig__DeviceRequests": GPUS_0_1}, "gpus", "device=0,1"),
    "port-address": ({"HostConfig__PortBindings": ports("127.0.0.1", "8001")}, "published ports", "127.0.0.1:8001"),
    "host-port": ({"HostConfig__PortBindings": ports("", "8002")}, "published ports", "0.0.0.0:8002->8001/tcp"),
    "ipc": ({"HostConfig__IpcMode": "private"}, "ipc mode", "private, the launch renders host"),
    "ulimits": ({"HostConfig__Ulimits": None}, "ulimits", "none, the launch sets stack=67108864:67108864"),
    "restart": (
        {"HostConfig__RestartPolicy": {"Name": "no"}},
        "restart policy",
        "no, the launch renders unless-stopped",
    ),
}


@pytest.mark.parametrize(("change", "field", "says"), FIELD_CASES.values(), ids=FIELD_CASES.keys())
def test_each_changed_field_is_named(change, field, says):
    differences = diff(changed(SAME, **change))
    assert fields(differences) == [field], differences
    assert any(says in d for d in differences), differences


def test_the_stop_timeout_is_compared_where_the_launch_sets_one():
    """The launch gives Docker a stop timeout (vLLM's --shutdown-timeout + 30 s): a container without one stops with
    Docker's 10 s, which would SIGKILL vLLM's drain; a launch recorded before the field compares nothing."""
    spec = dict(SPEC, stop_timeout="150")
    assert diff(SAME, spec) == ["stop timeout: 10 s, the launch renders --stop-timeout 150"]
    assert diff(changed(SAME, Config__StopTimeout=150), spec) == []
    assert diff(changed(SAME, Config__StopTimeout=150)) == []  # SPEC, recorded before the field


def mounts_with(**by_target) -> list[dict]:
    mounts = copy.deepcopy(SAME["Mounts"])
    for mount in mounts:
        mount.update(by_target.get(mount["Destination"], {}))
    return [m for m in mounts if by_target.get(m["Destination"]) != {"gone": True}]


@pytest.mark.parametrize(
    ("mounts", "says"),
    [
        (mounts_with(**{"/models": {"RW": True}}), "/models read-write, the launch mounts it read-only"),
        (mounts_with(**{"/models": {"Source": "/srv/models"}}), "/models from /srv/models, the launch mounts /data"),
        (mounts_with(**{"/root/.triton": {"gone": True}}), "/root/.triton not mounted"),
        ([*SAME["Mounts"], {"Type": "bind", "Source": "/tmp", "Destination": "/x", "RW": True}], "/tmp on /x by hand"),
    ],
    ids=["read-write", "source", "missing", "extra"],
)
def test_each_changed_mount_is_named(mounts, says):
    differences = diff(changed(SAME, Mounts=mounts))
    assert fields(differences) == ["mounts"] and any(says in d for d in differences), differences


def test_shm_size_counts_without_the_host_ipc_namespace():
    private = dict(SPEC, ipc_mode="", shm_size="32g")
    container = changed(SAME, HostConfig__IpcMode="private", HostConfig__ShmSize=32 * 1024**3)
    assert diff(container, private) == []
    smaller = diff(changed(container, HostConfig__ShmSize=16 * 1024**3), private)
    assert smaller == ["shm size: 16 GiB, the launch renders 32g (32 GiB)"]
    assert diff(changed(SAME, HostConfig__ShmSize=16 * 1024**3)) == []  # --ipc=host: /dev/shm is the host's


def test_secret_values_never_appear():
    env = [*SAME["Config"]["Env"], f"VLLM_API_KEY={SECRET}", f"HF_TOKEN={SECRET}x"]
    cmd = [*SAME["Config"]["Cmd"], "--api-key", SECRET]
    differences = diff(changed(SAME, Config__Env=env, Config__Cmd=cmd))
    text = "\n".join(differences)
    assert SECRET not in text
    assert "VLLM_API_KEY=<hidden> set by hand" in text and "HF_TOKEN=<hidden>" in text
    assert "--api-key <hidden> set by hand" in text
    # inside a shell string of a hand-written entrypoint
    shell = [f"HF_TOKEN={SECRET} exec vllm serve /models/GLM-5.2-NVFP4 --api-key {SECRET} --port 8001"]
    in_shell = diff(changed(SAME, Config__Entrypoint=["/bin/sh", "-c"], Config__Cmd=shell))
    assert "entrypoint" in fields(in_shell) and SECRET not in "\n".join(in_shell), in_shell
    # a secret the launch sets and the container has with another value: neither value is shown
    spec = dict(SPEC, env={**SPEC["env"], "HF_TOKEN": SECRET + "y"})
    mismatch = diff(changed(SAME, Config__Env=[*SAME["Config"]["Env"], f"HF_TOKEN={SECRET}z"]), spec)
    assert mismatch == ["environment: HF_TOKEN differs from the launch (values hidden)"]
    # names with TOKEN or KEY inside a word are not secrets: their values stay readable
    assert "--max-num-batched-tokens 4096" in "\n".join(
        diff(changed(SAME, Config__Cmd=[a if a != "8192" else "4096" for a in SAME["Config"]["Cmd"]]))
    )


def test_arguments_compare_as_argparse_reads_them():
    assert argv_options(["m", "--max_num_seqs=16", "--cfg", '{"b": 1, "a": true}', "--flag"]) == argv_options(
        ["m", "--flag", "--cfg", '{"a":true,"b":1}', "--max-num-seqs", "16"]
    )
    assert argv_options(["m", "--n", "1"]) != argv_options(["m", "--n", "2"])


# --- other containers on the GPUs or the port ---------------------------------------------------------------------


def test_gpu_selection_of_each_way_to_give_a_container_gpus():
    assert gpu_selection(ARTICLE) == "all"
    none = changed(ARTICLE, HostConfig__DeviceRequests=None)
    assert gpu_selection(none) == ""
    runtime = changed(none, HostConfig__Runtime="nvidia", Config__Env=["NVIDIA_VISIBLE_DEVICES=0,1"])
    assert gpu_selection(runtime) == "nvidia runtime, NVIDIA_VISIBLE_DEVICES=0,1"
    assert gpu_selection(changed(runtime, Config__Env=["NVIDIA_VISIBLE_DEVICES=void"])) == ""
    assert gpu_selection(changed(none, Config__Env=["NVIDIA_VISIBLE_DEVICES=all"])) == ""  # runc ignores it
    device = changed(none, HostConfig__Devices=[{"PathOnHost": "/dev/nvidia0", "PathInContainer": "/dev/nvidia0"}])
    assert gpu_selection(device) == "devices /dev/nvidia0"
    cdi = changed(none, HostConfig__DeviceRequests=[{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=all"]}])
    assert gpu_selection(cdi) == "cdi nvidia.com/gpu=all"


def test_other_running_containers_with_gpus_or_the_port_are_found():
    article = running(ARTICLE, "helper2-article")
    ours = running(SAME, "glm52-nvfp4")
    stopped = changed(ARTICLE, Name="/old-server")
    quiet = running(changed(ARTICLE, HostConfig__DeviceRequests=None, HostConfig__PortBindings={}), "sidecar")
    found = serve_other_containers([article, ours, stopped, quiet], "glm52-nvfp4", 8001)
    assert found == [{"name": "helper2-article", "gpus": "all", "ports": ["0.0.0.0:8001->8001/tcp"]}]
    assert serve_other_containers([article], "glm52-nvfp4", 9000)[0]["ports"] == []


HOST = {
    "gpu_count": 8,
    "compute_caps": ["8.0"],
    "gpu_memory_mib": 81920,
    "container_name": "glm52-nvfp4",
    "image_cuda": None,
}


def rules(**ctx) -> dict[str, dict]:
    return {c["name"]: c for c in vllm_launch_checks({"tensor_parallel_size": 8}, {**HOST, **ctx})}


def test_another_gpu_container_fails_the_launch_naming_it_and_the_fix():
    others = serve_other_containers([running(ARTICLE, "helper2-article")], "glm52-nvfp4", 8001)
    check = rules(other_containers=others)["gpus_free"]
    assert check["status"] == "fail"
    assert "helper2-article (all)" in check["detail"]
    assert "docker stop helper2-article" in check["fix"]
    assert "serve_container_name to helper2-article" in check["fix"]
    assert rules(other_containers=[])["gpus_free"]["status"] == "pass"
    assert rules(other_containers=None)["gpus_free"]["status"] == "pending"  # not read: never a pass


def test_the_monitoring_roles_dcgm_exporter_does_not_fail_gpus_free():
    """dcgm-exporter runs with --gpus all to read the GPUs (roles/monitoring): on a host with monitoring on, a second
    run of site.yml found it and refused to touch the server (the airgap scenario's idempotence step). Containers named
    in serve_gpu_readers are left out; any other GPU container still fails."""
    exporter = serve_other_containers([running(ARTICLE, "a800-dcgm-exporter")], "glm52-nvfp4", 8001)
    assert rules(other_containers=exporter, gpu_readers=["a800-dcgm-exporter"])["gpus_free"]["status"] == "pass"
    both = serve_other_containers(
        [running(ARTICLE, "a800-dcgm-exporter"), running(ARTICLE, "helper2-article")], "glm52-nvfp4", 8001
    )
    check = rules(other_containers=both, gpu_readers=["a800-dcgm-exporter"])["gpus_free"]
    assert check["status"] == "fail" and "helper2-article (all)" in check["detail"]
    assert "a800-dcgm-exporter" not in check["detail"]
    # one name, in the vocabulary role a800 that every play lists first: both roles read it from there
    defaults = yaml.safe_load((ROOT / "roles" / "serve" / "defaults" / "main" / "main.yml").read_text())
    assert defaults["serve_gpu_readers"] == ["{{ a800_dcgm_container }}"]
    monitoring = yaml.safe_load((ROOT / "roles" / "monitoring" / "defaults" / "main.yml").read_text())
    assert monitoring["monitoring_dcgm_container"] == "{{ a800_dcgm_container }}"
    a800 = yaml.safe_load((ROOT / "roles" / "a800" / "defaults" / "main" / "main.yml").read_text())
    assert a800["a800_dcgm_container"] == "a800-dcgm-exporter"


def test_another_container_on_the_port_fails_port_free_naming_it():
    others = serve_other_containers(
        [running(changed(ARTICLE, HostConfig__DeviceRequests=None), "helper2-article")], "glm52-nvfp4", 8001
    )
    port = {"port": 8001, "in_use": True, "listener": "LISTEN 0 4096 0.0.0.0:8001 users:((docker-proxy))"}
    checks = rules(other_containers=others, port=port, port_holder="other")
    assert checks["gpus_free"]["status"] == "pass"
    check = checks["port_free"]
    assert check["status"] == "fail" and "published by container helper2-article" in check["detail"]
    assert "docker stop helper2-article" in check["fix"] and "serve_container_name" in check["fix"]
    free = rules(other_containers=[], port={"port": 8001, "in_use": False, "listener": ""}, port_holder="other")
    assert free["port_free"]["status"] == "pass"


# --- the serve role's decision (a800.vllm.serve_restart_decision, roles/serve/tasks/facts.yml) ----------------------


def decide(cases: dict[str, dict | None]) -> dict[str, dict]:
    """The role's decision for each case: the container as docker_container_info returns it (None: no container)."""
    return {
        name: serve_restart_decision(
            {"current": {"exists": container is not None, "container": container or {}}, "spec": SPEC, "images": IMAGES}
        )
        for name, container in cases.items()
    }


def test_the_role_task_sets_what_the_filter_decides(tmp_path):
    """The role's own task (found by what it sets), run by ansible-playbook on one local host per case, sets the
    filter's decision as it is."""
    task = next(
        t
        for t in yaml.safe_load((ROOT / "roles/serve/tasks/facts.yml").read_text())
        if "__serve_decision" in (t.get("ansible.builtin.set_fact") or {})
    )
    cases = {"article": running(ARTICLE, "glm52-nvfp4"), "exited": stopped(SAME), "none": None}
    hosts = {
        name: {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "__serve_current": {"exists": container is not None, "container": container or {}},
            "__serve_images": {"images": IMAGES},
            "__serve_spec": SPEC,
            "serve_image": SPEC["image"],
        }
        for name, container in cases.items()
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    out = tmp_path / "out"
    out.mkdir()
    write = {
        "name": "Write what it decided",
        "delegate_to": "localhost",
        "ansible.builtin.copy": {
            "dest": f"{out}/{{{{ inventory_hostname }}}}.json",
            "content": "{{ __serve_decision | to_json }}",
            "mode": "0644",
        },
    }
    play = {"name": "The decision task", "hosts": "all", "gather_facts": False, "tasks": [task, write]}
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_HOME=str(ROOT / ".ansible-home"))
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml")]
    run = subprocess.run(
        [*argv, str(tmp_path / "play.yml")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    got = {name: json.loads((out / f"{name}.json").read_text()) for name in cases}
    assert got == decide(cases)
    assert got["exited"]["why"] == "started by hand (no label io.a800-vllm.config-hash) and not running"


def test_the_role_replaces_a_different_server_once_and_adopts_the_same_one():
    labelled = running(SAME, "glm52-nvfp4")
    labelled["Config"]["Labels"] = {**(labelled["Config"]["Labels"] or {}), **SPEC["labels"]}
    got = decide(
        {
            "article": running(ARTICLE, "glm52-nvfp4"),
            "same": running(SAME, "glm52-nvfp4"),
            "labelled": labelled,  # what the replacement leaves: the next run restarts nothing
            "exited": changed(ARTICLE, Name="/glm52-nvfp4"),
            "none": None,
        },
    )
    article = got["article"]
    assert article["needed"] and article["by_hand"] and not article["adopted"]
    assert article["why"].startswith(
        "started by hand; differs from the rendered launch in: entrypoint, arguments, environment, ipc mode, mounts, "
        "ulimits, restart policy - replaced once"
    )
    assert article["differences"] == diff(running(ARTICLE, "glm52-nvfp4"))
    same = got["same"]
    assert same["adopted"] and same["by_hand"] and not same["needed"] and same["differences"] == []
    assert not got["labelled"]["needed"] and not got["labelled"]["by_hand"] and not got["labelled"]["adopted"]
    assert got["exited"]["needed"] and "not running" in got["exited"]["why"]
    assert got["none"]["needed"] and got["none"]["why"] == "no container yet"


def test_a_labelled_server_restarts_when_its_hash_differs_or_it_stopped():
    def labelled(config_hash: str, *, runs: bool = True) -> dict:
        container = running(SAME, "glm52-nvfp4") if runs else stopped(SAME)
        container["Config"]["Labels"] = {
            **(container["Config"]["Labels"] or {}),
            "io.a800-vllm.config-hash": config_hash,
        }
        return container

    want = SPEC["labels"]["io.a800-vllm.config-hash"]
    got = decide({"older": labelled("0123456789abcdef"), "stopped": labelled(want, runs=False)})
    older = got["older"]
    assert (
        older["needed"] and not older["by_hand"] and older["differences"] == []
    )  # compared by hash, not field by field
    assert older["why"] == f"the launch changed (0123456789abcdef -> {want})"
    assert older["running"] and older["running_hash"] == "0123456789abcdef"
    halted = got["stopped"]
    assert halted["needed"] and not halted["running"] and halted["why"] == "the container is not running"


def test_a_by_hand_server_that_stopped_is_replaced_naming_what_differs():
    got = decide({"article": changed(ARTICLE, Name="/glm52-nvfp4")})["article"]
    assert got["needed"] and got["by_hand"] and not got["adopted"] and not got["running"]
    assert got["why"].startswith(
        "started by hand (no label io.a800-vllm.config-hash) and not running; it differs from the rendered launch in: "
        "entrypoint, arguments"
    )
