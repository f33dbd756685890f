"""What apt and dpkg say about packages, parsed: the versions the archive has, and the versions installed.

- ``apt-cache madison NAME...`` prints one line per version and index, ``NAME | VERSION | URI SUITE/COMP ARCH
  Packages`` (a ``Sources`` index when deb-src is configured, skipped here: a binary package is installed).
- ``apt-cache show NAME...`` prints one RFC 822 stanza per version, with ``Package:`` and ``Version:`` fields.
- ``dpkg-query -W -f='${Package} ${Version} ${Status}\\n' NAME...`` prints one line per package dpkg knows;
  ``... ok installed`` (``install``/``hold``) is installed, anything else (``deinstall ok config-files``) is not.

Pure functions, so that the roles' decisions on them are unit-tested on real-shaped output
(tests/unit/test_driver_versions.py).
"""

from __future__ import annotations

import functools
import re

from ansible_collections.a800.vllm.plugins.module_utils.debian_version import compare_versions, upstream_version

_MADISON = re.compile(r"^\s*(?P<name>[^\s|]+)\s*\|\s*(?P<version>[^\s|]+)\s*\|\s*(?P<index>.*?)\s*$")


def apt_cache_versions(text: str) -> dict[str, list[str]]:
    """The versions of each package in ``apt-cache madison`` or ``apt-cache show`` output, as apt printed them."""
    found: dict[str, list[str]] = {}

    def add(name: str, version: str) -> None:
        versions = found.setdefault(name, [])
        if version not in versions:
            versions.append(version)

    text = text or ""
    madison = [m for m in (_MADISON.match(line) for line in text.splitlines()) if m]
    if madison:
        for m in madison:
            if not m.group("index").endswith(" Sources"):
                add(m.group("name"), m.group("version"))
        return found
    for stanza in re.split(r"\n\s*\n", text):
        name = re.search(r"^Package:\s*(\S+)\s*$", stanza, re.M)
        version = re.search(r"^Version:\s*(\S+)\s*$", stanza, re.M)
        if name and version:
            add(name.group(1), version.group(1))
    return found


def versions_of_upstream(versions: list[str], upstream: str) -> list[str]:
    """The package versions whose upstream part is ``upstream`` (any epoch, any revision), highest first."""
    matching = [v for v in versions if upstream_version(v) == str(upstream)]
    return sorted_versions(matching, reverse=True)


def sorted_versions(versions, reverse: bool = False) -> list[str]:
    """Debian versions in dpkg's order (lowest first)."""
    return sorted(versions, key=functools.cmp_to_key(compare_versions), reverse=reverse)


def dpkg_installed(text: str) -> dict[str, str]:
    """The installed version of each package in ``dpkg-query -W -f='${Package} ${Version} ${Status}\\n'`` output."""
    installed: dict[str, str] = {}
    for line in (text or "").splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[2].strip().endswith("ok installed"):
            installed[parts[0]] = parts[1]
    return installed


def resolve_spec(versions: dict[str, list[str]], spec: str) -> str | None:
    """``NAME=UPSTREAM-*`` -> ``NAME=VERSION``, the highest version of the archive with that upstream part (any epoch,
    any revision); ``NAME=VERSION`` -> itself when the archive has that version; ``NAME`` -> itself when the archive
    knows it. None when the archive does not have it."""
    name, sep, wanted = str(spec).partition("=")
    known = versions.get(name, [])
    if not sep:
        return name if known else None
    if wanted.endswith("-*"):
        found = versions_of_upstream(known, wanted[:-2])
        return f"{name}={found[0]}" if found else None
    return spec if wanted in known else None


def apt_cache_lacks(text: str, wanted: list[str]) -> list[str]:
    """The wanted packages (``NAME``, ``NAME=VERSION`` or ``NAME=UPSTREAM-*``) that apt-cache's output lacks."""
    versions = apt_cache_versions(text)
    return [spec for spec in wanted or [] if resolve_spec(versions, spec) is None]
