"""site.yml on a hand-set-up Ubuntu 22.04 host and on a bare host (test doubles of the OS identity and state).

a800-mol-jammy: apt reads every source (the hand-added NVIDIA entries reused, none of ours beside them), NVIDIA's
ubuntu2204 packages at the pin, and the article's hand-run server replaced once by the rendered launch.
a800-mol-bare: the distribution's Docker engine at the version pinned for the release, held, running.
a800-mol-sb: Secure Boot on, Canonical's precompiled signed module for the running kernel, no DKMS, no headers.
Every host: a `docker run --gpus all` container that lists the 8 GPUs."""

import json

import pytest

PROBE = "a800-testbed/probe:latest"


def only(host, name):
    if host.backend.get_hostname() != name:
        pytest.skip(f"for {name}")


def test_apt_reads_every_source_without_an_error(host):
    update = host.run("apt-get update")
    assert update.rc == 0, update.stderr
    assert "Conflicting values" not in update.stderr


def test_hand_added_nvidia_sources_are_reused_and_ours_not_added(host):
    only(host, "a800-mol-jammy")
    cuda = host.file("/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list")
    toolkit = host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.list")
    assert cuda.exists and "signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg" in cuda.content_string
    assert toolkit.exists and "signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg" in (
        toolkit.content_string
    )
    assert not host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").exists
    assert not host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").exists


def test_the_ubuntu_2204_packages_at_the_pin_and_held(host):
    only(host, "a800-mol-jammy")
    for name in ("libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-utils-580", "nvidia-compute-utils-580"):
        assert host.package(name).version == "580.95.05-0ubuntu1", name
    held = host.check_output("apt-mark showhold").split()
    assert {"libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-container-toolkit"} <= set(held)


def test_the_hand_run_server_was_replaced_once_by_the_rendered_launch(host):
    only(host, "a800-mol-jammy")
    hand_run = host.file("/etc/nvidia-standin/hand-run-container").content_string.strip()
    names = host.check_output("docker ps -a --format '{{.Names}}'").split()
    assert names.count("glm52-nvfp4") == 1
    info = json.loads(host.check_output("docker inspect glm52-nvfp4"))[0]
    assert info["Id"] != hand_run  # replaced ...
    assert info["Config"]["Labels"].get("io.a800-vllm.config-hash")  # ... by the rendered launch
    assert info["State"]["Running"] and info["RestartCount"] == 0
    gpu_holders = [n for n in names if n != "glm52-nvfp4"]
    assert gpu_holders == []  # never two servers for the GPUs or the port


def test_the_bare_host_got_the_pinned_distribution_engine(host):
    only(host, "a800-mol-bare")
    pkg = host.package("docker.io")
    assert pkg.is_installed and pkg.version == "20.10.24+dfsg1-1+deb12u1+b6"
    assert "docker.io" in host.check_output("apt-mark showhold").split()
    assert host.service("docker").is_enabled and host.service("docker").is_running


def test_docker_run_gpus_all_lists_eight_gpus(host):
    out = host.check_output(f"docker run --rm --gpus all {PROBE} nvidia-smi -L")
    assert len([line for line in out.splitlines() if line.startswith("GPU ")]) == 8


def test_secure_boot_host_runs_canonicals_signed_module_without_dkms(host):
    only(host, "a800-mol-sb")
    kernel = host.check_output("uname -r")
    assert host.check_output("mokutil --sb-state") == "SecureBoot enabled"
    assert host.package(f"linux-modules-nvidia-580-server-open-{kernel}").is_installed
    for name in (
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
        "nvidia-compute-utils-580-server",
    ):
        assert host.package(name).version == "580.95.05-0ubuntu0.24.04.1", name
    for name in ("nvidia-dkms-580-open", f"linux-headers-{kernel}", "libnvidia-compute-580"):
        assert not host.package(name).is_installed, name
    assert not host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").exists  # NVIDIA's repository not needed
    smi = host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").splitlines()
    assert smi == ["580.95.05"] * 8
