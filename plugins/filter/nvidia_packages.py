"""Filters: which NVIDIA packages a host gets, at which versions, from which repository.

Pure functions of the bill of materials (what is pinned), the host's per-release facts (``a800_platform``, from
``roles/a800/vars/platform/``) and the running kernel, so that the choice is unit-tested for every release and
branch. The names are the vendors' (sources in docs/field.md#nvidia-driver-packages):

- NVIDIA's CUDA repository, Ubuntu, branches before 590: the compute-only (headless) set
  ``libnvidia-compute-<branch>`` + ``nvidia-dkms-<branch>[-open]`` with ``nvidia-utils-<branch>`` (nvidia-smi) and
  ``nvidia-compute-utils-<branch>`` (nvidia-persistenced), at ``<version>-<revision>``; held.
- The same repository from branch 590: the names lose the branch (``libnvidia-compute``, ``nvidia-dkms-open``) and
  the version is locked by ``nvidia-driver-pinning-<version>``, installed first (the Installation Guide, "Version
  locking"); held as well.
- NVIDIA's Debian 12 repository: ``nvidia-driver-cuda`` + ``nvidia-kernel-open-dkms`` with the pinning package.
- Canonical's precompiled, signed modules (Ubuntu's archive): ``linux-modules-nvidia-<branch>-server[-open]-<kernel>``
  for the running kernel with ``nvidia-headless-no-dkms-<branch>-server[-open]``, ``nvidia-utils-<branch>-server``
  and ``nvidia-compute-utils-<branch>-server``; no DKMS build, no headers, loads with Secure Boot on.
"""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, WARN, check

SOURCES = ("cuda-repo", "ubuntu-precompiled")
UNVERSIONED_FROM = 590


def _branch(bom_driver: dict) -> int:
    branch = str(bom_driver.get("branch", ""))
    version = str(bom_driver.get("version", ""))
    if not branch.isdigit():
        raise AnsibleFilterError(f"bom.nvidia_driver.branch must be a number such as '580', not {branch!r}")
    if version.split(".")[0] != branch:
        raise AnsibleFilterError(
            f"bom.nvidia_driver.version {version!r} is not on branch {branch}: set both from one driver release "
            f"(e.g. branch '580', version '580.95.05')"
        )
    return int(branch)


def repo_url(base: str, directory: str) -> str:
    """A repository URL from the BOM's base (a mirror may replace it) and the per-release directory."""
    return f"{str(base).rstrip('/')}/{str(directory).strip('/')}/"


def nvidia_cuda_source(repo: dict, platform: dict) -> dict[str, str]:
    """NVIDIA's CUDA repository of this release as deb822 fields: <base>/<ubuntu2404/x86_64>/, key in that directory."""
    uri = repo_url(repo["base"], platform["nvidia_repo_dir"])
    return {"name": "nvidia-cuda", "uris": uri, "suites": "/", "signed_by": uri + repo["key"]}


def nvidia_toolkit_source(repo: dict, platform: dict) -> dict[str, str]:
    """The container toolkit's repository (one for every Debian-family release): <base>/stable/deb/amd64/."""
    return {
        "name": "nvidia-container-toolkit",
        "uris": repo_url(repo["base"], platform["toolkit_repo_dir"]),
        "suites": "/",
        "signed_by": f"{str(repo['base']).rstrip('/')}/{repo['key']}",
    }


def nvidia_driver_install(bom_driver: dict, platform: dict, kernel: str) -> dict[str, Any]:
    """What to install for the pinned driver on this host: packages, versions, pre-install pin, headers, holds."""
    branch = _branch(bom_driver)
    version = str(bom_driver["version"])
    source = bom_driver.get("source", "cuda-repo")
    open_modules = bom_driver.get("kernel_modules", "open") == "open"
    if source not in SOURCES:
        raise AnsibleFilterError(f"bom.nvidia_driver.source must be one of {', '.join(SOURCES)}, not {source!r}")
    pinning: list[str] = []
    if source == "ubuntu-precompiled":
        if not platform.get("ubuntu_precompiled"):
            raise AnsibleFilterError(
                f"bom.nvidia_driver.source ubuntu-precompiled: Canonical's precompiled modules come from Ubuntu's "
                f"archive, which {platform['name']} does not have; use source cuda-repo"
            )
        flavour = "-server-open" if open_modules else "-server"
        spec = f"{version}-*"
        modules = f"linux-modules-nvidia-{branch}{flavour}-{kernel}"
        # every user-space package at the version, the kernel-common one too: apt would pick its newest otherwise, and
        # the kernel's module package accepts exactly the driver it was built for
        names = [
            f"nvidia-kernel-common-{branch}-server",
            f"nvidia-headless-no-dkms-{branch}{flavour}",
            f"nvidia-utils-{branch}-server",
            f"nvidia-compute-utils-{branch}-server",
        ]
        return {
            "source": source,
            "modules": modules,
            "dkms": False,
            "headers": None,
            "pinning": [],
            # the kernel's module package carries the kernel's version in its own: it follows the driver packages
            "install": [modules, *(f"{n}={spec}" for n in names)],
            "hold": [modules, *names],
            "fabricmanager": f"nvidia-fabricmanager-{branch}={spec}",
            "version_spec": spec,
        }
    spec = f"{version}-{platform['nvidia_package_revision']}"
    scheme = platform["nvidia_package_scheme"]
    if scheme == "debian":
        names = ["nvidia-driver-cuda", "nvidia-kernel-open-dkms" if open_modules else "nvidia-kernel-dkms"]
        pinning = [f"nvidia-driver-pinning-{version}"]
        fabricmanager = "nvidia-fabricmanager"
    elif branch >= UNVERSIONED_FROM:
        names = ["libnvidia-compute", "nvidia-dkms-open" if open_modules else "nvidia-dkms"]
        pinning = [f"nvidia-driver-pinning-{version}"]
        fabricmanager = "nvidia-fabricmanager"
    else:
        dkms = f"nvidia-dkms-{branch}-open" if open_modules else f"nvidia-dkms-{branch}"
        names = [f"libnvidia-compute-{branch}", dkms, f"nvidia-utils-{branch}", f"nvidia-compute-utils-{branch}"]
        fabricmanager = f"nvidia-fabricmanager-{branch}"
    return {
        "source": source,
        "modules": None,
        "dkms": True,
        "headers": f"linux-headers-{kernel}",
        "pinning": pinning,
        "install": [f"{n}={spec}" for n in names],
        "hold": names,
        "fabricmanager": f"{fabricmanager}={spec}",
        "version_spec": spec,
    }


def precompiled_module_driver(apt_cache_show: str, package: str) -> str | None:
    """The driver version Canonical built a kernel's module package for, from ``apt-cache show`` of it.

    linux-restricted-modules pins its driver in the dependencies, ``nvidia-kernel-common-<branch>-server (<= V-1),
    nvidia-kernel-common-<branch>-server (>= V)``: the archive's module for a kernel serves one driver version.
    None when the archive has no such package (``apt-cache show`` printed nothing for it)."""
    stanza = next(
        (
            s
            for s in re.split(r"\n\s*\n", apt_cache_show or "")
            if re.search(rf"^Package: {re.escape(package)}$", s, re.M)
        ),
        "",
    )
    depends = re.search(r"^Depends: (.*)$", stanza, re.M)
    if not depends:
        return None
    found = re.search(r"nvidia-kernel-common-\d+(?:-server)? \(>= ([0-9.]+)\)", depends.group(1))
    return found.group(1) if found else None


def nvidia_driver_install_checks(host: dict, gpu: dict, bom_driver: dict) -> list[dict]:
    """Can the packaged driver go on this host? A .run-installed driver, or Secure Boot with DKMS, stop it first."""
    source = bom_driver.get("source", "cuda-repo")
    version = str(bom_driver.get("version", ""))
    runfile = host.get("runfile_driver")
    checks = []
    if runfile:
        checks.append(
            check(
                "driver_install_method",
                FAIL,
                "host_facts.runfile_driver",
                runfile,
                "no .run-installed driver",
                f"a driver installed by NVIDIA's .run installer is on the host ({runfile}); it conflicts with the "
                'packaged driver (NVIDIA\'s CUDA Installation Guide, "Handle Conflicting Installation Methods"); '
                "nothing was changed",
                f"remove it first: sudo {runfile}, reboot, then re-run; the host phase installs the pinned packages",
            )
        )
    else:
        checks.append(
            check(
                "driver_install_method",
                PASS,
                "host_facts.runfile_driver",
                None,
                "no .run-installed driver",
                f"driver from packages ({source})",
            )
        )
    secure = host.get("secure_boot", "unknown")
    running_pin = bool(gpu.get("driver_loaded")) and gpu.get("driver_version") == version
    if secure == "enabled" and source == "cuda-repo" and not running_pin:
        checks.append(
            check(
                "secure_boot",
                FAIL,
                "host_facts.secure_boot",
                secure,
                "disabled, or signed modules",
                "Secure Boot is on and bom.nvidia_driver.source is cuda-repo: DKMS signs the module it builds with a "
                "local key the firmware does not trust, and the kernel will not load it",
                "set bom.nvidia_driver.source: ubuntu-precompiled (Canonical's signed modules), or enroll DKMS's key: "
                'sudo mokutil --import /var/lib/dkms/mok.pub (choose a one-time password), reboot, pick "Enroll MOK" '
                "in the MOK manager at the console, then re-run",
            )
        )
    else:
        if secure == "enabled":
            how = (
                "Canonical's signed modules" if source != "cuda-repo" else f"the pinned driver {version} already loads"
            )
            status, detail, fix = PASS, f"Secure Boot on: {how}", ""
        elif secure == "disabled" or secure.startswith("not supported"):
            status, detail, fix = PASS, f"Secure Boot: {secure}", ""
        else:
            status, detail = WARN, f"Secure Boot state: {secure}"
            fix = "check with mokutil --sb-state; with Secure Boot on, use source ubuntu-precompiled"
        checks.append(
            check("secure_boot", status, "host_facts.secure_boot", secure, "disabled, or signed modules", detail, fix)
        )
    return checks


class FilterModule:
    def filters(self) -> dict:
        return {
            "nvidia_driver_install": nvidia_driver_install,
            "nvidia_driver_install_checks": nvidia_driver_install_checks,
            "precompiled_module_driver": precompiled_module_driver,
            "nvidia_cuda_source": nvidia_cuda_source,
            "nvidia_toolkit_source": nvidia_toolkit_source,
        }
