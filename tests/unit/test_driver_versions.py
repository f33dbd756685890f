"""The driver's package versions come from the host's archive, and a newer driver is not downgraded silently.

- NVIDIA's Ubuntu repositories changed the Debian revision within branch 580 (``-0ubuntu1`` up to 580.105.08,
  ``-1ubuntu1`` from 580.126.09; docs/field.md#nvidia-driver-packages): ``nvidia_driver_resolve`` pins each package
  to the version ``apt-cache madison`` (or ``show``) lists for the pinned upstream version, whatever the revision or
  epoch, and names the versions the archive has when the pin is not there.
- ``nvidia_driver_keep`` keeps a driver newer than the pin unless ``nvidia_driver_allow_downgrade``; the preflight
  names the difference. Both compare as dpkg does (plugins/module_utils/debian_version.py, checked here against
  ``dpkg --compare-versions``).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter import nvidia_packages
from ansible_collections.a800.vllm.plugins.filter.nvidia_packages import (
    nvidia_driver_install,
    nvidia_driver_install_checks,
    nvidia_driver_keep,
    nvidia_driver_resolve,
    nvidia_driver_wanted,
)
from ansible_collections.a800.vllm.plugins.filter.preflight import preflight_checks
from ansible_collections.a800.vllm.plugins.module_utils.apt_cache import (
    apt_cache_lacks,
    apt_cache_versions,
    dpkg_installed,
)
from ansible_collections.a800.vllm.plugins.module_utils.debian_version import (
    compare_versions,
    split_version,
    upstream_version,
)
from ansible_collections.a800.vllm.plugins.module_utils.nvidia_smi import (
    QUERY_FIELDS,
    parse_fabric_states,
    parse_query_csv,
    parse_topology,
    summarize,
)
from conftest import ROOT, read_fixture

PLATFORMS = {
    p.stem: yaml.safe_load(p.read_text())["a800_platform"]
    for p in sorted((ROOT / "roles" / "a800" / "vars" / "platform").glob("*.yml"))
}
KERNEL = "6.8.0-48-generic"
NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64  Packages"
UBUNTU = "http://archive.ubuntu.com/ubuntu noble-updates/restricted amd64 Packages"

# `apt-cache madison` of the compute-only set on Ubuntu 24.04 with NVIDIA's repository, as apt 2.x prints it (the
# layout is the one apt printed for the stand-in repository, tests/testbed/standin-nvidia, with NVIDIA's URI): the
# revision is -0ubuntu1 up to 580.105.08 and -1ubuntu1 from 580.126.09.
MADISON = "\n".join(
    f"{name} | {version} | {NVIDIA}"
    for name in (
        "libnvidia-compute-580",
        "nvidia-dkms-580-open",
        "nvidia-utils-580",
        "nvidia-compute-utils-580",
        "nvidia-fabricmanager-580",
    )
    for version in ("580.159.04-1ubuntu1", "580.126.09-1ubuntu1", "580.105.08-0ubuntu1", "580.95.05-0ubuntu1")
)


def ubuntu(version: str = "580.95.05", **over) -> dict:
    driver = {"branch": "580", "version": version, "kernel_modules": "open", "source": "cuda-repo", **over}
    return nvidia_driver_install(driver, PLATFORMS["Ubuntu_24.04"], KERNEL)


# --- Debian versions, as dpkg compares them ----------------------------------------------------------------------

ORDERED = [
    ("580.95.05", "580.105.08", -1),  # numbers, not strings
    ("580.159.04", "580.95.05", 1),  # the real H200 host's driver against the pin
    ("580.105.08-0ubuntu1", "580.126.09-1ubuntu1", -1),
    ("580.126.09-0ubuntu1", "580.126.09-1ubuntu1", -1),  # the revision decides within an upstream version
    ("580.95.05-0ubuntu1", "580.95.05-0ubuntu0.24.04.2", 1),  # NVIDIA's build over Canonical's of the same driver
    ("1:580.95.05-1", "580.159.04-1", 1),  # the epoch first
    ("0:580.95.05-1", "580.95.05-1", 0),
    ("580.95.05", "580.95.05-0", 0),  # no revision is revision 0
    ("1.0~rc1-1", "1.0-1", -1),  # ~ sorts before the end
    ("1.0-1", "1.0+b1-1", -1),
    ("1.0a-1", "1.0+-1", -1),  # letters before other characters
    ("1.0-1ubuntu1", "1.0-1ubuntu1.1", -1),
    ("2.0.10", "2.0.9", 1),
    ("007", "7", 0),
    ("29.1.3-0ubuntu3~24.04.2", "29.1.3-0ubuntu3", -1),
]


@pytest.mark.parametrize(("a", "b", "expected"), ORDERED)
def test_debian_versions_compare_as_dpkg_says(a, b, expected):
    assert compare_versions(a, b) == expected
    assert compare_versions(b, a) == -expected


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is not on this machine")
@pytest.mark.parametrize(("a", "b", "expected"), ORDERED)
def test_the_table_is_dpkgs_own(a, b, expected):
    for op, want in (("lt", expected < 0), ("eq", expected == 0), ("gt", expected > 0)):
        got = subprocess.run(["dpkg", "--compare-versions", a, op, b], check=False).returncode == 0
        assert got == want, f"dpkg --compare-versions {a} {op} {b}"


def test_a_version_splits_into_epoch_upstream_and_revision():
    assert split_version("1:580.95.05-1ubuntu1") == (1, "580.95.05", "1ubuntu1")
    assert split_version("29.1.3-0ubuntu3~24.04.2") == (0, "29.1.3", "0ubuntu3~24.04.2")
    assert split_version("580.95.05") == (0, "580.95.05", "")
    assert upstream_version("2:1.2-3-4") == "1.2-3"  # the revision is after the last hyphen


# --- what apt-cache says ------------------------------------------------------------------------------------------


def test_madison_and_show_give_the_same_versions():
    show = "\n\n".join(
        f"Package: nvidia-utils-580\nVersion: {v}\nArchitecture: amd64\nDepends: libc6\nDescription: NVIDIA utils\n"
        for v in ("580.126.09-1ubuntu1", "580.95.05-0ubuntu1")
    )
    assert apt_cache_versions(show) == {"nvidia-utils-580": ["580.126.09-1ubuntu1", "580.95.05-0ubuntu1"]}
    assert apt_cache_versions(MADISON)["nvidia-utils-580"] == [
        "580.159.04-1ubuntu1",
        "580.126.09-1ubuntu1",
        "580.105.08-0ubuntu1",
        "580.95.05-0ubuntu1",
    ]
    assert apt_cache_versions("") == {}
    sources = f"{MADISON}\nnvidia-utils-580 | 580.999.99-1 | http://archive.ubuntu.com/ubuntu noble/restricted Sources"
    assert "580.999.99-1" not in apt_cache_versions(sources)["nvidia-utils-580"]  # a source package is not installed


def test_what_the_lists_lack_refreshes_them():
    assert apt_cache_lacks(MADISON, ["nvidia-utils-580=580.126.09-*", "nvidia-utils-580"]) == []
    assert apt_cache_lacks(MADISON, ["nvidia-utils-580=580.142-*", "nvidia-driver-pinning-580.95.05"]) == [
        "nvidia-utils-580=580.142-*",
        "nvidia-driver-pinning-580.95.05",
    ]


# --- item 2: the revision is the archive's ------------------------------------------------------------------------


def test_no_revision_is_hard_coded_in_the_packages_asked_for():
    """The old choice asked for <version>-0ubuntu1 on Ubuntu, which 580.126.09 does not have."""
    got = ubuntu("580.126.09")
    assert got["install"] == [
        "libnvidia-compute-580=580.126.09-*",
        "nvidia-dkms-580-open=580.126.09-*",
        "nvidia-utils-580=580.126.09-*",
        "nvidia-compute-utils-580=580.126.09-*",
    ]
    assert got["fabricmanager"] == "nvidia-fabricmanager-580=580.126.09-*"


@pytest.mark.parametrize(
    ("pin", "package"),
    [("580.95.05", "580.95.05-0ubuntu1"), ("580.105.08", "580.105.08-0ubuntu1"), ("580.126.09", "580.126.09-1ubuntu1")],
)
def test_each_package_is_pinned_to_the_archives_version_of_both_revision_schemes(pin, package):
    got = nvidia_driver_resolve(MADISON, ubuntu(pin), fabricmanager=True)
    assert got["missing"] == [] and got["message"] == ""
    assert got["install"] == [
        f"libnvidia-compute-580={package}",
        f"nvidia-dkms-580-open={package}",
        f"nvidia-utils-580={package}",
        f"nvidia-compute-utils-580={package}",
    ]
    assert got["fabricmanager"] == f"nvidia-fabricmanager-580={package}"


def test_nvidias_build_is_chosen_over_canonicals_of_the_same_driver():
    both = (
        MADISON
        + "\n"
        + "\n".join(
            f"{n} | 580.95.05-0ubuntu0.24.04.2 | {UBUNTU}"
            for n in ("libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-utils-580", "nvidia-compute-utils-580")
        )
    )
    got = nvidia_driver_resolve(both, ubuntu("580.95.05"))
    assert all(spec.endswith("=580.95.05-0ubuntu1") for spec in got["install"])


def test_debian_revisions_and_epochs_are_kept_as_the_archive_has_them():
    debian = nvidia_driver_install(
        {"branch": "580", "version": "580.95.05", "kernel_modules": "open", "source": "cuda-repo"},
        PLATFORMS["Debian_12"],
        KERNEL,
    )
    uri = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64  Packages"
    madison = "\n".join(
        [
            f"nvidia-driver-cuda | 1:580.95.05-1 | {uri}",
            f"nvidia-driver-cuda | 580.82.07-1 | {uri}",
            f"nvidia-kernel-open-dkms | 580.95.05-1 | {uri}",
            f"nvidia-kernel-open-dkms | 580.95.05-2 | {uri}",
            f"nvidia-driver-pinning-580.95.05 | 580.95.05-1 | {uri}",
        ]
    )
    got = nvidia_driver_resolve(madison, debian)
    assert got["missing"] == []
    assert got["install"] == ["nvidia-driver-cuda=1:580.95.05-1", "nvidia-kernel-open-dkms=580.95.05-2"]
    assert got["pinning"] == ["nvidia-driver-pinning-580.95.05"]


def test_a_pin_the_archive_lacks_fails_naming_its_versions_and_the_variable():
    got = nvidia_driver_resolve(MADISON, ubuntu("580.142"))
    assert [m["package"] for m in got["missing"]] == [
        "libnvidia-compute-580",
        "nvidia-dkms-580-open",
        "nvidia-utils-580",
        "nvidia-compute-utils-580",
    ]
    assert got["missing"][0]["available"] == [
        "580.95.05-0ubuntu1",
        "580.105.08-0ubuntu1",
        "580.126.09-1ubuntu1",
        "580.159.04-1ubuntu1",
    ]
    message = got["message"]
    assert message.startswith("NVIDIA driver 580.142 is not in the configured repositories")
    assert "The archive has the driver at 580.95.05, 580.105.08, 580.126.09, 580.159.04" in message
    assert "bom.nvidia_driver.version" in message and "nvidia_driver_version" in message


def test_packages_installed_at_the_pin_keep_their_version_when_the_mirror_dropped_it():
    installed = dpkg_installed(
        "\n".join(
            f"{n} 580.82.07-0ubuntu1 hold ok installed"
            for n in ("libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-utils-580", "nvidia-compute-utils-580")
        )
    )
    assert nvidia_driver_wanted(ubuntu("580.82.07"), installed=installed) == []  # no refresh of the lists for it
    got = nvidia_driver_resolve(MADISON, ubuntu("580.82.07"), installed=installed)
    assert got["missing"] == [] and got["install"][0] == "libnvidia-compute-580=580.82.07-0ubuntu1"
    rebuilt = MADISON + f"\nnvidia-utils-580 | 580.95.05-0ubuntu2 | {NVIDIA}"
    at_pin = {"nvidia-utils-580": "580.95.05-0ubuntu1"}
    assert (
        "nvidia-utils-580=580.95.05-0ubuntu1" in nvidia_driver_resolve(rebuilt, ubuntu(), installed=at_pin)["install"]
    )
    assert "nvidia-utils-580=580.95.05-0ubuntu2" in nvidia_driver_resolve(rebuilt, ubuntu())["install"]


def test_an_archive_without_the_driver_says_so():
    got = nvidia_driver_resolve("", ubuntu("580.95.05"))
    assert len(got["missing"]) == 4
    assert "apt knows no libnvidia-compute-580" in got["message"]
    assert "no version of the driver packages at all" in got["message"]


def test_a_missing_pinning_package_is_named():
    unversioned = ubuntu("590.44.01", branch="590")
    madison = "\n".join(f"{n} | 590.44.01-1ubuntu1 | {NVIDIA}" for n in ("libnvidia-compute", "nvidia-dkms-open"))
    got = nvidia_driver_resolve(madison, unversioned)
    assert [m["package"] for m in got["missing"]] == ["nvidia-driver-pinning-590.44.01"]
    assert got["install"] == ["libnvidia-compute=590.44.01-1ubuntu1", "nvidia-dkms-open=590.44.01-1ubuntu1"]


def test_fabric_manager_is_wanted_only_when_needed_and_then_named():
    without_fm = MADISON.replace("nvidia-fabricmanager-580", "nvidia-fabricmanager-999")
    assert nvidia_driver_resolve(without_fm, ubuntu("580.95.05"))["missing"] == []
    got = nvidia_driver_resolve(without_fm, ubuntu("580.95.05"), fabricmanager=True)
    assert [m["package"] for m in got["missing"]] == ["nvidia-fabricmanager-580"]
    assert got["fabricmanager"] == ""
    assert got["message"].startswith("Fabric Manager of driver 580.95.05 is not in the configured repositories")
    assert "nvidia_driver_fabricmanager: never" in got["message"]


def test_precompiled_user_space_is_resolved_and_the_module_package_named():
    got = ubuntu("580.95.05", source="ubuntu-precompiled")
    modules = f"linux-modules-nvidia-580-server-open-{KERNEL}"
    madison = "\n".join(
        [f"{modules} | 6.8.0-48.48+1 | {UBUNTU}"]
        + [
            f"{n} | 580.95.05-0ubuntu0.24.04.1 | {UBUNTU}"
            for n in (
                "nvidia-kernel-common-580-server",
                "nvidia-headless-no-dkms-580-server-open",
                "nvidia-utils-580-server",
                "nvidia-compute-utils-580-server",
            )
        ]
    )
    resolved = nvidia_driver_resolve(madison, got)
    assert resolved["missing"] == []
    assert resolved["install"][0] == modules  # its version is the kernel's
    assert resolved["install"][1] == "nvidia-kernel-common-580-server=580.95.05-0ubuntu0.24.04.1"


def test_a_kept_driver_needs_nothing_but_its_fabric_manager():
    assert nvidia_driver_wanted(ubuntu(), "580.126.09", keep=True) == []
    assert nvidia_driver_wanted(ubuntu(), "580.126.09", keep=True, fabricmanager=True) == [
        "nvidia-fabricmanager-580=580.126.09-*"
    ]
    kept = nvidia_driver_resolve(MADISON, ubuntu(), "580.126.09", keep=True, fabricmanager=True)
    assert kept["missing"] == [] and kept["fabricmanager"] == "nvidia-fabricmanager-580=580.126.09-1ubuntu1"


# --- item 3: no silent downgrade ----------------------------------------------------------------------------------

DPKG_NEWER = "\n".join(
    f"{n} 580.159.04-1ubuntu1 hold ok installed"
    for n in ("libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-utils-580", "nvidia-compute-utils-580")
)
RUNNING_NEWER = {"driver_installed": True, "driver_loaded": True, "driver_version": "580.159.04"}


def test_dpkg_query_lists_only_what_is_installed():
    text = (
        "nvidia-utils-580 580.95.05-0ubuntu1 hold ok installed\n"
        "nvidia-fabricmanager-580 580.95.05-0ubuntu1 deinstall ok config-files\n"
        "libnvidia-compute-580 580.95.05-0ubuntu1 install ok installed\n"
    )
    assert dpkg_installed(text) == {
        "nvidia-utils-580": "580.95.05-0ubuntu1",
        "libnvidia-compute-580": "580.95.05-0ubuntu1",
    }


def test_a_host_running_a_newer_driver_keeps_it_and_says_why():
    """The real host: 580.159.04 runs, the pin is 580.95.05; the old role downgraded it (allow_downgrade: true)."""
    got = nvidia_driver_keep(DPKG_NEWER, ubuntu("580.95.05"), RUNNING_NEWER, "580.95.05", False)
    assert got["keep"] is True and got["version"] == "580.159.04" and got["newer"] == "580.159.04"
    for words in ("580.159.04", "580.95.05", "nvidia_driver_allow_downgrade", "bom.nvidia_driver.version: 580.159.04"):
        assert words in got["message"]
    assert nvidia_driver_wanted(ubuntu("580.95.05"), got["version"], got["keep"]) == []  # nothing to install


def test_the_downgrade_happens_only_when_asked_for():
    got = nvidia_driver_keep(DPKG_NEWER, ubuntu("580.95.05"), RUNNING_NEWER, "580.95.05", "true")
    assert got["keep"] is False and got["version"] == "580.95.05" and got["downgrade"] is True
    assert got["message"].startswith("Downgrading the NVIDIA driver from 580.159.04 to the pin 580.95.05")
    as_extra_var = nvidia_driver_keep(DPKG_NEWER, ubuntu("580.95.05"), RUNNING_NEWER, "580.95.05", "false")
    assert as_extra_var["keep"] is True  # -e nvidia_driver_allow_downgrade=false arrives as a string


def test_installed_newer_packages_stay_even_before_the_reboot_that_loads_them():
    mismatch = {"driver_installed": True, "driver_loaded": False, "error": "Driver/library version mismatch"}
    got = nvidia_driver_keep(DPKG_NEWER, ubuntu("580.95.05"), mismatch, "580.95.05", False)
    assert got["keep"] is True and got["version"] == "580.159.04" and got["running"] is None


def test_an_older_or_equal_driver_gets_the_pin():
    older = "\n".join(
        f"{n} 580.95.05-0ubuntu1 hold ok installed" for n in ("libnvidia-compute-580", "nvidia-utils-580")
    )
    running = {"driver_loaded": True, "driver_version": "580.95.05"}
    bump = nvidia_driver_keep(older, ubuntu("580.126.09"), running, "580.126.09", False)
    assert (bump["keep"], bump["version"], bump["newer"], bump["message"]) == (False, "580.126.09", None, "")
    same = nvidia_driver_keep(older, ubuntu("580.95.05"), running, "580.95.05", False)
    assert same["keep"] is False and same["newer"] is None
    bare = nvidia_driver_keep("", ubuntu("580.95.05"), {"driver_installed": False}, "580.95.05", False)
    assert bare["keep"] is False and bare["version"] == "580.95.05"


def test_the_kernels_module_package_version_is_not_a_driver_version():
    precompiled = ubuntu("580.95.05", source="ubuntu-precompiled")
    text = f"linux-modules-nvidia-580-server-open-{KERNEL} 6.8.0-48.48+1 install ok installed\n"
    assert nvidia_driver_keep(text, precompiled, {}, "580.95.05", False)["keep"] is False


def test_secure_boot_does_not_stop_a_host_whose_newer_driver_stays():
    bom = {"source": "cuda-repo", "version": "580.95.05"}
    kept = nvidia_driver_install_checks({"secure_boot": "enabled"}, RUNNING_NEWER, bom)
    assert {c["name"]: c["status"] for c in kept}["secure_boot"] == "pass"
    assert "newer than the pin 580.95.05, is kept" in kept[1]["detail"]
    downgrade = nvidia_driver_install_checks({"secure_boot": "enabled"}, RUNNING_NEWER, dict(bom, allow_downgrade=True))
    assert {c["name"]: c["status"] for c in downgrade}["secure_boot"] == "fail"  # DKMS would build the pin


def real_h200() -> dict:
    rows = parse_query_csv(read_fixture("h200-x2/query.csv"), QUERY_FIELDS)
    facts = {"driver_installed": True, "driver_loaded": True, "error": None, "nvidia_smi": "/usr/bin/nvidia-smi"}
    facts.update(
        summarize(
            rows, parse_topology(read_fixture("h200-x2/topo.txt")), parse_fabric_states(read_fixture("h200-x2/q.txt"))
        )
    )
    return facts


REQUIREMENTS = {
    "gpu_count": "2",
    "compute_capability": "9.0",
    "min_gpu_memory_mib": "81000",
    "min_driver_version": "575.51.03",
    "ram_headroom_gb": "64",
    "weights_size_gb": "10",
    "cold_gb_per_s": "0.33",
    "keep_resident": False,
    "driver_pin": "580.95.05",
    "allow_missing_driver": True,
}


def test_the_preflight_names_a_newer_running_driver_and_the_fix():
    """The real H200 capture runs 580.159.04; against the pin 580.95.05 the preflight warns that it stays."""
    facts = real_h200()
    assert facts["driver_version"] == "580.159.04"
    host = {"mem_total_gib": 2000, "mem_available_gib": 1900, "weights": {"exists": False}, "secure_boot": "disabled"}
    pin = {c["name"]: c for c in preflight_checks(facts, host, REQUIREMENTS)}["driver_pin"]
    assert pin["status"] == "warn"
    assert pin["detail"].startswith("driver 580.159.04 runs, newer than the pin 580.95.05: the host phase keeps it")
    assert "nvidia_driver_allow_downgrade" in pin["detail"]
    assert "set bom.nvidia_driver.version: 580.159.04" in pin["fix"] and pin["fix"] in pin["detail"]
    older = {c["name"]: c for c in preflight_checks(facts, host, dict(REQUIREMENTS, driver_pin="580.172.08"))}
    assert older["driver_pin"]["detail"] == "driver 580.159.04 differs from the pin 580.172.08"
    assert "installs the pinned driver" in older["driver_pin"]["fix"]


def test_the_role_uses_the_filters():
    filters = nvidia_packages.FilterModule().filters()
    for name in ("nvidia_driver_resolve", "nvidia_driver_keep", "nvidia_driver_wanted", "apt_cache_lacks"):
        assert name in filters
    tasks = (ROOT / "roles" / "nvidia_driver" / "tasks" / "packages.yml").read_text()
    assert "allow_downgrade: true" not in tasks
    assert "allow_downgrade: true" not in (ROOT / "roles/nvidia_driver/tasks/fabricmanager.yml").read_text()


# --- the test bed: the stand-in repository and the upgrade scenario cross the revision change ---------------------


def test_the_standin_repository_and_the_upgrade_scenario_cross_the_revision_change(monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "standin_build_repo", ROOT / "tests" / "testbed" / "standin-nvidia" / "build_repo.py"
    )
    build_repo = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, build_repo)  # its dataclass looks its module up there
    spec.loader.exec_module(build_repo)
    revisions = {v: build_repo.cuda_revision("ubuntu", v) for v in build_repo.DRIVER_VERSIONS}
    assert {"0ubuntu1", "1ubuntu1"} <= set(revisions.values())
    assert build_repo.cuda_revision("debian", "580.126.09") == "1"
    play = yaml.safe_load(Path(ROOT / "molecule" / "driver-upgrade" / "converge.yml").read_text())[0]["vars"]
    assert revisions[play["first_pin"]] == "0ubuntu1" and revisions[play["second_pin"]] == "1ubuntu1"
    assert play["first_package"] == f"{play['first_pin']}-0ubuntu1"
    assert play["second_package"] == f"{play['second_pin']}-1ubuntu1"
    bom = yaml.safe_load((ROOT / "inventories" / "prod" / "group_vars" / "all" / "bom.yml").read_text())["bom"]
    assert play["first_pin"] == bom["nvidia_driver"]["version"]  # the bump starts from the bill of materials' pin
