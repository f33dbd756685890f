"""Filters: which NVIDIA packages a host gets, at which versions, from which repository.

Pure functions of the bill of materials (what is pinned), the host's per-release facts (``a800_platform``, from
``roles/a800/vars/platform/``) and the running kernel, so that the choice is unit-tested for every release and
branch. The names are the vendors' (sources in docs/field.md#nvidia-driver-packages):

- NVIDIA's CUDA repository, Ubuntu, branches before 590: the compute-only (headless) set
  ``libnvidia-compute-<branch>`` + ``nvidia-dkms-<branch>[-open]`` with ``nvidia-utils-<branch>`` (nvidia-smi) and
  ``nvidia-compute-utils-<branch>`` (nvidia-persistenced), at ``<version>-*``; held.
- The same repository from branch 590: the names lose the branch (``libnvidia-compute``, ``nvidia-dkms-open``) and
  the version is locked by ``nvidia-driver-pinning-<version>``, installed first (the Installation Guide, "Version
  locking"); held as well.
- NVIDIA's Debian 12 repository: ``nvidia-driver-cuda`` + ``nvidia-kernel-open-dkms`` with the pinning package.
- Canonical's precompiled, signed modules (Ubuntu's archive): ``linux-modules-nvidia-<branch>-server[-open]-<kernel>``
  for the running kernel with ``nvidia-headless-no-dkms-<branch>-server[-open]``, ``nvidia-utils-<branch>-server``
  and ``nvidia-compute-utils-<branch>-server``; no DKMS build, no headers, loads with Secure Boot on.

Every package is asked for at ``<version>-*``: the Debian revision is the archive's, not ours (NVIDIA's Ubuntu
repositories changed it within branch 580, ``-0ubuntu1`` to ``-1ubuntu1``). ``nvidia_driver_resolve`` reads the exact
version of the pin from ``apt-cache madison`` on the host, and names the versions the archive has when the pin is not
there; ``nvidia_driver_keep`` decides whether a driver newer than the pin stays (no silent downgrade).
"""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.a800.vllm.plugins.module_utils.apt_cache import (
    apt_cache_lacks,
    apt_cache_versions,
    dpkg_installed,
    resolve_spec,
    sorted_versions,
)
from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, WARN, check
from ansible_collections.a800.vllm.plugins.module_utils.debian_version import (
    compare_versions,
    newest,
    upstream_version,
)

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
            "version": version,
            "version_spec": spec,
        }
    # any revision: the archive's own, read on the host (nvidia_driver_resolve)
    spec = f"{version}-*"
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
        "version": version,
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


def _bool(value: Any) -> bool:
    """A flag that may arrive as a string: extra vars (-e flag=false) are not converted by Jinja."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def _retarget(spec: str, version: str) -> str:
    """``NAME=<other>-*`` -> ``NAME=<version>-*``; a name without a version stays as it is."""
    name, sep, wanted = str(spec).partition("=")
    return f"{name}={version}-*" if sep and wanted.endswith("-*") else spec


def _installed_as(installed: dict | None, spec: str) -> str | None:
    """``spec`` as it is installed already (``NAME=<installed version>``, or ``NAME``), else None."""
    name, sep, wanted = str(spec).partition("=")
    have = (installed or {}).get(name)
    if have is None:
        return None
    if not sep:
        return name
    if wanted.endswith("-*"):
        return f"{name}={have}" if upstream_version(have) == wanted[:-2] else None
    return spec if have == wanted else None


def nvidia_driver_wanted(
    install: dict,
    version: str | None = None,
    keep: bool = False,
    fabricmanager: bool = False,
    installed: dict | None = None,
) -> list[str]:
    """What the archive must have before anything is installed: the version-locking package and the driver packages
    at ``<version>-*`` (none when a newer driver is kept), and Fabric Manager of that version when it is needed; a
    package installed at that version already (``installed``, as ``dpkg_installed`` reads it) needs nothing."""
    version = str(version or install["version"])
    wanted = [] if _bool(keep) else [*install["pinning"], *(_retarget(s, version) for s in install["install"])]
    if _bool(fabricmanager):
        wanted.append(_retarget(install["fabricmanager"], version))
    return [spec for spec in wanted if _installed_as(installed, spec) is None]


def nvidia_driver_resolve(
    apt_cache: str,
    install: dict,
    version: str | None = None,
    keep: bool = False,
    fabricmanager: bool = False,
    installed: dict | None = None,
) -> dict[str, Any]:
    """The exact package versions of the driver in the host's archive, from ``apt-cache madison`` (or ``show``) of them.

    Each ``NAME=<version>-*`` becomes ``NAME=<the archive's version>``, its highest with that upstream part, whatever
    the epoch and the revision (``-0ubuntu1``, ``-1ubuntu1``, ``-1``); a package installed at that upstream version
    already keeps its exact version (``installed``: no reinstall, and a mirror that dropped it does not matter).
    ``missing`` lists what is wanted (``nvidia_driver_wanted``) but not there, each with the versions the archive has,
    and ``message`` says it with the variable to change; empty when everything is there."""
    version = str(version or install["version"])
    versions = apt_cache_versions(apt_cache)

    def resolved(spec: str) -> str | None:
        spec = _retarget(spec, version)
        return _installed_as(installed, spec) or resolve_spec(versions, spec)

    missing = []
    for spec in nvidia_driver_wanted(install, version, keep, fabricmanager, installed):
        if resolved(spec) is None:
            name = spec.partition("=")[0]
            missing.append({"package": name, "wanted": spec, "available": sorted_versions(versions.get(name, []))})
    message = ""
    if missing:
        said = [
            f"{m['package']} has {', '.join(m['available'])}" if m["available"] else f"apt knows no {m['package']}"
            for m in missing
        ]
        fm_name = install["fabricmanager"].partition("=")[0]
        if any(m["package"] != fm_name for m in missing):
            common = None
            for name in (n.partition("=")[0] for n in install["install"] if "=" in n):
                upstreams = {upstream_version(v) for v in versions.get(name, [])}
                common = upstreams if common is None else common & upstreams
            offered = sorted_versions(common or [])
            has = (
                f"The archive has the driver at {', '.join(offered)}"
                if offered
                else "The archive has no version of the driver packages at all: check that NVIDIA's repository of this "
                "release (or its mirror) is configured and that apt can read it"
            )
            message = (
                f"NVIDIA driver {version} is not in the configured repositories ({'; '.join(said)}). {has}. Set "
                f"bom.nvidia_driver.version (nvidia_driver_version for one host) to a version the archive has, or make "
                f"the repository (bom.nvidia_driver.repo.base, a mirror of it) carry {version}."
            )
        else:
            message = (
                f"Fabric Manager of driver {version} is not in the configured repositories ({'; '.join(said)}): it "
                f"must be the driver's version (NVIDIA Fabric Manager User Guide). Mirror it with the driver, or set "
                f"nvidia_driver_fabricmanager: never on hosts without an NVSwitch fabric."
            )
    fm = resolved(install["fabricmanager"]) or ""
    return {
        "version": version,
        "install": [resolved(s) or _retarget(s, version) for s in install["install"]],
        "pinning": list(install["pinning"]),
        "fabricmanager": fm,
        "missing": missing,
        "message": message,
    }


def nvidia_driver_keep(
    dpkg_query: str | dict, install: dict, gpu: dict, pin: str, allow_downgrade: Any = False
) -> dict[str, Any]:
    """Does a driver newer than the pin stay? The pin is not a reason to downgrade a host that runs a newer driver.

    ``dpkg_query`` is ``dpkg-query -W -f='${Package} ${Version} ${Status}\n'`` of the role's packages (or its parsed
    dict). The driver packages installed (the kernel's module package of Canonical's set aside: its version is the
    kernel's) and the running driver (``gpu_facts``) are compared with the pin as Debian versions. When one is newer
    and ``allow_downgrade`` is false, ``keep`` is true and ``version`` is the driver that stays (the installed one,
    else the running one); otherwise ``version`` is the pin. ``message`` says what happens whenever one is newer."""
    installed = dpkg_installed(dpkg_query) if isinstance(dpkg_query, str) else dict(dpkg_query or {})
    pin = str(pin)
    names = [n for n in install["hold"] if n != install.get("modules")]
    packages = {n: installed[n] for n in names if n in installed}
    package_version = newest(upstream_version(v) for v in packages.values())
    running = str(gpu.get("driver_version") or "") if gpu.get("driver_loaded") else ""
    newer = [v for v in (package_version, running) if v and compare_versions(v, pin) > 0]
    decision = {
        "keep": False,
        "version": pin,
        "pin": pin,
        "newer": newer[0] if newer else None,
        "running": running or None,
        "packages": packages,
        "installed": installed,
        "downgrade": False,
        "message": "",
    }
    if not newer:
        return decision
    shown = ", ".join(f"{n} {v}" for n, v in packages.items()) or "not from this role's packages"
    where = f"running {running or 'no driver (not loaded)'}; packages: {shown}"
    if _bool(allow_downgrade):
        decision["downgrade"] = True
        decision["message"] = (
            f"Downgrading the NVIDIA driver from {newer[0]} to the pin {pin} ({where}): "
            f"nvidia_driver_allow_downgrade is true."
        )
        return decision
    decision["keep"] = True
    decision["version"] = newer[0]
    decision["message"] = (
        f"Keeping NVIDIA driver {newer[0]}, newer than the pin {pin} ({where}): no driver package is installed, "
        f"changed or downgraded, and nvidia_driver_allow_downgrade is false. To run the pin, re-run with "
        f"-e nvidia_driver_allow_downgrade=true (a reboot needs nvidia_driver_reboot_allowed=true); to pin what runs, "
        f"set bom.nvidia_driver.version: {newer[0]}."
    )
    return decision


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
    running = str(gpu.get("driver_version") or "") if gpu.get("driver_loaded") else ""
    # a running driver newer than the pin stays unless a downgrade is asked for (nvidia_driver_keep): nothing is built
    kept = bool(running) and compare_versions(running, version) > 0 and not _bool(bom_driver.get("allow_downgrade"))
    running_pin = bool(running) and (running == version or kept)
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
            if source != "cuda-repo":
                how = "Canonical's signed modules"
            elif kept:
                how = f"the running driver {running}, newer than the pin {version}, is kept"
            else:
                how = f"the pinned driver {version} already loads"
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
            "nvidia_driver_wanted": nvidia_driver_wanted,
            "nvidia_driver_resolve": nvidia_driver_resolve,
            "nvidia_driver_keep": nvidia_driver_keep,
            "apt_cache_lacks": apt_cache_lacks,
            "nvidia_cuda_source": nvidia_cuda_source,
            "nvidia_toolkit_source": nvidia_toolkit_source,
        }
