"""site.yml on an air-gapped simulated host, from the offline bundle alone (molecule/airgap/molecule.yml).

Nothing left the host (every packet sent off it is counted, and none was), the packages came from the bundle's
signed repository (NVIDIA's repositories were not even added), the base image was loaded from the bundle, the
bundle was checked before use, and a damaged bundle is refused before anything is installed from it. Monitoring is
on: dcgm-exporter runs from the bundle's image, never pulled, and Prometheus (from the bundle's repository) scrapes it.
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
# The BOM's dcgm-exporter image; on the test bed its stand-in (tests/testbed/dcgm-exporter-standin) carries the tag.
DCGM_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"


def egress_packets(host) -> int:
    out = host.check_output("iptables -L A800_EGRESS -v -n -x")
    return sum(int(line.split()[0]) for line in out.splitlines() if "REJECT" in line)


def run_playbook(playbook: str, extra_vars: str) -> tuple[subprocess.CompletedProcess, str]:
    """A phase of the project on the scenario's host, with extra variables: the run and its output on one line."""
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", ANSIBLE_INVENTORY=str(INVENTORY))
    run = subprocess.run(
        ["ansible-playbook", playbook, "-e", extra_vars],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return run, " ".join((run.stdout + run.stderr).split())


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


def test_dcgm_exporter_runs_from_the_bundles_image_never_pulled(host):
    """The bundle carries dcgm-exporter's image (its inventory has a monitoring group), the host phase loaded it, and
    the monitoring role started it with pull: never. A pull would have asked the name server for nvcr.io, a packet
    that the air gap counts: none was."""
    manifest = json.loads(host.file(f"{BUNDLE}/manifest.json").content_string)
    image = next(i for i in manifest["items"] if i["kind"] == "image" and i["name"] == DCGM_IMAGE)
    assert host.file(f"{BUNDLE}/{image['path']}").is_file
    state = host.check_output("docker inspect -f '{{.State.Running}} {{.Image}} {{.Config.Image}}' a800-dcgm-exporter")
    assert state == f"true {image['version']} {DCGM_IMAGE}"
    assert "DCGM_FI_DEV_GPU_TEMP{" in host.check_output("curl -s http://127.0.0.1:9400/metrics")
    assert egress_packets(host) == 0


def test_prometheus_scrapes_the_exporter_and_the_report_says_so(host):
    name = host.backend.get_hostname()
    answer = host.check_output("curl -s 'http://127.0.0.1:9090/api/v1/query?query=up%7Bjob%3D%22dcgm%22%7D'")
    assert [(r["metric"]["host"], r["value"][1]) for r in json.loads(answer)["data"]["result"]] == [(name, "1")]
    checks = json.loads((ROOT / "reports" / name / "verify.json").read_text())["checks"]
    assert [(c["name"], c["status"]) for c in checks if c["name"] == "monitoring:dcgm"] == [("monitoring:dcgm", "pass")]


def test_the_preflight_refuses_an_exporter_image_that_neither_the_bundle_nor_the_host_has(host):
    """An image the bundle does not carry: the preflight stops, naming the check, the image and the fixes, before
    anything changes; nothing tries to pull it."""
    absent = "nvcr.io/nvidia/k8s/dcgm-exporter:0.0.0-not-in-the-bundle"
    run, said = run_playbook("playbooks/preflight.yml", f"monitoring_dcgm_image={absent}")
    assert run.returncode != 0
    assert "dcgm_exporter_image:" in said and absent in said
    assert "is neither in the offline bundle nor on this air-gapped host, which cannot pull it" in said
    assert f"the bundle at {BUNDLE} holds" in said and DCGM_IMAGE in said
    assert "monitoring_dcgm_enabled: false" in said
    assert "changed: [" not in run.stdout
    assert egress_packets(host) == 0


def test_a_damaged_bundle_is_refused_before_anything_is_installed(host):
    """A copy of the bundle with one byte more in its package index: the host phase stops at the checksum, naming
    the file, and the host still uses the good bundle."""
    damaged = "/var/tmp/a800-bundle-damaged"
    host.run_test(f"rm -rf {damaged} && cp -a {BUNDLE} {damaged} && echo >> {damaged}/apt/Ubuntu_24.04/Packages")
    run, said = run_playbook("playbooks/host.yml", f"offline_bundle={damaged}")
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
