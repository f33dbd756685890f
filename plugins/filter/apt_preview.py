"""Filters: check mode on a host without python3-apt - what the host phase's apt tasks would install, read from
dpkg; and the preflight's record of what check mode needs. The logic is plugins/module_utils/apt_preview.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils import apt_preview as _preview


def apt_preview(
    dpkg_out: str, specs: list[str], if_installed: list[str] | None = None, madison_out: str | None = None
) -> list[dict[str, Any]]:
    """One record (package, wanted, installed, install, listed, line) per package of an apt task, from
    dpkg-query's output and apt-cache madison's."""
    return _preview.apt_preview(dpkg_out, specs or [], if_installed or [], madison_out)


def apt_deps_check(deps: dict[str, Any]) -> dict[str, Any]:
    """The preflight's python3_apt check record from apt_deps_facts."""
    return _preview.apt_deps_check(deps or {})


class FilterModule:
    def filters(self) -> dict:
        return {"apt_preview": apt_preview, "apt_deps_check": apt_deps_check}
