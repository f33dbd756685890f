"""Filters of the offline bundle (roles/bundle): what goes into it, and how it is described.

Pure functions of the bill of materials (``a800_bom``), the per-release facts (``a800_platforms``, from
``roles/a800/vars/platform/``) and the inventory's bundle settings, so that the choice is unit-tested
(tests/unit/test_bundle.py). The NVIDIA driver set is the host roles' own choice (``nvidia_driver_install`` of
plugins/filter/nvidia_packages.py), called once per target kernel; the toolkit's four packages and the Docker pin are
the container_runtime role's. One function reads files: ``bundle_installed_collections`` reads the MANIFEST.json of
the collections the control node has installed (the fallback when Galaxy cannot be reached).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.a800.vllm.plugins.filter.nvidia_packages import (
    nvidia_cuda_source,
    nvidia_driver_install,
    nvidia_toolkit_source,
)

# roles/container_runtime/vars/main.yml: the toolkit is four packages released together, installed at one version.
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
# nvidia_driver_install needs a kernel; without a target kernel list the kernel-bound packages are left out.
_NO_KERNEL = "@no-kernel@"


def bundle_platform(platforms: list[dict], key: str, overrides: dict | None = None) -> dict:
    """The per-release facts of one platform key (Ubuntu_24.04), with the inventory's overrides merged in."""
    found = [p for p in platforms or [] if p.get("key") == key]
    if not found:
        known = ", ".join(sorted(p.get("key", "?") for p in platforms or []))
        raise AnsibleFilterError(
            f"bundle_platforms names {key!r}, which has no file in roles/a800/vars/platform/ (known: {known})"
        )
    return {**found[0], **((overrides or {}).get(key) or {})}


def bundle_apt_packages(
    bom: dict,
    platform: dict,
    kernels: list[str] | None = None,
    role_packages: list[str] | None = None,
    fabricmanager: bool = False,
) -> dict[str, Any]:
    """The apt packages of the bill of materials for one platform, as ``apt-get install`` arguments.

    Returns ``packages`` (name or name=version, in install order, no duplicates), ``pinning`` (the version-locking
    packages among them, installed before the rest is resolved), ``groups`` (the same by purpose, for the manifest)
    and ``notes`` (what was left out and why)."""
    driver = bom.get("nvidia_driver") or {}
    kernels = [str(k) for k in kernels or [] if str(k).strip()]
    notes: list[str] = []
    choices = [nvidia_driver_install(driver, platform, k) for k in (kernels or [_NO_KERNEL])]
    first = choices[0]
    driver_set: list[str] = list(first["pinning"]) + list(first["install"])
    kernel_set: list[str] = []
    if first["source"] == "ubuntu-precompiled":
        # the kernel's module package comes first in install (it carries the kernel in its name)
        driver_set = [p for p in driver_set if p != first["modules"]]
        if kernels:
            kernel_set = [c["modules"] for c in choices]
        else:
            notes.append(
                "no bundle_kernels: Canonical's module packages are built per kernel "
                "(linux-modules-nvidia-<branch>-server[-open]-<kernel>), none is in the bundle"
            )
    elif kernels:
        kernel_set = [c["headers"] for c in choices]
    else:
        notes.append(
            "no bundle_kernels: the headers DKMS builds against (linux-headers-<kernel>) are not in the bundle; "
            "a site host needs them from its own mirror"
        )
    if fabricmanager:
        driver_set.append(first["fabricmanager"])
    toolkit_version = str((bom.get("container_toolkit") or {}).get("version", ""))
    if not toolkit_version:
        raise AnsibleFilterError("bom.container_toolkit.version is empty: the toolkit's four packages are pinned to it")
    toolkit = [f"{name}={toolkit_version}" for name in TOOLKIT_PACKAGES]
    docker: list[str] = []
    if (bom.get("docker") or {}).get("install", "auto") == "auto":
        docker = [f"{platform['docker_package']}={platform['docker_version']}"]
    else:
        notes.append("bom.docker.install is not auto: the roles never install an engine, none is in the bundle")
    groups = {
        "nvidia_driver": driver_set,
        "kernel": kernel_set,
        "container_toolkit": toolkit,
        "docker": docker,
        "roles": list(role_packages or []),
    }
    packages: list[str] = []
    for group in groups.values():
        for package in group:
            if package not in packages:
                packages.append(package)
    # NVIDIA's pinning package locks the driver's versions through apt preferences once installed: the roles install
    # it first, and so does the resolver before it resolves the rest.
    return {"packages": packages, "pinning": list(first["pinning"]), "groups": groups, "notes": notes}


def _copy_scheme(uri: str) -> str:
    """file: -> copy: (sources.list(5): "identical to the file scheme except that packages are copied into the cache
    directory instead of used directly at their location"); apt leaves file: packages where they are, so a download
    into the bundle's pool would miss them."""
    return "copy:" + uri[len("file:") :] if uri.startswith("file:") else uri


def bundle_apt_sources(bom: dict, platform: dict, extra: list[dict] | None = None) -> list[dict]:
    """The repositories to add for one platform, as deb822_repository arguments: NVIDIA's CUDA repository of the
    release (only with source cuda-repo, as the driver role adds it), the toolkit's, and the inventory's extra ones.
    A file: repository is read through apt's copy: method, so that its packages land in the pool too."""
    driver = bom.get("nvidia_driver") or {}
    sources = []
    if driver.get("source", "cuda-repo") == "cuda-repo":
        sources.append(nvidia_cuda_source(driver["repo"], platform))
    sources.append(nvidia_toolkit_source(bom["container_toolkit"]["repo"], platform))
    for source in extra or []:
        if not {"name", "uris", "suites"} <= set(source):
            raise AnsibleFilterError(f"an extra bundle repository needs name, uris and suites: {source!r}")
        sources.append(dict(source))
    return [{**s, "uris": _copy_scheme(str(s["uris"]))} for s in sources]


def bundle_image_file(name: str) -> str:
    """The file name of an image's ``docker save`` archive: vllm/vllm-openai:v0.26.0 -> vllm_vllm-openai_v0.26.0.tar."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name).strip()).strip("_")
    if not clean:
        raise AnsibleFilterError(f"not an image reference: {name!r}")
    return f"{clean}.tar"


def bundle_digest(value: Any) -> str:
    """sha256 of a value as canonical JSON (sorted keys): the bill of materials' digest in the manifest."""
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _manifest_collection(path: str) -> dict:
    with open(os.path.join(path, "MANIFEST.json"), encoding="utf-8") as handle:
        return json.load(handle)["collection_info"]


def _version_matches(version: str, wanted: str | None) -> bool:
    """ansible-galaxy's own test of a version against a requirement (4.8.5, ==4.8.5, >=1.0.0, *, or none)."""
    # Imported here, not at the top: ansible.galaxy costs ~0.9 s to import on a busy machine, and a task's worker
    # imports every filter file of the collection the first time it templates a filter.
    from ansible.galaxy.dependency_resolution.versioning import meets_requirements

    return meets_requirements(str(version), str(wanted or "*").strip() or "*")


def bundle_installed_collections(requirements: dict, listing: dict) -> list[dict]:
    """The installed collections that stand in for ``ansible-galaxy collection download -r requirements.yml``.

    ``requirements``: requirements.yml as data; ``listing``: ``ansible-galaxy collection list --format json``
    (path -> name -> {version}). Every required collection, and every collection it depends on (MANIFEST.json,
    recursively), is taken from the first path whose version fits the pin. Fails naming a collection that is not
    installed at a fitting version."""
    wanted: list[tuple[str, str | None, str]] = []
    for entry in (requirements or {}).get("collections") or []:
        entry = {"name": entry} if isinstance(entry, str) else entry
        wanted.append((entry["name"], entry.get("version"), "requirements.yml"))
    found: dict[str, dict] = {}
    problems: list[str] = []
    while wanted:
        name, version, by = wanted.pop(0)
        if name in found:
            if not _version_matches(found[name]["version"], version):
                problems.append(f"{name} {found[name]['version']} does not fit {version} (wanted by {by})")
            continue
        candidates = [
            (path, entries[name]["version"])
            for path, entries in (listing or {}).items()
            if name in entries and _version_matches(str(entries[name]["version"]), version)
        ]
        if not candidates:
            have = [f"{e[name]['version']} in {p}" for p, e in (listing or {}).items() if name in e]
            problems.append(
                f"{name} {version or ''} (wanted by {by}) is not installed"
                + (f" at that version (found {', '.join(have)})" if have else "")
            )
            continue
        root, ver = candidates[0]
        namespace, short = name.split(".", 1)
        path = os.path.join(root, namespace, short)
        info = _manifest_collection(path)
        found[name] = {"name": name, "version": str(ver), "path": path, "wanted_by": by, "collection_info": info}
        for dep, spec in (info.get("dependencies") or {}).items():
            wanted.append((dep, spec, name))
    if problems:
        raise AnsibleFilterError(
            "the installed collections cannot stand in for requirements.yml: "
            + "; ".join(problems)
            + ". Install them (ansible-galaxy collection install -r requirements.yml) or use a Galaxy mirror"
        )
    return list(found.values())


def bundle_galaxy_yml(collection_info: dict) -> dict:
    """galaxy.yml of an installed collection, from its MANIFEST.json collection_info (empty keys dropped, as
    ansible-galaxy collection build refuses e.g. license and license_file together)."""
    return {k: v for k, v in (collection_info or {}).items() if v not in (None, "", [], {})}


def bundle_collection_file(name: str, version: str) -> str:
    """The artifact name ansible-galaxy gives a collection: community.docker 4.8.5 -> community-docker-4.8.5.tar.gz."""
    return f"{str(name).replace('.', '-', 1)}-{version}.tar.gz"


def bundle_collections_requirements(collections: list[dict]) -> dict:
    """The requirements.yml that ansible-galaxy collection download writes next to the artifacts (name: the file,
    version: the collection's), so that `ansible-galaxy collection install -r requirements.yml` installs them."""
    return {
        "collections": [
            {"name": bundle_collection_file(c["name"], c["version"]), "version": str(c["version"])} for c in collections
        ]
    }


def bundle_item_size(files: list[dict]) -> int:
    """Bytes of the files of an item: the ``files`` of ansible.builtin.find."""
    return sum(int(f.get("size", 0)) for f in files or [])


def bundle_manifest(items: list[dict], platforms: list[str], bom: dict, meta: dict | None = None) -> dict:
    """manifest.json: what is in the bundle (per item: kind, name, version, path, size in bytes), for which
    platforms, from which bill of materials (its digest and the BOM itself)."""
    for item in items:
        missing = {"kind", "name", "path", "size"} - set(item)
        if missing:
            raise AnsibleFilterError(f"a bundle item lacks {', '.join(sorted(missing))}: {item!r}")
    return {
        "format": 1,
        **(meta or {}),
        "platforms": list(platforms),
        "bom_digest": bundle_digest(bom),
        "bom": bom,
        "total_size": sum(int(i["size"]) for i in items),
        "items": sorted(items, key=lambda i: (i["kind"], i["name"])),
    }


_SUM_LINE = re.compile(r"^(?P<path>.*): (?P<status>OK|FAILED(?: open or read)?)$")


def bundle_verify_failures(sha256sum_output: str) -> list[dict]:
    """The files that ``sha256sum --check`` reports as not matching (FAILED) or unreadable (FAILED open or read)."""
    failures = []
    for line in (sha256sum_output or "").splitlines():
        m = _SUM_LINE.match(line.strip())
        if m and m["status"] != "OK":
            failures.append({"path": m["path"], "why": "missing or unreadable" if "open" in m["status"] else "sum"})
    return failures


class FilterModule:
    def filters(self) -> dict:
        return {
            "bundle_platform": bundle_platform,
            "bundle_apt_packages": bundle_apt_packages,
            "bundle_apt_sources": bundle_apt_sources,
            "bundle_image_file": bundle_image_file,
            "bundle_digest": bundle_digest,
            "bundle_installed_collections": bundle_installed_collections,
            "bundle_galaxy_yml": bundle_galaxy_yml,
            "bundle_collection_file": bundle_collection_file,
            "bundle_collections_requirements": bundle_collections_requirements,
            "bundle_item_size": bundle_item_size,
            "bundle_manifest": bundle_manifest,
            "bundle_verify_failures": bundle_verify_failures,
        }
