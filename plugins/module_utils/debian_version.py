"""Debian package versions: split and compare them as dpkg does, in pure Python.

The control node may not have python3-apt (``apt_pkg.version_compare``), so this is dpkg's own algorithm
(deb-version(5); ``verrevcmp`` in dpkg's lib/dpkg/version.c): ``[epoch:]upstream[-revision]``, the epoch compared as a
number, then the upstream version and the revision each as alternating runs of non-digits (letters before other
characters, ``~`` before everything, even the end) and digits (compared as numbers). Tested against
``dpkg --compare-versions`` (tests/unit/test_driver_versions.py).
"""

from __future__ import annotations

from typing import NamedTuple


class DebianVersion(NamedTuple):
    epoch: int
    upstream: str
    revision: str


def split_version(version: str) -> DebianVersion:
    """``1:580.95.05-1ubuntu1`` -> (1, '580.95.05', '1ubuntu1'); no epoch is 0, no revision is ''."""
    text = str(version).strip()
    epoch = 0
    head, sep, rest = text.partition(":")
    if sep and head.isdigit():
        epoch, text = int(head), rest
    upstream, sep, revision = text.rpartition("-")
    if not sep:
        upstream, revision = text, ""
    return DebianVersion(epoch, upstream, revision)


def upstream_version(version: str) -> str:
    """The upstream part of a package version: what NVIDIA calls the driver version (580.95.05)."""
    return split_version(version).upstream


def _order(char: str) -> int:
    if char == "":
        return 0
    if char.isdigit():
        return 0
    if char.isascii() and char.isalpha():
        return ord(char)
    if char == "~":
        return -1
    return ord(char) + 256


def _verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i] if i < len(a) else "")
            bc = _order(b[j] if j < len(b) else "")
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        start_a, start_b = i, j
        while i < len(a) and a[i].isdigit():
            i += 1
        while j < len(b) and b[j].isdigit():
            j += 1
        num_a, num_b = int(a[start_a:i] or 0), int(b[start_b:j] or 0)
        if num_a != num_b:
            return 1 if num_a > num_b else -1
    return 0


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1 as Debian version ``a`` is lower than, equal to or higher than ``b`` (dpkg --compare-versions)."""
    va, vb = split_version(a), split_version(b)
    if va.epoch != vb.epoch:
        return 1 if va.epoch > vb.epoch else -1
    for x, y in ((va.upstream, vb.upstream), (va.revision, vb.revision)):
        found = _verrevcmp(x, y)
        if found:
            return 1 if found > 0 else -1
    return 0


def newest(versions) -> str | None:
    """The highest of some Debian versions (None when there are none)."""
    best = None
    for version in versions:
        if version and (best is None or compare_versions(version, best) > 0):
            best = version
    return best
