"""The simulated A800 host after site.yml: GPUs visible through the stand-in driver, Docker with the nvidia
runtime, and `docker run --gpus all` working after the toolkit install and a dockerd restart."""

import json

PROBE = "a800-testbed/probe:latest"


def test_nvidia_smi_lists_eight_a800(host):
    out = host.check_output("nvidia-smi -L")
    lines = out.splitlines()
    assert len(lines) == 8
    assert all("NVIDIA A800 80GB PCIe" in line for line in lines)


def test_toolkit_packages_are_the_pinned_set(host):
    for name in (
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
        "libnvidia-container-tools",
        "libnvidia-container1",
    ):
        pkg = host.package(name)
        assert pkg.is_installed
        assert pkg.version == "1.17.8-1"


def test_docker_knows_the_nvidia_runtime(host):
    daemon = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    runtimes = host.check_output("docker info --format '{{json .Runtimes}}'")
    assert "nvidia" in json.loads(runtimes)


def test_docker_run_gpus_all_starts_a_container(host):
    out = host.check_output(f"docker run --rm --gpus all {PROBE} env")
    assert "NVIDIA_VISIBLE_DEVICES=all" in out.splitlines()


def test_docker_run_gpus_all_lists_eight_gpus(host):
    listing = host.check_output(f"docker run --rm --gpus all {PROBE} nvidia-smi -L").splitlines()
    assert len(listing) == 8
    assert all(line.startswith(f"GPU {i}: NVIDIA A800 80GB PCIe (UUID: GPU-") for i, line in enumerate(listing))


def test_docker_run_gpus_by_device_index(host):
    # Docker's --gpus value is CSV: a device list needs its own quotes.
    out = host.check_output(f"""docker run --rm --gpus '"device=0,1"' {PROBE} env""")
    assert "NVIDIA_VISIBLE_DEVICES=0,1" in out.splitlines()


def test_preflight_changed_nothing_on_the_host(host):
    # The preflight is read-only: it leaves no file of its own behind on the host.
    assert not host.file("/var/lib/nvidia-standin/state.json").exists
    assert not host.file("/data/models").exists


def test_gpu_containers_see_the_gpus_they_were_given(host):
    # The stand-in runtime hook injects nvidia-smi and the hardware description, limited to the requested devices.
    listing = host.check_output(f"""docker run --rm --gpus '"device=0,1"' {PROBE} nvidia-smi -L""")
    assert len(listing.splitlines()) == 2
    hardware = json.loads(
        host.check_output(f"""docker run --rm --gpus '"device=0,1"' {PROBE} cat /etc/nvidia-standin/gpus.json""")
    )
    assert hardware["count"] == 2
    assert hardware["driver"] == "580.95.05"
    everything = json.loads(host.check_output(f"docker run --rm --gpus all {PROBE} cat /etc/nvidia-standin/gpus.json"))
    assert everything.get("count", 8) == 8
