"""Parse a host's apt sources, in both of apt's formats, to find who already serves a repository.

apt reads one-line entries (``/etc/apt/sources.list``, ``sources.list.d/*.list``:
``deb [signed-by=/usr/share/keyrings/x.gpg arch=amd64] URI SUITE [COMPONENT...]``) and deb822 stanzas
(``sources.list.d/*.sources``: ``Types:``, ``URIs:``, ``Suites:``, ``Signed-By:``, ``Enabled:``). Two entries for the
same URI and suite with different ``Signed-By`` make apt refuse every source of the host ("Conflicting values set for
option Signed-By"; sources.list(5), NVIDIA/libnvidia-container#194). ``entries_for`` finds the entries that serve a
given repository, so that a role reuses or replaces them instead of adding a conflicting one.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

SOURCES_LIST = "/etc/apt/sources.list"
SOURCES_DIR = "/etc/apt/sources.list.d"


def normalise_uri(uri: str, arch: str = "amd64") -> str:
    """The same repository written two ways compares equal: apt's $(ARCH), trailing slashes, file:/ vs file:///."""
    uri = uri.replace("$(ARCH)", arch).rstrip("/")
    return re.sub(r"^file:/+", "file:/", uri)


def parse_one_line(text: str, path: str) -> list[dict[str, Any]]:
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        options: dict[str, str] = {}
        match = re.match(r"^(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)(.*)$", line)
        if not match:
            continue
        kind, opts, uri, suite, rest = match.groups()
        for opt in (opts or "").split():
            key, _, value = opt.partition("=")
            options[key.lower()] = value
        entries.append(
            {
                "file": path,
                "line": number,
                "format": "one-line",
                "type": kind,
                "uri": uri,
                "suite": suite,
                "components": rest.split(),
                "signed_by": options.get("signed-by", ""),
                "trusted": options.get("trusted", "") == "yes",
                "enabled": True,
            }
        )
    return entries


def parse_deb822(text: str, path: str) -> list[dict[str, Any]]:
    entries = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for raw in stanza.splitlines():
            if raw.startswith("#"):
                continue
            if raw[:1] in (" ", "\t") and key:
                fields[key] += "\n" + raw.strip()
                continue
            key, sep, value = raw.partition(":")
            if not sep:
                key = None
                continue
            key = key.strip().lower()
            fields[key] = value.strip()
        if "uris" not in fields:
            continue
        signed_by = fields.get("signed-by", "")
        if "BEGIN PGP" in signed_by:
            signed_by = "(inline key)"
        for kind in fields.get("types", "deb").split():
            for uri in fields["uris"].split():
                for suite in fields.get("suites", "").split():
                    entries.append(
                        {
                            "file": path,
                            "line": None,
                            "format": "deb822",
                            "type": kind,
                            "uri": uri,
                            "suite": suite,
                            "components": fields.get("components", "").split(),
                            "signed_by": signed_by,
                            "trusted": fields.get("trusted", "").lower() == "yes",
                            "enabled": fields.get("enabled", "yes").lower() != "no",
                        }
                    )
    return entries


def read_sources(root: str = "/") -> list[dict[str, Any]]:
    """Every entry apt reads on this host (root: another filesystem root, for tests)."""

    def under(path: str) -> str:
        return os.path.join(root, path.lstrip("/"))

    entries: list[dict[str, Any]] = []
    files = [SOURCES_LIST] if os.path.isfile(under(SOURCES_LIST)) else []
    files += sorted(
        p[len(root.rstrip("/")) :] if root != "/" else p
        for p in glob.glob(under(SOURCES_DIR) + "/*")
        if p.endswith((".list", ".sources"))
    )
    for path in files:
        with open(under(path), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        entries += parse_deb822(text, path) if path.endswith(".sources") else parse_one_line(text, path)
    return entries


def entries_for(entries: list[dict[str, Any]], uri: str, suite: str, arch: str = "amd64") -> list[dict[str, Any]]:
    """The enabled ``deb`` entries that serve this repository (same URI and suite)."""
    want = normalise_uri(uri, arch)
    return [
        e
        for e in entries
        if e["enabled"]
        and e["type"] == "deb"
        and normalise_uri(e["uri"], arch) == want
        and e["suite"].strip("/") == suite.strip("/")
    ]
