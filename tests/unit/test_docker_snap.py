"""Docker from the snap (issue 31, item 8): found on disk (plugins/module_utils/docker_snap.py, host_facts.docker_snap),
judged by the preflight and the role container_runtime before anything changes, and the test bed's OS identity
double that lays it out (tests/testbed/identities, sim_host.docker_snap) with its stand-in snapd.

The module under test is imported inside each test, so that each one fails on its own where it is missing."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, ansible_adhoc

IDENTITY_TASK = ROOT / "tests" / "testbed" / "tasks" / "sim_host_identity.yml"
STANDIN_SNAP = ROOT / "tests" / "testbed" / "identities" / "bin" / "snap"


def docker_snap():
    return importlib.import_module("ansible_collections.a800.vllm.plugins.module_utils.docker_snap")


def lay_out_snap(root: Path) -> None:
    """What snapd leaves after `snap install docker` (and what the identity double lays out): the command as a link
    to snapd's launcher, the revision with its `current` link, the data."""
    (root / "snap/bin").mkdir(parents=True)
    (root / "snap/docker/3377").mkdir(parents=True)
    (root / "snap/docker/current").symlink_to("3377")
    (root / "snap/bin/docker").symlink_to("/usr/bin/snap")  # dangling under a test root: lexists, not exists
    (root / "var/snap/docker/common/var-lib-docker").mkdir(parents=True)


# --- detection ------------------------------------------------------------------------------------------------


def test_a_host_without_the_snap(tmp_path):
    facts = docker_snap().snap_docker_facts(root=str(tmp_path), docker_on_path="/usr/bin/docker")
    assert facts == {"installed": False, "evidence": [], "data_dir": None, "docker_on_path": "/usr/bin/docker"}


def test_the_installers_snap_is_found(tmp_path):
    lay_out_snap(tmp_path)
    facts = docker_snap().snap_docker_facts(root=str(tmp_path))
    assert facts["installed"] is True
    assert facts["evidence"] == ["/snap/bin/docker", "/snap/docker"]
    assert facts["data_dir"] == "/var/snap/docker"


def test_the_command_link_alone_is_enough(tmp_path):
    (tmp_path / "snap/bin").mkdir(parents=True)
    (tmp_path / "snap/bin/docker").symlink_to("/usr/bin/snap")
    assert docker_snap().snap_docker_facts(root=str(tmp_path))["evidence"] == ["/snap/bin/docker"]


@pytest.mark.parametrize("on_path", ["/snap/bin/docker", "/snap/docker/3377/bin/docker"])
def test_the_docker_on_path_under_snap_is_enough(tmp_path, on_path):
    facts = docker_snap().snap_docker_facts(root=str(tmp_path), docker_on_path=on_path)
    assert facts["installed"] is True
    assert facts["evidence"][0].startswith(f"docker on PATH: {on_path}")


def test_a_docker_that_resolves_to_snapds_launcher_is_the_snaps(tmp_path):
    link = tmp_path / "docker"
    link.symlink_to("/usr/bin/snap")
    facts = docker_snap().snap_docker_facts(root=str(tmp_path / "root"), docker_on_path=str(link))
    assert facts["installed"] is True and facts["evidence"] == [f"docker on PATH: {link} -> /usr/bin/snap"]


def test_leftover_data_of_a_removed_snap_is_no_snap(tmp_path):
    (tmp_path / "var/snap/docker/common").mkdir(parents=True)
    facts = docker_snap().snap_docker_facts(root=str(tmp_path))
    assert (facts["installed"], facts["data_dir"]) == (False, "/var/snap/docker")


# --- the check --------------------------------------------------------------------------------------------------


def test_snap_fails_with_the_migration_and_changes_nothing(tmp_path):
    lay_out_snap(tmp_path)
    mod = docker_snap()
    result = mod.docker_snap_check(mod.snap_docker_facts(root=str(tmp_path)), "auto")
    assert set(result) == {"name", "status", "fact", "measured", "expected", "detail", "fix"}
    assert (result["name"], result["status"], result["fact"]) == ("docker_snap", "fail", "host_facts.docker_snap")
    assert "Docker is installed from the snap (/snap/bin/docker, /snap/docker)" in result["detail"]
    assert "NVIDIA/nvidia-container-toolkit#522" in result["detail"] and "docker-snap#357" in result["detail"]
    assert "would install docker.io beside it. Nothing was changed" in result["detail"]
    fix = result["fix"]
    assert "`sudo snap remove --purge docker`" in fix and "/var/snap/docker" in fix and "not migrated" in fix
    assert fix.index("docker save") < fix.index("snap remove") < fix.index("--tags host") < fix.index("docker load")
    assert "installs the distribution's docker.io pinned for this release (bom.docker.install: auto)" in fix


def test_snap_with_install_never_names_the_variable():
    result = docker_snap().docker_snap_check({"installed": True, "evidence": ["/snap/bin/docker"]}, "never")
    assert result["status"] == "fail"
    assert "bom.docker.install is never: install docker.io (or docker-ce) yourself" in result["fix"]


def test_no_snap_passes():
    mod = docker_snap()
    assert mod.docker_snap_check({"installed": False, "evidence": [], "data_dir": None})["status"] == "pass"
    leftover = mod.docker_snap_check({"installed": False, "evidence": [], "data_dir": "/var/snap/docker"})
    assert leftover["status"] == "pass" and "leftover data" in leftover["detail"]
    assert mod.docker_snap_check(None)["status"] == "pass"  # facts of a release that did not read it


def test_the_filter_is_exported():
    from ansible_collections.a800.vllm.plugins.filter import docker_daemon

    assert docker_daemon.FilterModule().filters()["docker_snap_check"] is docker_snap().docker_snap_check


# --- where it runs --------------------------------------------------------------------------------------------


def test_serving_host_facts_reports_it():
    """The module on this machine (read-only): host_facts.docker_snap is there, in the shape the check reads."""
    if not (Path(sys.executable).parent / "ansible").exists():
        pytest.skip(f"ansible not installed beside {sys.executable}")
    rc, out, raw = ansible_adhoc(
        "localhost", "-c", "local", "-i", "localhost,", "-m", "a800.vllm.serving_host_facts",
        "-a", f"weights_path={ROOT / 'no-such-weights'}",
    )  # fmt: skip
    assert rc == 0 and out, raw
    snap = out["plays"][0]["tasks"][0]["hosts"]["localhost"]["ansible_facts"]["host_facts"]["docker_snap"]
    assert set(snap) == {"installed", "evidence", "data_dir", "docker_on_path"}
    assert snap["installed"] is bool(snap["evidence"])
    assert ("/snap/bin/docker" in snap["evidence"]) is os.path.lexists("/snap/bin/docker")  # this machine's truth
    assert ("/snap/docker" in snap["evidence"]) is os.path.isdir("/snap/docker")


def test_serving_host_facts_reads_shm_and_apt_deps_as_the_reads_it_replaces():
    """The preflight's one module run (roles/preflight/tasks/main.yml) holds what two reads gave: /dev/shm's size as
    df prints it (the serve role's tasks/host_shm.yml) and, when asked, the apt library probe of apt_deps_facts."""
    if not (Path(sys.executable).parent / "ansible").exists():
        pytest.skip(f"ansible not installed beside {sys.executable}")
    weights = f"weights_path={ROOT / 'no-such-weights'}"
    rc, out, raw = ansible_adhoc("localhost", "-c", "local", "-i", "localhost,", "-m", "a800.vllm.serving_host_facts",
                                 "-a", f"{weights} apt_deps=true")  # fmt: skip
    assert rc == 0 and out, raw
    facts = out["plays"][0]["tasks"][0]["hosts"]["localhost"]["ansible_facts"]["host_facts"]
    df = subprocess.run(["df", "-B1", "--output=size", "/dev/shm"], capture_output=True, text=True, check=True)
    assert facts["shm_bytes"] == df.stdout.splitlines()[-1].strip()
    rc, out, raw = ansible_adhoc("localhost", "-c", "local", "-i", "localhost,", "-m", "a800.vllm.apt_deps_facts")
    assert rc == 0 and out, raw
    assert facts["apt_deps"] == out["plays"][0]["tasks"][0]["hosts"]["localhost"]["apt_deps"]
    rc, out, raw = ansible_adhoc("localhost", "-c", "local", "-i", "localhost,", "-m", "a800.vllm.serving_host_facts",
                                 "-a", weights)  # fmt: skip
    assert rc == 0 and out, raw
    assert "apt_deps" not in out["plays"][0]["tasks"][0]["hosts"]["localhost"]["ansible_facts"]["host_facts"]


def test_the_preflight_judges_it_with_the_bill_of_materials():
    main = yaml.safe_load((ROOT / "roles" / "preflight" / "tasks" / "main.yml").read_text())
    results = next(t for t in main if t["name"] == "Check the facts against the model profile")
    expr = results["ansible.builtin.set_fact"]["preflight_results"]
    assert "host_facts.docker_snap | a800.vllm.docker_snap_check(preflight_bom.docker.install" in expr


def test_container_runtime_stops_before_anything_changes():
    """The role's first task reads the snap's places (find.yml, or the plan's read of this run), the second stops on
    them: before the apt sources, before docker.io."""
    tasks = yaml.safe_load((ROOT / "roles" / "container_runtime" / "tasks" / "main.yml").read_text())
    names = [t["name"] for t in tasks]
    look = names.index(
        "Look for Docker from the snap (the container toolkit does not support it) and for an installed engine"
    )
    stop = names.index("Stop on Docker from the snap, before anything changes (docs/field.md#docker-from-the-snap)")
    assert look == 0 and stop == 1
    assert tasks[look]["ansible.builtin.include_tasks"] == "find.yml"
    assert tasks[look]["when"] == "__container_runtime_found is not defined"  # the plan's read, else its own
    # The plan reads the same places with the same argv in its one host_read, kept under find.yml's name.
    plan = yaml.safe_load((ROOT / "roles" / "container_runtime" / "tasks" / "plan.yml").read_text())
    assert plan[0]["a800.vllm.host_read"]["commands"]["find"] == "{{ __container_runtime_find_argv }}"
    assert "__container_runtime_found" in plan[1]["ansible.builtin.set_fact"]
    assert "commands.find.stdout" in plan[1]["ansible.builtin.set_fact"]["__container_runtime_found"]["stdout_lines"]
    (read,) = yaml.safe_load((ROOT / "roles" / "container_runtime" / "tasks" / "find.yml").read_text())
    assert read["ansible.builtin.command"]["argv"] == "{{ __container_runtime_find_argv }}"
    assert read["register"] == "__container_runtime_found"
    mod = docker_snap()
    role_vars = yaml.safe_load((ROOT / "roles" / "container_runtime" / "vars" / "main.yml").read_text())
    assert role_vars["__container_runtime_snap_paths"] == [mod.SNAP_DOCKER_COMMAND, mod.SNAP_DOCKER_DIR]
    assert "__container_runtime_snap_paths" in tasks[stop]["vars"]["__found"]
    assert "a800.vllm.docker_snap_check(container_runtime_docker_install)" in tasks[stop]["vars"]["__check"]


def test_the_read_finds_a_link_without_following_it(tmp_path):
    """The role's one read (vars/main.yml __container_runtime_find_argv): a path that exists, or a link whatever it
    points at (/snap/bin/docker is a link to /usr/bin/snap), a line each; the others not at all."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    role_vars = yaml.safe_load((ROOT / "roles" / "container_runtime" / "vars" / "main.yml").read_text())
    script = role_vars["__container_runtime_find_argv"].split("['sh', '-c', '", 1)[1].split("', 'sh']", 1)[0]
    paths = [str(tmp_path / name) for name in ("dir", "dangling", "absent")]
    run = subprocess.run(["sh", "-c", script, "sh", *paths], capture_output=True, text=True, check=True)
    assert run.stdout.splitlines() == paths[:2]


# --- the test bed's identity double ---------------------------------------------------------------------------


def test_identity_lays_out_what_the_detection_reads():
    task = yaml.safe_load(IDENTITY_TASK.read_text())[0]
    cmd = task["ansible.builtin.shell"]["cmd"]
    block = cmd[cmd.index("{% if sim_host.docker_snap") : cmd.index("{% endif %}", cmd.index("sim_host.docker_snap"))]
    mod = docker_snap()
    for path in ("/snap/bin", f"{mod.SNAP_DOCKER_DIR}/3377", f"{mod.SNAP_DOCKER_DATA}/common/var-lib-docker"):
        assert path in block, path
    assert f"ln -sfn {mod.SNAP_LAUNCHER} {mod.SNAP_DOCKER_COMMAND}" in block
    assert '"$c:/usr/bin/snap"' in block and "/bin/snap') | quote" in block
    assert "snap={{ sim_host.docker_snap | default(false) }}" in task["vars"]["__state"]


def run_snap(root: Path, *args: str, name: str = "snap") -> subprocess.CompletedProcess:
    """The stand-in snapd under a test root; name "docker" runs it as /snap/bin/docker does (snapd's launcher)."""
    link = root.parent / f"{root.name}-bin" / name
    link.parent.mkdir(exist_ok=True)
    if not link.exists():
        link.symlink_to(STANDIN_SNAP)
    env = dict(os.environ, NVIDIA_STANDIN_ROOT=str(root))
    return subprocess.run([sys.executable, str(link), *args], env=env, capture_output=True, text=True, check=False)


def test_standin_snapd_lists_and_removes_the_docker_snap(tmp_path):
    lay_out_snap(tmp_path)
    listed = run_snap(tmp_path, "list", "docker")
    assert listed.returncode == 0 and listed.stdout.splitlines()[1].startswith("docker  ")
    assert run_snap(tmp_path, "ps", name="docker").returncode == 1  # the CLI: not simulated
    removed = run_snap(tmp_path, "remove", "--purge", "docker")
    assert removed.returncode == 0 and removed.stdout == "docker removed\n"
    facts = docker_snap().snap_docker_facts(root=str(tmp_path))
    assert facts == {"installed": False, "evidence": [], "data_dir": None, "docker_on_path": None}
    assert not (tmp_path / "var/lib/snapd/snapshots").exists()  # --purge: no snapshot
    assert run_snap(tmp_path, "list", "docker").returncode == 1


def test_standin_snapd_keeps_a_snapshot_without_purge(tmp_path):
    lay_out_snap(tmp_path)
    assert run_snap(tmp_path, "remove", "docker").returncode == 0
    assert [p.name for p in (tmp_path / "var/lib/snapd/snapshots").iterdir()] == ["1_docker_28.1.1+1_3377.zip"]
    assert not docker_snap().snap_docker_facts(root=str(tmp_path))["installed"]
