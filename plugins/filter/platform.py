"""Filters: is this host a system the roles support? Read before anything else runs on it.

The preflight reads the host's identity with ``raw`` (no Python needed on the host, so that a host whose Python is
too old for ansible-core's modules is still told why): ``/etc/os-release`` and the version of the Python that
Ansible would use. ``os_identity`` parses that output; ``a800_platform_checks`` compares it with the supported
systems, which are the per-release vars files of the role a800 (``roles/a800/vars/platform/<key>.yml``, each with
its ``os_release`` id and version). Sources: docs/field.md#supported-systems.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, check

PYTHON_MARK = "--- python"
# Families Ansible folds into os_family RedHat although their os-release IDs say otherwise (ansible-core's
# distribution facts): named in the refusal so that nobody reads "Kylin" as "a Debian derivative".
REDHAT_LIKE = {"rhel", "centos", "fedora", "rocky", "almalinux", "ol", "openeuler", "kylin", "uos", "euleros", "anolis"}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text or ""))


def os_identity(raw: str) -> dict[str, Any]:
    """Parse ``cat /etc/os-release; echo '--- python'; <python -c version>`` into os_release and python."""
    release_text, _, python_text = (raw or "").partition(PYTHON_MARK)
    release: dict[str, str] = {}
    for line in release_text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", key):
            parts = shlex.split(value) if value else [""]
            release[key] = parts[0] if parts else ""
    python = None
    for line in python_text.splitlines():
        match = re.match(r"^(\d+\.\d+(?:\.\d+)?)\s+(\S+)", line.strip())
        if match:
            python = {"version": match.group(1), "executable": match.group(2)}
            break
    return {"os_release": release, "python": python}


def _describe(release: dict[str, str]) -> str:
    if not release:
        return "no /etc/os-release"
    name = release.get("PRETTY_NAME") or f"{release.get('NAME', '?')} {release.get('VERSION_ID', '')}".strip()
    like = f", ID_LIKE={release['ID_LIKE']}" if release.get("ID_LIKE") else ""
    return f"{name} (ID={release.get('ID', '?')}, VERSION_ID={release.get('VERSION_ID', '?')}{like})"


def supported_platform(identity: dict, platforms: list[dict]) -> dict | None:
    """The platform entry whose os-release id and version match the host's, else None."""
    release = identity.get("os_release") or {}
    host_id, host_version = release.get("ID", "").lower(), release.get("VERSION_ID", "")
    for platform in platforms:
        want = platform["os_release"]
        if host_id == want["id"] and host_version == str(want["version_id"]):
            return platform
    return None


def a800_platform_checks(identity: dict, platforms: list[dict], min_python: str) -> list[dict]:
    """The ``os`` and ``python`` checks of one host: FAIL names what was found and what is supported."""
    release = identity.get("os_release") or {}
    found = _describe(release)
    names = ", ".join(f"{p['name']}{' (' + p['use'] + ')' if p.get('use') != 'production' else ''}" for p in platforms)
    platform = supported_platform(identity, platforms)
    ids = {release.get("ID", "").lower(), *release.get("ID_LIKE", "").lower().split()}
    if platform:
        os_check = check("os", PASS, "os_release", found, names, f"operating system: {platform['name']}")
    else:
        family = " (RHEL family: Ansible reports os_family RedHat)" if ids & REDHAT_LIKE else ""
        os_check = check(
            "os",
            FAIL,
            "os_release",
            found,
            names,
            f"operating system: found {found}{family}, which these roles do not support; nothing was changed",
            "install Ubuntu 22.04 or 24.04 LTS on the server: the roles install NVIDIA's and Docker's packages for "
            "those releases only (RHEL family, openEuler, Kylin and UnionTech are refused, as are other releases)",
        )
    python = identity.get("python")
    if python is None:
        py_check = check(
            "python",
            FAIL,
            "target python",
            None,
            f">= {min_python}",
            "Python: no python3 found on the host; Ansible's modules need one",
            f"install python3 (>= {min_python}) from the distribution, or set ansible_python_interpreter",
        )
    elif _version(python["version"]) < _version(min_python):
        py_check = check(
            "python",
            FAIL,
            "target python",
            python["version"],
            f">= {min_python}",
            f"Python: {python['executable']} is {python['version']}; ansible-core 2.19 runs modules on "
            f"Python {min_python} or newer",
            f"install a newer python3 and point ansible_python_interpreter at it (>= {min_python})",
        )
    else:
        py_check = check(
            "python",
            PASS,
            "target python",
            python["version"],
            f">= {min_python}",
            f"Python {python['version']} ({python['executable']})",
        )
    return [os_check, py_check]


def facts_current(facts: dict | None, kernel: str, identity_raw: str) -> bool:
    """Whether Ansible's cached facts (`ansible_facts`, gather_subset min) are those of the host as a read of this
    run found it: its running kernel (the preflight's host_facts.kernel) and its os-release (the preflight's raw read,
    `identity_raw`). The roles use only the kernel, the distribution, its version and the OS family of them, so facts
    that agree on those need no new gathering; a host that rebooted into another kernel or release does not agree."""
    facts = facts or {}
    release = os_identity(identity_raw).get("os_release") or {}
    return bool(
        kernel
        and release.get("ID")
        and facts.get("os_family")
        and facts.get("kernel") == kernel
        and str(facts.get("distribution", "")).lower() == release["ID"].lower()
        and _same_version(str(facts.get("distribution_version", "")), release.get("VERSION_ID", ""))
    )


def _same_version(facts_version: str, version_id: str) -> bool:
    """Ansible's distribution_version against os-release's VERSION_ID: the same on Ubuntu (24.04), the point release
    of it on Debian (12.8, from /etc/debian_version, against 12)."""
    return bool(version_id) and (facts_version == version_id or facts_version.startswith(version_id + "."))


class FilterModule:
    def filters(self) -> dict:
        return {
            "os_identity": os_identity,
            "a800_platform_checks": a800_platform_checks,
            "facts_current": facts_current,
        }
