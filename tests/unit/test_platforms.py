"""Supported systems as data (roles/a800/vars/platform/), the preflight's os and python checks, and the per-release
choice of NVIDIA's repository path, package names, versions and Docker pin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.a800.vllm.plugins.filter.nvidia_packages import (
    nvidia_cuda_source,
    nvidia_driver_install,
    nvidia_driver_install_checks,
    nvidia_toolkit_source,
)
from ansible_collections.a800.vllm.plugins.filter.platform import a800_platform_checks, facts_current, os_identity
from conftest import ROOT

PLATFORM_DIR = ROOT / "roles" / "a800" / "vars" / "platform"
IDENTITIES = ROOT / "tests" / "testbed" / "identities"
BOM = yaml.safe_load((ROOT / "inventories" / "prod" / "group_vars" / "all" / "bom.yml").read_text())["bom"]
KERNEL = "6.8.0-48-generic"


def platforms() -> dict[str, dict]:
    return {p.stem: yaml.safe_load(p.read_text())["a800_platform"] for p in sorted(PLATFORM_DIR.glob("*.yml"))}


def identity(name: str, python: str = "3.12.3 /usr/bin/python3") -> dict:
    text = (IDENTITIES / name / "etc" / "os-release").read_text()
    return os_identity(f"{text}\n--- python\n{python}\n")


def test_the_supported_systems_are_ubuntu_22_04_and_24_04_and_the_test_bed():
    found = platforms()
    assert sorted(found) == ["Debian_12", "Ubuntu_22.04", "Ubuntu_24.04"]
    assert {k: p["key"] for k, p in found.items()} == {k: k for k in found}
    assert sorted(p["name"] for p in found.values() if p["use"] == "production") == [
        "Ubuntu 22.04 LTS (jammy)",
        "Ubuntu 24.04 LTS (noble)",
    ]


@pytest.mark.parametrize(
    ("key", "directory"), [("Ubuntu_22.04", "ubuntu2204"), ("Ubuntu_24.04", "ubuntu2404"), ("Debian_12", "debian12")]
)
def test_nvidia_repository_path_follows_the_release(key, directory):
    source = nvidia_cuda_source(BOM["nvidia_driver"]["repo"], platforms()[key])
    url = f"https://developer.download.nvidia.com/compute/cuda/repos/{directory}/x86_64/"
    assert source == {"name": "nvidia-cuda", "uris": url, "suites": "/", "signed_by": url + "3bf863cc.pub"}


def test_a_mirror_replaces_the_base_and_keeps_the_layout():
    mirror = {"base": "http://mirror.intra/nvidia/cuda/repos/", "key": "3bf863cc.pub"}
    assert nvidia_cuda_source(mirror, platforms()["Ubuntu_22.04"])["uris"] == (
        "http://mirror.intra/nvidia/cuda/repos/ubuntu2204/x86_64/"
    )
    toolkit = nvidia_toolkit_source(BOM["container_toolkit"]["repo"], platforms()["Ubuntu_22.04"])
    assert toolkit["uris"] == "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/"
    assert toolkit["signed_by"] == "https://nvidia.github.io/libnvidia-container/gpgkey"


@pytest.mark.parametrize(
    ("key", "version"),
    [
        ("Ubuntu_22.04", "29.1.3-0ubuntu3~22.04.2"),
        ("Ubuntu_24.04", "29.1.3-0ubuntu3~24.04.2"),
        ("Debian_12", "20.10.24+dfsg1-1+deb12u1+b6"),
    ],
)
def test_docker_engine_pin_is_per_release(key, version):
    platform = platforms()[key]
    assert (platform["docker_package"], platform["docker_version"]) == ("docker.io", version)


def driver(**over) -> dict:
    return {"branch": "580", "version": "580.95.05", "kernel_modules": "open", "source": "cuda-repo", **over}


def test_branch_580_ubuntu_is_the_compute_only_set_with_the_branch_in_every_name():
    got = nvidia_driver_install(driver(), platforms()["Ubuntu_24.04"], KERNEL)
    assert got["install"] == [
        "libnvidia-compute-580=580.95.05-*",
        "nvidia-dkms-580-open=580.95.05-*",
        "nvidia-utils-580=580.95.05-*",
        "nvidia-compute-utils-580=580.95.05-*",
    ]
    assert got["headers"] == f"linux-headers-{KERNEL}"
    assert got["pinning"] == [] and got["dkms"]
    assert not any("nvidia-driver-580" in name for name in got["install"])  # the desktop stack stays out
    assert got["fabricmanager"] == "nvidia-fabricmanager-580=580.95.05-*"


def test_proprietary_modules_change_only_the_dkms_package():
    got = nvidia_driver_install(driver(kernel_modules="proprietary"), platforms()["Ubuntu_22.04"], KERNEL)
    assert "nvidia-dkms-580=580.95.05-*" in got["install"]
    assert not any("open" in name for name in got["install"])


def test_branch_590_and_later_use_names_without_the_branch_and_the_pinning_package():
    got = nvidia_driver_install(driver(branch="590", version="590.44.01"), platforms()["Ubuntu_24.04"], KERNEL)
    assert got["pinning"] == ["nvidia-driver-pinning-590.44.01"]
    assert got["install"] == ["libnvidia-compute=590.44.01-*", "nvidia-dkms-open=590.44.01-*"]
    assert got["hold"] == ["libnvidia-compute", "nvidia-dkms-open"]


def test_debian_12_uses_nvidias_debian_names():
    got = nvidia_driver_install(driver(), platforms()["Debian_12"], KERNEL)
    assert got["install"] == ["nvidia-driver-cuda=580.95.05-*", "nvidia-kernel-open-dkms=580.95.05-*"]
    assert got["pinning"] == ["nvidia-driver-pinning-580.95.05"]


def test_ubuntu_precompiled_modules_are_for_the_running_kernel_and_need_no_headers():
    got = nvidia_driver_install(driver(source="ubuntu-precompiled"), platforms()["Ubuntu_22.04"], KERNEL)
    assert got["install"] == [
        f"linux-modules-nvidia-580-server-open-{KERNEL}",
        "nvidia-kernel-common-580-server=580.95.05-*",
        "nvidia-headless-no-dkms-580-server-open=580.95.05-*",
        "nvidia-utils-580-server=580.95.05-*",
        "nvidia-compute-utils-580-server=580.95.05-*",
    ]
    assert got["headers"] is None and not got["dkms"]
    with pytest.raises(AnsibleFilterError, match="Debian 12"):
        nvidia_driver_install(driver(source="ubuntu-precompiled"), platforms()["Debian_12"], KERNEL)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"version": "575.51.03"}, "not on branch 580"),
        ({"branch": "r580"}, "must be a number"),
        ({"source": "runfile"}, "must be one of"),
    ],
)
def test_inconsistent_driver_pins_are_refused_with_the_variable(over, message):
    with pytest.raises(AnsibleFilterError, match=message):
        nvidia_driver_install(driver(**over), platforms()["Ubuntu_24.04"], KERNEL)


def statuses(checks: list[dict]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in checks}


@pytest.mark.parametrize("name", ["ubuntu-22.04", "ubuntu-24.04"])
def test_ubuntu_identities_pass(name):
    assert statuses(a800_platform_checks(identity(name), list(platforms().values()), "3.8")) == {
        "os": "pass",
        "python": "pass",
    }


@pytest.mark.parametrize(
    ("name", "words"),
    [("openeuler-22.03", ["openEuler 22.03", "RHEL family"]), ("rocky-9", ["Rocky Linux 9.6", "RHEL family"])],
)
def test_rhel_family_is_refused_naming_what_was_found_and_what_is_supported(name, words):
    os_check = a800_platform_checks(identity(name), list(platforms().values()), "3.8")[0]
    assert os_check["status"] == "fail"
    for word in words:
        assert word in os_check["detail"]
    assert "Ubuntu 22.04 LTS (jammy)" in os_check["expected"] and "Ubuntu 24.04 LTS (noble)" in os_check["expected"]
    assert "nothing was changed" in os_check["detail"] and "Ubuntu 22.04 or 24.04" in os_check["fix"]


def test_another_ubuntu_release_is_refused():
    other = identity("ubuntu-24.04")
    other["os_release"] = dict(other["os_release"], VERSION_ID="20.04", PRETTY_NAME="Ubuntu 20.04.6 LTS")
    assert a800_platform_checks(other, list(platforms().values()), "3.8")[0]["status"] == "fail"


def test_a_system_without_per_release_facts_stops_every_play_naming_it(tmp_path: Path):
    """Where facts were gathered, the role a800 has the host's release checked (the role validate_inventory,
    tasks/platform.yml) before it loads the per-release file: a release without one stops the play there, naming
    what the host runs and what the roles support, before any other task (a templating error did once)."""
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"children": {"a800_servers": {"hosts": {"foreign": {"ansible_connection": "local"}}}}}})
    )
    (tmp_path / "group_vars").symlink_to(ROOT / "inventories/prod/group_vars", target_is_directory=True)
    play = {"name": "A play", "hosts": "a800_servers", "gather_facts": False, "roles": [{"role": "a800"}],
            "tasks": [{"name": "After the role a800", "ansible.builtin.debug": {"msg": "reached"}}]}  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    facts = {"distribution": "Rocky", "distribution_version": "9.6", "distribution_major_version": "9",
             "os_family": "RedHat"}  # fmt: skip
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"))  # fmt: skip
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), str(tmp_path / "play.yml")]
    argv += ["-i", str(tmp_path / "hosts.yml")]
    argv += ["-e", json.dumps({"ansible_facts": facts, "ansible_python_interpreter": sys.executable})]
    run = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 2, out
    assert "TASK [validate_inventory : Stop on a system without per-release facts]" in out
    assert "foreign runs Rocky 9.6 (RedHat family): the roles support Ubuntu 22.04 LTS (jammy)" in out, out
    assert "After the role a800" not in out and "Load the per-release facts" not in out


@pytest.mark.parametrize(
    ("python", "status"),
    [
        ("3.6.8 /usr/libexec/platform-python", "fail"),
        ("3.7.9 /usr/bin/python3", "fail"),
        ("3.8.0 /usr/bin/python3", "pass"),
        ("", "fail"),
    ],
)
def test_a_python_too_old_for_ansible_core_2_19_is_refused(python, status):
    py_check = a800_platform_checks(identity("ubuntu-22.04", python), list(platforms().values()), "3.8")[1]
    assert py_check["status"] == status
    if status == "fail":
        assert "ansible_python_interpreter" in py_check["fix"]


def test_runfile_driver_and_secure_boot_with_dkms_stop_the_install():
    gpu = {"driver_loaded": False}
    bom = {"source": "cuda-repo", "version": "580.95.05"}
    runfile = nvidia_driver_install_checks({"runfile_driver": "/usr/bin/nvidia-uninstall"}, gpu, bom)
    assert statuses(runfile)["driver_install_method"] == "fail"
    assert "sudo /usr/bin/nvidia-uninstall" in runfile[0]["fix"]
    secure = nvidia_driver_install_checks({"secure_boot": "enabled"}, gpu, bom)
    assert statuses(secure) == {"driver_install_method": "pass", "secure_boot": "fail"}
    assert "mokutil --import /var/lib/dkms/mok.pub" in secure[1]["fix"]
    assert "ubuntu-precompiled" in secure[1]["fix"]
    precompiled = nvidia_driver_install_checks({"secure_boot": "enabled"}, gpu, dict(bom, source="ubuntu-precompiled"))
    assert statuses(precompiled)["secure_boot"] == "pass"
    enrolled = nvidia_driver_install_checks(
        {"secure_boot": "enabled"}, {"driver_loaded": True, "driver_version": "580.95.05"}, bom
    )
    assert statuses(enrolled)["secure_boot"] == "pass"


REAL = ROOT / "tests" / "fixtures" / "hosts" / "nvidia-h200-ubuntu-24.04"


def test_a_real_ubuntu_24_04_gpu_host_passes_the_system_checks():
    real = os_identity((REAL / "preflight-raw.txt").read_text())
    assert real["os_release"]["PRETTY_NAME"] == "Ubuntu 24.04.3 LTS"
    assert real["python"] == {"version": "3.12.3", "executable": "/usr/bin/python3"}
    assert statuses(a800_platform_checks(real, list(platforms().values()), "3.8")) == {"os": "pass", "python": "pass"}


def test_the_ubuntu_24_04_identity_double_is_the_real_os_release():
    real = os_identity((REAL / "preflight-raw.txt").read_text())["os_release"]
    assert identity("ubuntu-24.04")["os_release"] == real


APT_SHOW_MODULES = """Package: linux-modules-nvidia-580-server-open-6.8.0-48-generic
Source: linux-restricted-modules
Version: 6.8.0-48.48+1
Architecture: amd64
Depends: linux-image-6.8.0-48-generic | linux-image-unsigned-6.8.0-48-generic, \
linux-signatures-nvidia-6.8.0-48-generic (= 6.8.0-48.48+1), nvidia-kernel-common-580-server (<= 580.95.05-1), \
nvidia-kernel-common-580-server (>= 580.95.05)
Description: Linux kernel nvidia modules for version 6.8.0-48

"""


def test_the_driver_a_precompiled_module_is_built_for_comes_from_its_dependencies():
    from ansible_collections.a800.vllm.plugins.filter.nvidia_packages import precompiled_module_driver

    name = "linux-modules-nvidia-580-server-open-6.8.0-48-generic"
    assert precompiled_module_driver(APT_SHOW_MODULES, name) == "580.95.05"
    assert precompiled_module_driver("", name) is None  # the archive has no module for this kernel
    assert precompiled_module_driver(APT_SHOW_MODULES, "linux-modules-nvidia-580-server-open-6.8.0-50-generic") is None


def test_the_cached_facts_are_current_exactly_where_setup_would_find_the_same_kernel_and_release(tmp_path):
    """playbooks/host.yml gathers no facts where the preflight of the run read the kernel and the os-release that the
    cached facts hold (a800.vllm.facts_current). Held to Ansible's own setup (gather_subset min) on this machine: its
    facts, with the running kernel and /etc/os-release as the preflight reads them, are current; another kernel (a
    reboot into a new one) or another release (an upgrade) is not."""
    from test_rolling import ansible_playbook

    play = [{"name": "facts", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"ansible.builtin.setup": {"gather_subset": ["min"]}},
        {"ansible.builtin.copy": {"content": "{{ ansible_facts | to_json }}", "dest": str(tmp_path / "facts.json")}},
    ]}]  # fmt: skip
    rc, out = ansible_playbook(tmp_path, play, "-i", "localhost,", "-c", "local",
                               "-e", f"ansible_python_interpreter={sys.executable}")  # fmt: skip
    assert rc == 0, out[-3000:]
    facts = json.loads((tmp_path / "facts.json").read_text())
    release = Path("/etc/os-release").read_text()
    kernel = os.uname().release
    assert facts_current(facts, kernel, release + "--- python\n") is True
    assert facts_current(facts, kernel + "-new", release) is False
    assert facts_current(facts, kernel, release.replace("VERSION_ID=", "VERSION_ID=9")) is False
    assert facts_current({}, kernel, release) is False
    assert facts_current(facts, "", release) is False
