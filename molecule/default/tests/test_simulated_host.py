"""The simulated A800 host (Ubuntu 24.04 identity) after site.yml: NVIDIA's ubuntu2404 repository, the pinned and
held compute-only driver built by DKMS against the running kernel's headers, the toolkit, nouveau blacklisted, the
persistence daemon with persistence mode from boot, daemon.json merged (the operator's keys kept), apt clean, and
`docker run --gpus all` seeing 8 GPUs."""

import json
import os
from pathlib import Path

import pytest
import yaml

PROBE = "a800-testbed/probe:latest"
ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
THRESHOLD = yaml.safe_load((ROOT / "inventories/sim/group_vars/all/simulated_host.yml").read_text())[
    "weights_residency_threshold_pct"
]
DRIVER = "580.95.05-0ubuntu1"
TOOLKIT = "1.17.8-1"
DRIVER_PACKAGES = ("libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-utils-580", "nvidia-compute-utils-580")
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")  # fmt: skip


def selections(host):
    out = host.check_output("dpkg --get-selections")
    return dict(line.split() for line in out.splitlines())


@pytest.mark.parametrize(("name", "version"), [(p, DRIVER) for p in DRIVER_PACKAGES]
                         + [(p, TOOLKIT) for p in TOOLKIT_PACKAGES])  # fmt: skip
def test_packages_are_pinned_and_held(host, name, version):
    pkg = host.package(name)
    assert pkg.is_installed
    assert pkg.version == version
    assert selections(host)[name] == "hold"


def test_a_newer_driver_is_available_but_not_installed(host):
    policy = host.check_output("apt-cache policy nvidia-utils-580")
    assert "580.105.08-0ubuntu1" in policy  # the repository offers it ...
    assert host.package("nvidia-utils-580").version == DRIVER  # ... the pin keeps 580.95.05


def test_neither_the_desktop_stack_nor_the_proprietary_flavour_is_installed(host):
    for name in ("nvidia-driver-580-open", "nvidia-driver-580", "nvidia-dkms-580"):
        assert not host.package(name).is_installed, name


def test_the_host_presents_ubuntu_24_04_and_gets_that_releases_repository(host):
    assert 'VERSION_ID="24.04"' in host.file("/etc/os-release").content_string
    source = host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").content_string
    assert "/compute/cuda/repos/ubuntu2404/x86_64/" in source
    assert "Signed-By: /etc/apt/keyrings/nvidia-cuda.asc" in source  # the signed repository, no trusted=yes
    assert "Trusted" not in source


def test_apt_reads_every_source_without_an_error(host):
    update = host.run("apt-get update")
    assert update.rc == 0, update.stderr
    assert "Conflicting values" not in update.stderr and not update.stderr.startswith("E:")


def test_dkms_built_the_module_for_the_running_kernel_against_its_headers(host):
    kernel = host.check_output("uname -r")
    assert host.package(f"linux-headers-{kernel}").is_installed
    assert host.file(f"/lib/modules/{kernel}/updates/dkms/nvidia.ko").exists


def test_unattended_upgrades_keep_away(host):
    content = host.file("/etc/apt/apt.conf.d/51nvidia-driver-no-unattended-upgrade").content_string
    assert '"nvidia-";' in content and '"libnvidia-";' in content


def test_nouveau_is_blacklisted(host):
    content = host.file("/etc/modprobe.d/blacklist-nouveau.conf").content_string
    assert "blacklist nouveau" in content.splitlines()
    assert "options nouveau modeset=0" in content.splitlines()


def test_persistence_daemon_runs_and_gpus_are_persistent(host):
    service = host.service("nvidia-persistenced")
    assert service.is_enabled and service.is_running
    dropin = host.file("/etc/systemd/system/nvidia-persistenced.service.d/override.conf").content_string
    assert "ExecStart=\n" in dropin and "--persistence-mode" in dropin
    # the daemon itself keeps persistence on (the package's unit says --no-persistence-mode)
    assert host.file("/run/nvidia-persistenced/persistence-mode").content_string.strip() == "1"
    modes = host.check_output("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader").splitlines()
    assert modes == ["Enabled"] * 8


def test_no_fabric_manager_without_nvswitch(host):
    assert not host.package("nvidia-fabricmanager-580").is_installed


def test_daemon_json_merged_keeping_the_operators_keys(host):
    daemon = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert daemon["log-driver"] == "json-file"
    assert daemon["log-opts"] == {"max-size": "50m", "max-file": "3"}
    assert daemon["runtimes"]["nvidia"] == {"args": [], "path": "nvidia-container-runtime"}
    assert "default-runtime" not in daemon
    runtimes = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    assert "nvidia" in runtimes


def test_docker_run_gpus_all_lists_eight_gpus(host):
    listing = host.check_output(f"docker run --rm --gpus all {PROBE} nvidia-smi -L").splitlines()
    assert len(listing) == 8
    assert all(line.startswith(f"GPU {i}: NVIDIA A800 80GB PCIe (UUID: GPU-") for i, line in enumerate(listing))


def test_docker_run_gpus_by_device_index(host):
    # Docker's --gpus value is CSV: a device list needs its own quotes.
    out = host.check_output(f"""docker run --rm --gpus '"device=0,1"' {PROBE} env""")
    assert "NVIDIA_VISIBLE_DEVICES=0,1" in out.splitlines()
    listing = host.check_output(f"""docker run --rm --gpus '"device=0,1"' {PROBE} nvidia-smi -L""")
    assert len(listing.splitlines()) == 2


def test_sysctls_and_limits_written(host):
    """Each file holds exactly the role's defaults, in the form its reader parses: sysctl.d(5) `key=value` lines,
    limits.conf(5) entries of four whitespace-separated fields (a literal `\\t` would make one field and no limit)."""
    defaults = yaml.safe_load((ROOT / "roles/host_tuning/defaults/main.yml").read_text())
    sysctl = host.file("/etc/sysctl.d/90-gpu-serving.conf").content_string
    assert sysctl.splitlines() == [f"{key}={value}" for key, value in defaults["host_tuning_sysctls"].items()], sysctl
    limits = host.file("/etc/security/limits.d/90-gpu-serving.conf").content_string
    entries = [line.split() for line in limits.splitlines()]
    wanted = [[e["domain"], e["type"], e["item"], str(e["value"])] for e in defaults["host_tuning_limits"]]
    assert entries == wanted, limits
    assert all(line.count("\t") == 3 for line in limits.splitlines()), limits


def test_weights_are_in_the_page_cache(host):
    """The weights phase left the weights resident: at least the host's weights_residency_threshold_pct, as the phase
    measured it when it ended (its progress file). What stays resident minutes later, when this test runs, is the
    machine's memory pressure's (CI's evicts pages; a real host holds 99 % with its headroom): fincore (util-linux,
    independent of the role's mincore code) reads the same files and their size now, and its figure is printed."""
    progress = json.loads(host.file("/run/weights-prewarm-progress.json").content_string)
    assert progress["finished"] is True
    assert progress["resident_percent"] >= THRESHOLD, progress
    out = host.check_output("fincore --bytes --noheadings --output RES,SIZE /data/models/GLM-5.2-NVFP4/*.safetensors")
    rows = [line.split() for line in out.splitlines()]
    assert len(rows) == 8
    resident, size = (sum(int(row[i]) for row in rows) for i in (0, 1))
    assert size > 0
    print(
        f"\nBENCH weights resident at verify: {100 * resident / size:.1f} % (at the phase's end: "
        f"{progress['resident_percent']:.1f} %)"
    )


def test_cdi_specification_lists_every_gpu(host):
    spec = json.loads(host.file("/etc/cdi/nvidia.yaml").content_string)  # YAML, written as JSON by nvidia-ctk
    assert spec["kind"] == "nvidia.com/gpu"
    assert sorted(d["name"] for d in spec["devices"]) == sorted([*map(str, range(8)), "all"])


SERVING_IMAGE = "vllm/vllm-openai:v0.26.0-glm52-sm80"
SERVE_CONTAINER = "glm52-nvfp4"


def inspect(host, *argv):
    return json.loads(host.check_output("docker " + " ".join(argv)))


def test_the_engine_keeps_its_images_in_the_containerd_image_store(host):
    """The scenario's host runs Docker on the containerd image store (platform containerd_store): the storage driver
    is a containerd snapshotter, and the image built here, never pushed, has a repository digest that is its ID (its
    manifest's digest); the classic store gives a built image none."""
    info = inspect(host, "info", "--format", "'{{json .DriverStatus}}'")
    assert ["driver-type", "io.containerd.snapshotter.v1"] in info, info
    image = inspect(host, "image", "inspect", SERVING_IMAGE)[0]
    assert image["RepoDigests"] == [f"{SERVING_IMAGE.rsplit(':', 1)[0]}@{image['Id']}"], image["RepoDigests"]


def test_the_server_runs_the_built_image_by_its_id(host):
    """The image role's image_ref (the built image's ID) is what the serve role ran and what it compares: the
    container's image is that ID on this store too."""
    image = inspect(host, "image", "inspect", SERVING_IMAGE)[0]
    container = inspect(host, "container", "inspect", SERVE_CONTAINER)[0]
    assert container["Image"] == image["Id"]


def test_docker_save_and_load_keep_the_image_id_on_this_store(host):
    """docker save writes an OCI layout (index.json) on this store, and docker load of it gives back the same ID:
    what the bundle's and the tarball path's archives rely on."""
    image_id = inspect(host, "image", "inspect", SERVING_IMAGE)[0]["Id"]
    archive = "/var/tmp/a800-serving-image.tar"
    try:
        host.check_output(f"docker save -o {archive} {SERVING_IMAGE}")
        members = host.check_output(f"tar -tf {archive}").split()
        assert "index.json" in members and "oci-layout" in members, members[:20]
        loaded = host.check_output(f"docker load -i {archive}")
        assert f"Loaded image: {SERVING_IMAGE}" in loaded
        assert inspect(host, "image", "inspect", SERVING_IMAGE)[0]["Id"] == image_id
    finally:
        host.run(f"rm -f {archive}")


# --- last: the idempotence proof (in place of Molecule's idempotence step) -------------------------------------------
def test_a_second_run_of_site_yml_changes_nothing_but_the_evicted_pages(host):
    """The second site.yml, with the converge's extra vars, as Molecule's idempotence step ran it. Whether the kernel
    kept the weights in the page cache since the converge is the machine's memory pressure's (CI evicts pages, and a
    prewarm that reads them back reports the change it made), so the test decides it: the weights are evicted first,
    and the one change allowed is the prewarm's reading them back; every other task changes nothing. Last of the
    tests that read the converged state (test_upgrade.py, after it, changes the launch)."""
    import shlex
    import subprocess
    import sys

    root = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
    sys.path.insert(0, str(root / "tests" / "testbed"))
    from page_cache import EVICT
    from playbook_output import changed_tasks, recap, task_outcomes, unchanged_message

    name = host.backend.get_hostname()
    host.check_output(f"python3 -c {shlex.quote(EVICT)} /data/models/GLM-5.2-NVFP4")
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_INVENTORY=str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent))  # fmt: skip
    run = subprocess.run(
        ["ansible-playbook", "site.yml", "-e", "bench_enabled=true bench_fail_outside_band=false"],
        cwd=root, env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:]
    assert " changed=1 " in recap(run.stdout, name), unchanged_message(run.stdout, name)
    changed = [task.split(" : ", 1)[-1] for task in changed_tasks(run.stdout, name)]
    assert changed == ["Read the prewarm job"], unchanged_message(run.stdout, name)
    # The server runs this command line on this image: no phase starts a container to parse it again.
    argcheck = task_outcomes(
        run.stdout, name, "serve : Check the command line with the image's own vLLM argument parser"
    )
    assert argcheck and all(o == "skipping" for o in argcheck), argcheck
    # The driver that runs is read once, by the preflight: neither the host phase's plan nor its role read it again,
    # and no package was installed, so not after the install either.
    driver_reads = task_outcomes(run.stdout, name, "nvidia_driver : Read the running driver")
    assert driver_reads == ["skipping", "skipping"], driver_reads
    assert "nvidia_driver : Read the running driver after the install" not in run.stdout
    # What a run has read once is not read again in it (nothing a run does changes it): the preflight's host facts
    # and apt library probe, the plan's dpkg read for the driver decision, the checkpoint index and /dev/shm (with the
    # preflight's host facts: the serve role's read never runs after a preflight); the plan's reads of Docker's
    # place and of daemon.json, and the preflight's of the engine's image store (no engine was installed since) and of
    # the GPUs (the driver did not change).
    once = {
        "nvidia_driver : Read the installed driver packages, the persistence daemon and the role's files": ["ok"],
        "nvidia_driver : Read the host's Secure Boot state and any .run-installed driver": ["skipping"],
        "weights : Read the host's RAM (as the preflight does; a run whose preflight read it takes that)": ["skipping"],
        "apt_sources : Install what the repository module needs": ["skipping", "skipping"],
        # The checkpoint's declared size is read with the image by the preflight's first read of the serve role.
        "serve : Read the checkpoint index (its declared size is what the engine loads)": ["skipping", "skipping"],
        "serve : Find what listens on the host's TCP ports, and the ports the running containers publish": ["skipping"],
        "serve : Read the size of the host's /dev/shm": ["skipping", "skipping"],
        # The plan's one read of Docker's places, the toolkit packages, the proxy drop-in and daemon.json.
        "container_runtime : Find an installed Docker engine, read the toolkit packages, the proxy drop-in, "
        "daemon.json and the role's files": ["ok"],
        "container_runtime : Read daemon.json": ["skipping"],
        # The role a800's inputs are validated once per run (its tasks/setup.yml), not in each play that lists it.
        "a800 : Check the inputs against the role's argument spec (entry point setup)": ["ok"],
        # The plan's dpkg-query showed the toolkit packages on hold (hi): none is held again.
        "container_runtime : Hold the toolkit packages": ["skipping"],
        "container_runtime : Read the image store of the running engine": ["ok"],
        "serve : Read the GPUs": ["skipping"],
        # The preflight found the engine answering and no reboot is planned: it is not asked again.
        "container_runtime : Find the running Docker engine": ["skipping"],
        # The same launch serves: last-good.json holds it already (the serve decision's read), it is not written again.
        "serve : Keep this launch as the last known-good one": ["skipping"],
        # No proxy, and the plan read no drop-in of dockerd's: nothing to remove.
        "container_runtime : Remove dockerd's proxy drop-in (no proxy set)": ["skipping"],
        # Every file a role writes was read in place, as it would be written, with the role's other reads
        # (a800.vllm.host_read, a800.vllm.file_current): no write asks the host.
        "nvidia_driver : Blacklist nouveau": ["skipping"],
        "nvidia_driver : Keep unattended-upgrades away from the driver": ["skipping"],
        "nvidia_driver : Create the drop-in directory of nvidia-persistenced": ["skipping"],
        "nvidia_driver : Start nvidia-persistenced with persistence mode on, at every boot": ["skipping"],
        "container_runtime : Install NVIDIA's udev rule that makes the /dev/char links when the driver binds": [
            "skipping"
        ],
        "container_runtime : Create the CDI directory": ["skipping"],
        "container_runtime : Write the CDI specification": ["skipping"],
        "host_tuning : Write the kernel parameters (applied at every boot by systemd-sysctl)": ["skipping"],
        "host_tuning : Write the process limits": ["skipping"],
        "weights : Create node exporter's textfile directory": ["skipping"],
        "weights : Install the residency measurement, its service and its timer": ["skipping"],
        "image : Install what the Docker modules need on the host": ["skipping"],
        "image : Create the state directories": ["skipping"],
        "serve : Create the state and cache directories": ["skipping"],
        "serve : Write the launch on the host (the diff shows what would change)": ["skipping"],
        # Units that were active and enabled when read are not asked again.
        "nvidia_driver : Start the persistence daemon, and at every boot": ["skipping"],
        "weights : Start the timer now, and at every boot": ["skipping"],
        # Molecule's own ansible.cfg keeps no fact cache between runs, so the plan has no cached facts to hold to the
        # preflight's kernel and release (a800.vllm.facts_current, tests/unit/test_platforms.py): it gathers them.
        "Read fresh facts (kernel, release) before anything is installed for them": ["ok"],
    }
    assert {task: task_outcomes(run.stdout, name, task) for task in once} == once
    # Every toolkit package is at its version (the plan's dpkg read): apt is not asked to install them again.
    toolkit = task_outcomes(run.stdout, name, "container_runtime : Install the four toolkit packages at one version")
    assert toolkit == ["skipping"], toolkit
    # The same for the driver: every package at its version in the plan's dpkg read, so apt's lists are not read and
    # apt is not asked (nor for the running kernel's headers, installed by the converge).
    driver = {task: task_outcomes(run.stdout, name, "nvidia_driver : " + task)
              for task in ("Read the archive's versions of the driver packages",
                           "Install the pinned driver packages (compute only) at the archive's versions")}  # fmt: skip
    assert all(outcomes == ["skipping"] for outcomes in driver.values()), driver
    headers = [line for line in run.stdout.splitlines() if line.startswith("TASK [nvidia_driver : Install linux-head")]
    assert len(headers) == 1, headers
    assert task_outcomes(run.stdout, name, headers[0][len("TASK [") :].split("]", 1)[0]) == ["skipping"]
    # The server was running and nothing disruptive was planned: its container proves the GPUs, no probe container.
    probe = task_outcomes(run.stdout, name, "container_runtime : Prove that a --gpus all container sees every GPU")
    assert probe == ["skipping"], probe
    # The GPUs are read and checked once: the host phase does not repeat the preflight when the driver did not change.
    gpu_reads = [line for line in run.stdout.splitlines() if line.startswith("TASK [preflight : Read the GPUs from")]
    assert len(gpu_reads) == 1, gpu_reads
