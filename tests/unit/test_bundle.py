"""The offline bundle's choices (plugins/filter/bundle.py): the apt packages per platform and BOM, the repositories
the resolver adds, the images' archive names, the installed collections standing in for Galaxy, the manifest and the
reading of sha256sum's report; and the role's list of Debian packages kept in step with what roles/ installs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.a800.vllm.plugins.filter.bundle import (
    bundle_apt_packages,
    bundle_apt_sources,
    bundle_collection_file,
    bundle_collections_requirements,
    bundle_digest,
    bundle_galaxy_yml,
    bundle_image_file,
    bundle_installed_collections,
    bundle_item_size,
    bundle_manifest,
    bundle_platform,
    bundle_verify_failures,
)
from conftest import ROOT, VOCABULARY_FILE

PLATFORM_DIR = ROOT / "roles" / "a800" / "vars" / "platform"
PROD = ROOT / "inventories" / "prod" / "group_vars" / "all"
SIM = ROOT / "inventories" / "sim" / "group_vars" / "all"
BOM = yaml.safe_load((PROD / "bom.yml").read_text())["bom"]
DEFAULTS = yaml.safe_load((ROOT / "roles" / "bundle" / "defaults" / "main.yml").read_text())
KERNEL = "6.8.0-48-generic"
TOOLKIT = [
    "nvidia-container-toolkit=1.17.8-1",
    "nvidia-container-toolkit-base=1.17.8-1",
    "libnvidia-container-tools=1.17.8-1",
    "libnvidia-container1=1.17.8-1",
]


def platforms() -> list[dict]:
    return [yaml.safe_load(p.read_text())["a800_platform"] for p in sorted(PLATFORM_DIR.glob("*.yml"))]


def platform(key: str) -> dict:
    return bundle_platform(platforms(), key)


def bom(**driver) -> dict:
    return {**BOM, "nvidia_driver": {**BOM["nvidia_driver"], **driver}}


# --- apt packages -----------------------------------------------------------------------------------------------


def test_ubuntu_24_04_gets_the_compute_only_driver_the_toolkit_docker_and_the_roles_packages():
    got = bundle_apt_packages(BOM, platform("Ubuntu_24.04"), [KERNEL], ["python3-debian", "pciutils"])
    assert got["packages"] == [
        "libnvidia-compute-580=580.95.05-*",
        "nvidia-dkms-580-open=580.95.05-*",
        "nvidia-utils-580=580.95.05-*",
        "nvidia-compute-utils-580=580.95.05-*",
        f"linux-headers-{KERNEL}",
        *TOOLKIT,
        "docker.io=29.1.3-0ubuntu3~24.04.2",
        "python3-debian",
        "pciutils",
    ]
    assert got["pinning"] == []
    assert got["notes"] == []
    assert got["groups"]["kernel"] == [f"linux-headers-{KERNEL}"]


def test_ubuntu_22_04_has_its_own_docker_pin():
    got = bundle_apt_packages(BOM, platform("Ubuntu_22.04"), [KERNEL])
    assert got["groups"]["docker"] == ["docker.io=29.1.3-0ubuntu3~22.04.2"]


def test_debian_12_and_branch_590_put_the_pinning_package_first():
    debian = bundle_apt_packages(BOM, platform("Debian_12"), [KERNEL])
    assert debian["pinning"] == ["nvidia-driver-pinning-580.95.05"]
    assert debian["packages"][:3] == [
        "nvidia-driver-pinning-580.95.05",
        "nvidia-driver-cuda=580.95.05-*",
        "nvidia-kernel-open-dkms=580.95.05-*",
    ]
    new = bundle_apt_packages(bom(branch="590", version="590.44.01"), platform("Ubuntu_24.04"), [KERNEL])
    assert new["packages"][:3] == [
        "nvidia-driver-pinning-590.44.01",
        "libnvidia-compute=590.44.01-*",
        "nvidia-dkms-open=590.44.01-*",
    ]


def test_every_target_kernel_gets_its_headers_and_none_without_a_kernel_list():
    two = bundle_apt_packages(BOM, platform("Ubuntu_24.04"), ["6.8.0-48-generic", "6.8.0-60-generic"])
    assert two["groups"]["kernel"] == ["linux-headers-6.8.0-48-generic", "linux-headers-6.8.0-60-generic"]
    none = bundle_apt_packages(BOM, platform("Ubuntu_24.04"), [])
    assert none["groups"]["kernel"] == []
    assert not any(p.startswith("linux-headers") or "@" in p for p in none["packages"])
    assert "linux-headers-<kernel>" in none["notes"][0]


def test_precompiled_modules_per_kernel_and_no_headers():
    got = bundle_apt_packages(bom(source="ubuntu-precompiled"), platform("Ubuntu_22.04"), [KERNEL])
    assert got["groups"]["kernel"] == [f"linux-modules-nvidia-580-server-open-{KERNEL}"]
    assert "nvidia-kernel-common-580-server=580.95.05-*" in got["packages"]
    assert not any(p.startswith("linux-headers") for p in got["packages"])
    without = bundle_apt_packages(bom(source="ubuntu-precompiled"), platform("Ubuntu_22.04"), [])
    assert not any(p.startswith("linux-modules") for p in without["packages"])
    assert "module packages are built per kernel" in without["notes"][0]
    with pytest.raises(AnsibleFilterError, match="precompiled"):
        bundle_apt_packages(bom(source="ubuntu-precompiled"), platform("Debian_12"), [KERNEL])


def test_fabricmanager_only_when_asked_and_no_docker_when_the_roles_never_install_one():
    assert not any("fabricmanager" in p for p in bundle_apt_packages(BOM, platform("Ubuntu_24.04"))["packages"])
    with_fm = bundle_apt_packages(BOM, platform("Ubuntu_24.04"), fabricmanager=True)
    assert "nvidia-fabricmanager-580=580.95.05-*" in with_fm["packages"]
    never = bundle_apt_packages({**BOM, "docker": {"install": "never"}}, platform("Ubuntu_24.04"))
    assert never["groups"]["docker"] == [] and "never install" in never["notes"][-1]


def test_duplicates_are_dropped_and_an_empty_toolkit_version_refused():
    got = bundle_apt_packages(BOM, platform("Ubuntu_24.04"), [KERNEL, KERNEL], ["pciutils", "pciutils"])
    assert len(got["packages"]) == len(set(got["packages"]))
    with pytest.raises(AnsibleFilterError, match=r"container_toolkit\.version"):
        bundle_apt_packages({**BOM, "container_toolkit": {"version": ""}}, platform("Ubuntu_24.04"))


def test_platform_overrides_and_unknown_keys():
    over = bundle_platform(platforms(), "Ubuntu_24.04", {"Ubuntu_24.04": {"docker_version": "1.0"}})
    assert over["docker_version"] == "1.0" and over["codename"] == "noble"
    with pytest.raises(AnsibleFilterError, match=r"Ubuntu_26\.04.*known: Debian_12, Ubuntu_22\.04, Ubuntu_24\.04"):
        bundle_platform(platforms(), "Ubuntu_26.04")


# --- the role's Debian packages, in step with roles/ -------------------------------------------------------------


def _role_defaults() -> dict:
    found = {}
    for path in ROOT.glob("roles/*/defaults/main.yml"):
        found.update(yaml.safe_load(path.read_text()) or {})
    return found


def _package_tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _package_tasks(item)
    elif isinstance(node, dict):
        for module in ("ansible.builtin.apt", "ansible.builtin.package"):
            if isinstance(node.get(module), dict) and "name" in node[module]:
                yield node[module]["name"]
        for key in ("block", "rescue", "always"):
            yield from _package_tasks(node.get(key))


def test_the_role_packages_are_every_literal_package_that_roles_install():
    """Every package name an apt/package task of roles/ names literally, or through a role default that is a plain
    list, is in bundle_role_packages; the BOM's own packages (templated from the bill of materials) are not. The
    bundle's apt is for the serving hosts: the fleet role's gateway hosts (nginx, python3-venv, python3-packaging,
    mtail; their router's wheels are in it) and the monitoring hosts (prometheus, prometheus-alertmanager) are not in it
    yet (docs/fleet.md,
    docs/monitoring.md); the serving hosts' node exporter is."""
    defaults = _role_defaults()
    names: set[str] = set()
    for path in ROOT.glob("roles/*/tasks/*.yml"):
        if path.parent.parent.name in ("bundle", "fleet") or path == ROOT / "roles/monitoring/tasks/main.yml":
            continue
        for value in _package_tasks(yaml.safe_load(path.read_text())):
            for name in value if isinstance(value, list) else [value]:
                name = str(name).strip()
                ref = name.removeprefix("{{").removesuffix("}}").strip()
                if name.startswith("{{") and ref in defaults and isinstance(defaults[ref], list):
                    names.update(str(n) for n in defaults[ref] if "{{" not in str(n))
                elif "{{" not in name:
                    names.add(name)
    assert names, "no package task found in roles/"
    assert sorted(names) == sorted(DEFAULTS["bundle_role_packages"])


# --- repositories -------------------------------------------------------------------------------------------------


def test_the_resolver_adds_the_repositories_the_roles_add():
    sources = bundle_apt_sources(BOM, platform("Ubuntu_24.04"))
    assert [s["name"] for s in sources] == ["nvidia-cuda", "nvidia-container-toolkit"]
    assert sources[0]["uris"] == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
    assert sources[0]["signed_by"].endswith("/ubuntu2404/x86_64/3bf863cc.pub")
    assert sources[1]["signed_by"] == "https://nvidia.github.io/libnvidia-container/gpgkey"
    precompiled = bundle_apt_sources(bom(source="ubuntu-precompiled"), platform("Ubuntu_24.04"))
    assert [s["name"] for s in precompiled] == ["nvidia-container-toolkit"]


def test_file_repositories_are_read_through_copy_so_their_packages_reach_the_pool():
    sim = yaml.safe_load((SIM / "simulated_host.yml").read_text())["bom_overrides"]
    driver, toolkit = BOM["nvidia_driver"], BOM["container_toolkit"]
    local = {
        **BOM,
        "nvidia_driver": {**driver, "repo": {**driver["repo"], **sim["nvidia_driver"]["repo"]}},
        "container_toolkit": {**toolkit, "repo": {**toolkit["repo"], **sim["container_toolkit"]["repo"]}},
    }
    extra = [{"name": "distro", "uris": "file:/srv/nvidia-standin/distro/noble", "suites": "./", "trusted": True}]
    sources = bundle_apt_sources(local, platform("Ubuntu_24.04"), extra)
    assert [s["uris"] for s in sources] == [
        "copy:/srv/nvidia-standin/compute/cuda/repos/ubuntu2404/x86_64/",
        "copy:/srv/nvidia-standin/libnvidia-container/stable/deb/amd64/",
        "copy:/srv/nvidia-standin/distro/noble",
    ]
    # the keys are fetched by the repository module, which reads file: URLs
    assert sources[0]["signed_by"] == "file:/srv/nvidia-standin/compute/cuda/repos/ubuntu2404/x86_64/3bf863cc.pub"
    assert sources[2]["trusted"] is True
    with pytest.raises(AnsibleFilterError, match="name, uris and suites"):
        bundle_apt_sources(BOM, platform("Ubuntu_24.04"), [{"name": "x"}])


# --- images, collections, manifest -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "file"),
    [
        ("vllm/vllm-openai:v0.26.0", "vllm_vllm-openai_v0.26.0.tar"),
        ("registry.intra:5000/vllm/vllm-openai:v0.26.0-sm80", "registry.intra_5000_vllm_vllm-openai_v0.26.0-sm80.tar"),
        ("ubuntu@sha256:abc", "ubuntu_sha256_abc.tar"),
    ],
)  # fmt: skip
def test_image_archive_names(ref, file):
    assert bundle_image_file(ref) == file


def test_image_archive_name_needs_a_reference():
    with pytest.raises(AnsibleFilterError):
        bundle_image_file(" / ")


def _collection(root: Path, name: str, version: str, deps: dict | None = None) -> None:
    namespace, short = name.split(".")
    path = root / "ansible_collections" / namespace / short
    path.mkdir(parents=True)
    info = {"namespace": namespace, "name": short, "version": version, "dependencies": deps or {}, "license_file": None}
    (path / "MANIFEST.json").write_text(json.dumps({"collection_info": info}))


def test_installed_collections_follow_the_pins_and_their_dependencies(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    _collection(first, "community.docker", "4.8.4")
    _collection(second, "community.docker", "4.8.5", {"community.library_inventory_filtering_v1": ">=1.0.0"})
    _collection(second, "community.library_inventory_filtering_v1", "1.1.5")
    _collection(second, "ansible.posix", "2.1.0")
    listing = {
        str(first / "ansible_collections"): {"community.docker": {"version": "4.8.4"}},
        str(second / "ansible_collections"): {
            "community.docker": {"version": "4.8.5"},
            "community.library_inventory_filtering_v1": {"version": "1.1.5"},
            "ansible.posix": {"version": "2.1.0"},
        },
    }
    requirements = {"collections": [{"name": "community.docker", "version": "4.8.5"}, "ansible.posix"]}
    got = bundle_installed_collections(requirements, listing)
    assert [(c["name"], c["version"], c["wanted_by"]) for c in got] == [
        ("community.docker", "4.8.5", "requirements.yml"),
        ("ansible.posix", "2.1.0", "requirements.yml"),
        ("community.library_inventory_filtering_v1", "1.1.5", "community.docker"),
    ]
    assert got[0]["path"] == str(second / "ansible_collections" / "community" / "docker")
    assert bundle_collections_requirements(got)["collections"][0] == {
        "name": "community-docker-4.8.5.tar.gz",
        "version": "4.8.5",
    }
    assert "license_file" not in bundle_galaxy_yml(got[0]["collection_info"])


def test_a_collection_missing_or_at_another_version_is_named(tmp_path):
    _collection(tmp_path, "community.docker", "4.8.4")
    listing = {str(tmp_path / "ansible_collections"): {"community.docker": {"version": "4.8.4"}}}
    requirements = {"collections": [{"name": "community.docker", "version": "4.8.5"}, {"name": "ansible.posix"}]}
    with pytest.raises(AnsibleFilterError) as err:
        bundle_installed_collections(requirements, listing)
    assert "community.docker 4.8.5 (wanted by requirements.yml) is not installed at that version (found 4.8.4" in str(
        err.value
    )
    assert "ansible.posix" in str(err.value)


def test_the_project_requirements_are_met_by_the_control_node():
    """requirements.yml's pins are the collections of the toolchain's ansible package (the fallback's source)."""
    galaxy = Path(__import__("sys").executable).parent / "ansible-galaxy"
    if not galaxy.exists():
        pytest.skip("no ansible-galaxy next to this Python")
    listing = json.loads(
        subprocess.run([str(galaxy), "collection", "list", "--format", "json"], capture_output=True, text=True,
                       check=True).stdout
    )  # fmt: skip
    got = bundle_installed_collections(yaml.safe_load((ROOT / "requirements.yml").read_text()), listing)
    assert {"community.docker", "community.general", "ansible.posix"} <= {c["name"] for c in got}


def test_collection_file_names():
    assert bundle_collection_file("community.library_inventory_filtering_v1", "1.1.5") == (
        "community-library_inventory_filtering_v1-1.1.5.tar.gz"
    )


def test_manifest_lists_items_platforms_and_the_bom_digest():
    items = [
        {"kind": "image", "name": "vllm/vllm-openai:v0.26.0", "version": "sha256:1", "path": "images/x.tar", "size": 5},
        {"kind": "apt", "name": "Ubuntu_24.04", "version": [], "path": "apt/Ubuntu_24.04", "size": 7},
    ]
    doc = bundle_manifest(items, ["Ubuntu_24.04"], BOM, {"created": "now"})
    assert doc["total_size"] == 12 and doc["platforms"] == ["Ubuntu_24.04"] and doc["created"] == "now"
    assert [i["kind"] for i in doc["items"]] == ["apt", "image"]
    assert doc["bom_digest"] == bundle_digest(BOM) and doc["bom_digest"].startswith("sha256:")
    # the digest ignores key order, and changes with any pin
    assert bundle_digest(dict(reversed(list(BOM.items())))) == doc["bom_digest"]
    assert bundle_digest(bom(version="580.105.08")) != doc["bom_digest"]
    with pytest.raises(AnsibleFilterError, match="size"):
        bundle_manifest([{"kind": "x", "name": "y", "path": "z"}], [], BOM)
    assert bundle_item_size([{"size": 3}, {"size": 4}]) == 7


def test_sha256sum_report_names_each_failed_file(tmp_path):
    (tmp_path / "a.deb").write_text("a")
    (tmp_path / "b c.tar").write_text("b")
    (tmp_path / "gone").write_text("g")
    sums = subprocess.run(["sha256sum", "a.deb", "b c.tar", "gone"], cwd=tmp_path, capture_output=True, text=True)
    (tmp_path / "MANIFEST.sha256").write_text(sums.stdout)
    (tmp_path / "b c.tar").write_text("changed")
    (tmp_path / "gone").unlink()
    check = subprocess.run(
        ["sha256sum", "--check", "--strict", "--quiet", "MANIFEST.sha256"], cwd=tmp_path, capture_output=True, text=True
    )
    assert check.returncode != 0
    assert bundle_verify_failures(check.stdout) == [
        {"path": "b c.tar", "why": "sum"},
        {"path": "gone", "why": "missing or unreadable"},
    ]
    assert bundle_verify_failures("a.deb: OK\n") == []


# --- inventories ------------------------------------------------------------------------------------------------


def test_no_registry_image_in_the_role_defaults_and_every_platform_has_a_base_image():
    assert DEFAULTS["bundle_base_images"] == {} and DEFAULTS["bundle_extra_images"] == []
    for inventory in (PROD, SIM):
        data = yaml.safe_load((inventory / "bundle.yml").read_text())
        assert set(data["bundle_platforms"]) <= set(data["bundle_base_images"]), inventory
        assert set(data["bundle_platforms"]) <= {p["key"] for p in platforms()}
    sim = yaml.safe_load((SIM / "bundle.yml").read_text())
    assert set(sim["bundle_base_images"].values()) == {"a800-testbed/debian12:base"}
    assert sim["bundle_container_prefix"] == "bundle-test-"


# --- the dcgm-exporter image -------------------------------------------------------------------------------------


def bundle_dcgm_image(tmp_path: Path, name: str, inventory: dict, *extra: str) -> str:
    """bundle_dcgm_exporter_image as the role's defaults give it for an inventory (ansible-playbook on localhost)."""
    import os
    import sys

    (tmp_path / f"{name}.yml").write_text(yaml.safe_dump(inventory))
    out = tmp_path / f"{name}.out"
    play = {"hosts": "localhost", "connection": "local", "gather_facts": False,
            "vars_files": [str(VOCABULARY_FILE), str(ROOT / "roles" / "bundle" / "defaults" / "main.yml")],
            "vars": {"a800_bom": {"dcgm_exporter": {"image": BOM["dcgm_exporter"]["image"]}}},
            "tasks": [{"ansible.builtin.copy": {"content": "{{ bundle_dcgm_exporter_image }}", "dest": str(out),
                                                "mode": "0644"}}]}  # fmt: skip
    (tmp_path / f"{name}-play.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_HOME=str(ROOT / ".ansible-home"))
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / f"{name}.yml"),
         "-e", f"ansible_python_interpreter={sys.executable}", *extra, str(tmp_path / f"{name}-play.yml")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return out.read_text()


def test_the_bundle_carries_the_dcgm_exporter_image_when_the_site_runs_monitoring(tmp_path):
    """With a monitoring group the BOM's dcgm-exporter image is one of the images saved (images.yml); without one, or
    with dcgm-exporter turned off, it is not."""
    image = BOM["dcgm_exporter"]["image"]
    servers = {"a800_servers": {"hosts": {"gpu-1": {}}}}
    monitored = {"all": {"children": {**servers, "a800_monitoring": {"hosts": {"mon-1": {}}}}}}
    assert bundle_dcgm_image(tmp_path, "monitored", monitored) == image
    assert bundle_dcgm_image(tmp_path, "unmonitored", {"all": {"children": servers}}) == ""
    assert bundle_dcgm_image(tmp_path, "off", monitored, "-e", "monitoring_dcgm_enabled=false") == ""
    tasks = yaml.safe_load((ROOT / "roles" / "bundle" / "tasks" / "images.yml").read_text())
    choose = next(t for t in tasks if t["name"] == "Choose the images")["ansible.builtin.set_fact"]["__bundle_images"]
    assert "[bundle_dcgm_exporter_image]" in choose


def test_the_test_beds_dcgm_exporter_stand_in_carries_the_boms_tag():
    """tests/testbed/build-images.sh tags its dcgm-exporter stand-in like the BOM's image, so that the airgap
    scenario's bundle carries it under the name the monitoring role starts."""
    script = (ROOT / "tests" / "testbed" / "build-images.sh").read_text()
    assert f"dcgm=${{DCGM_STANDIN_IMAGE:-{BOM['dcgm_exporter']['image']}}}" in script
