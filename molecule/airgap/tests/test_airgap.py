"""site.yml on an air-gapped simulated host, from the offline bundle alone (molecule/airgap/molecule.yml).

Nothing left the host (every packet sent off it is counted, and none was), the packages came from the bundle's
signed repository (NVIDIA's repositories were not even added), the base image was loaded from the bundle, the
bundle was checked before use, and a damaged bundle is refused before anything is installed from it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
INVENTORY = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
BUNDLE = "/srv/a800-bundle"
DRIVER = "580.95.05-0ubuntu1"


def egress_packets(host) -> int:
    out = host.check_output("iptables -L A800_EGRESS -v -n -x")
    return sum(int(line.split()[0]) for line in out.splitlines() if "REJECT" in line)


def test_the_host_has_no_network_but_loopback(host):
    links = host.check_output("ip -o link show | awk -F': ' '{print $2}'").split()
    assert [name for name in links if not name.startswith(("lo", "docker", "veth", "a800-egress"))] == []


def test_nothing_tried_to_leave_the_host(host):
    """The counters count from the scenario's create; a reboot would have reset them (and is ruled out here)."""
    assert host.file("/etc/nvidia-standin/airgap-boot").content_string.strip() == host.check_output(
        "cut -d' ' -f22 /proc/1/stat"
    )
    assert egress_packets(host) == 0


def test_the_only_apt_source_is_the_bundle(host):
    sources = host.check_output("ls /etc/apt/sources.list.d/").split()
    assert sources == ["a800-offline-bundle.sources"]
    assert not host.file("/etc/apt/sources.list").exists
    text = host.file("/etc/apt/sources.list.d/a800-offline-bundle.sources").content_string
    assert f"URIs: file:{BUNDLE}/apt/Ubuntu_24.04" in text and f"Signed-By: {BUNDLE}/keys/a800-bundle.gpg" in text


def test_the_driver_and_toolkit_came_from_the_bundle(host):
    assert host.package("nvidia-utils-580").version == DRIVER
    assert host.package("nvidia-container-toolkit").version == "1.17.8-1"
    policy = host.check_output("apt-cache policy nvidia-utils-580")
    assert f"file:{BUNDLE}/apt/Ubuntu_24.04" in policy


def test_the_bundle_was_verified_and_the_base_image_loaded_from_it(host):
    manifest = json.loads(host.file(f"{BUNDLE}/manifest.json").content_string)
    assert host.file("/var/lib/a800-vllm/offline-bundle.verified").content_string.startswith(BUNDLE + " ")
    image = next(i for i in manifest["items"] if i["kind"] == "image" and i["name"] == "vllm/vllm-openai:v0.26.0")
    assert host.check_output("docker image inspect -f '{{.Id}}' vllm/vllm-openai:v0.26.0") == image["version"]


def test_the_server_answers(host):
    code = host.check_output("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8001/health")
    assert code == "200"
    assert "PASS" in (ROOT / "reports" / host.backend.get_hostname() / "report.md").read_text().splitlines()[0]


def test_a_damaged_bundle_is_refused_before_anything_is_installed(host):
    """A copy of the bundle with one byte more in its package index: the host phase stops at the checksum, naming
    the file, and the host still uses the good bundle."""
    damaged = "/var/tmp/a800-bundle-damaged"
    host.run_test(f"rm -rf {damaged} && cp -a {BUNDLE} {damaged} && echo >> {damaged}/apt/Ubuntu_24.04/Packages")
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", ANSIBLE_INVENTORY=str(INVENTORY))
    run = subprocess.run(
        ["ansible-playbook", "playbooks/host.yml", "-e", f"offline_bundle={damaged}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    said = " ".join((run.stdout + run.stderr).split())
    host.run_test(f"rm -rf {damaged}")
    assert run.returncode != 0
    assert f"The offline bundle at {damaged} is damaged or incomplete" in said
    assert "apt/Ubuntu_24.04/Packages: FAILED" in said
    assert "changed: [" not in run.stdout
    assert (
        f"URIs: file:{BUNDLE}/apt/" in host.file("/etc/apt/sources.list.d/a800-offline-bundle.sources").content_string
    )
    assert egress_packets(host) == 0


@pytest.mark.parametrize("path", ["/etc/apt/sources.list.d/nvidia-cuda.sources", "/etc/docker/daemon.json"])
def test_no_external_registry_or_repository_is_configured(host, path):
    f = host.file(path)
    if path.endswith("daemon.json"):
        assert "registry-mirrors" not in json.loads(f.content_string)
    else:
        assert not f.exists
