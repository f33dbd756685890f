"""Check mode on a host without python3-apt: what apt's tasks would install, read from dpkg instead of apt.

ansible.builtin.apt installs python3-apt by itself in a normal run, but refuses check mode without it ("python3-apt
must be installed to use check mode", ansible-core 2.19 modules/apt.py; docs/field.md#check-mode-on-a-minimal-host).
The host phase then skips its apt tasks and previews them from ``dpkg-query -W`` (read-only, no Python module):

- ``apt_deps`` (module apt_deps_facts): whether the apt module can import its Python bindings, probed as apt.py
  probes them (this interpreter, then /usr/bin/python3 and /usr/bin/python), and whether deb822_repository can
  import python3-debian (this interpreter only: that module has no fallback);
- ``apt_preview``: one record per package an apt task names (``NAME`` or ``NAME=VERSION``, a version may end in
  ``*`` as apt allows), with the line a person reads: ``check mode without python3-apt: would install
  nvidia-utils-580=580.95.05-0ubuntu1 (installed: none; not in apt's lists now)`` - what dpkg has installed, and
  what ``apt-cache madison`` finds in apt's package lists now (before the real run adds NVIDIA's repositories and
  refreshes them);
- ``apt_deps_check``: the preflight's check record (a warning when python3-apt is missing).
"""

from __future__ import annotations

import fnmatch
import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import PASS, WARN, check

PREFIX = "check mode without python3-apt"
# Where apt.py looks for python3-apt when the module's own interpreter has none, in its order (ansible-core 2.19,
# modules/apt.py main(): interpreters = ['/usr/bin/python3', '/usr/bin/python']).
SYSTEM_INTERPRETERS = ("/usr/bin/python3", "/usr/bin/python")


def _importable(*names: str) -> bool:
    try:
        for name in names:
            importlib.import_module(name)
    except ImportError:
        return False
    return True


def apt_deps(
    probe: Callable[[list[str], str], str | None],
    importable: Callable[..., bool] = _importable,
    executable: str = sys.executable,
) -> dict[str, Any]:
    """What the apt and deb822_repository modules would find here. ``probe`` is ansible-core's
    probe_interpreters_for_module (injected: the tests give their own)."""
    # apt.py imports apt, apt.debfile and apt_pkg, and respawns under the first system interpreter that imports apt
    here = importable("apt", "apt.debfile", "apt_pkg")
    found = executable if here else probe(list(SYSTEM_INTERPRETERS), "apt")
    return {
        "interpreter": executable,
        "python_apt": bool(found),
        "python_apt_interpreter": found or None,
        "probed": [executable, *SYSTEM_INTERPRETERS],
        # deb822_repository imports debian.deb822 and fails without it, in check mode too (no respawn, no install)
        "python_debian": importable("debian.deb822"),
    }


def parse_dpkg(text: str) -> dict[str, dict[str, str]]:
    """The output of dpkg-query -W with the format of roles/apt_sources/vars/main.yml (name, the three status
    letters, version; tab-separated): {name: {status, version, installed}}. A package listed once per architecture
    counts as installed when one of them is."""
    packages: dict[str, dict[str, str]] = {}
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[0]:
            continue
        name, status, version = parts[0].strip(), parts[1], parts[2].strip()
        installed = len(status) > 1 and status[1] == "i"  # the second letter: i = installed
        if name not in packages or (installed and not packages[name]["installed"]):
            packages[name] = {"status": status.strip(), "version": version, "installed": installed}
    return packages


def parse_madison(text: str) -> dict[str, list[str]]:
    """``apt-cache madison NAME...`` output (``name | version | source``, binary packages only): {name: [versions]}
    that apt's package lists have now. apt-cache needs no Python library."""
    listed: dict[str, list[str]] = {}
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[0] and not parts[2].endswith(" Sources"):
            versions = listed.setdefault(parts[0], [])
            if parts[1] not in versions:
                versions.append(parts[1])
    return listed


def _split(spec: str) -> tuple[str, str | None]:
    name, sep, version = str(spec).partition("=")
    return name.strip(), (version.strip() or None) if sep else None


def _matches(installed: str | None, version: str | None) -> bool:
    return installed is not None and (version is None or fnmatch.fnmatchcase(installed, version))


def _lists(versions: list[str] | None, version: str | None) -> str:
    """What apt's lists have of a package now, for the line: the real run refreshes them (and adds NVIDIA's
    repositories) first, so "not in apt's lists now" is a warning, not a verdict."""
    if not versions:
        return "not in apt's lists now"
    if version is None or any(_matches(v, version) for v in versions):
        return "in apt's lists"
    return f"apt's lists have {', '.join(versions[:3])}{' ...' if len(versions) > 3 else ''} only"


def apt_preview(
    dpkg_out: str, specs: Iterable[str], if_installed: Iterable[str] = (), madison_out: str | None = None
) -> list[dict[str, Any]]:
    """One record per package of an apt task (its ``name`` list): package, wanted, installed (version or None),
    install (whether the real run would install it), listed (the versions apt's lists have, when ``madison_out``
    is given) and line. ``if_installed``: packages the task takes only when they are already there (Fabric Manager
    moving with the driver); not installed, they are left out."""
    known = parse_dpkg(dpkg_out)
    listed = parse_madison(madison_out) if madison_out is not None else None
    optional = {_split(s)[0] for s in if_installed}
    records = []
    for spec in [*specs, *if_installed]:
        name, version = _split(spec)
        entry = known.get(name) or {}
        installed = entry.get("version") if entry.get("installed") else None
        if name in optional and installed is None:
            continue
        wanted = f"{name}={version}" if version else name
        satisfied = _matches(installed, version)
        if satisfied:
            line = f"{PREFIX}: {wanted} is installed ({installed}): nothing to do"
        else:
            lists = "" if listed is None else f"; {_lists(listed.get(name), version)}"
            line = f"{PREFIX}: would install {wanted} (installed: {installed or 'none'}{lists})"
        records.append(
            {
                "package": name,
                "wanted": wanted,
                "installed": installed,
                "install": not satisfied,
                "listed": None if listed is None else listed.get(name, []),
                "line": line,
            }
        )
    return records


def apt_deps_check(deps: Mapping[str, Any]) -> dict[str, Any]:
    """The preflight's ``python3_apt`` record: a warning when apt's Python bindings are missing (check mode of the
    host phase then previews from dpkg only), with python3-debian named too when it is missing."""
    missing = [
        p for p, key in (("python3-apt", "python_apt"), ("python3-debian", "python_debian")) if not deps.get(key)
    ]
    probed = ", ".join(deps.get("probed") or [deps.get("interpreter") or "?"])
    if not missing:
        return check(
            "python3_apt",
            PASS,
            "apt_deps.python_apt",
            deps.get("python_apt_interpreter"),
            "importable",
            f"python3-apt importable ({deps.get('python_apt_interpreter')}): --check previews apt's changes with apt",
        )
    if "python3-apt" not in missing:
        return check(
            "python3_apt",
            WARN,
            "apt_deps.python_debian",
            False,
            True,
            "python3-debian is missing: --check of the host phase previews NVIDIA's repositories without "
            "deb822_repository (the real run installs it first); install it for the module's own preview: "
            "apt-get install python3-debian",
            "apt-get install python3-debian",
        )
    return check(
        "python3_apt",
        WARN,
        "apt_deps.python_apt",
        False,
        True,
        f"python3-apt is missing (probed {probed}): --check of the host phase previews apt changes from dpkg only; "
        f"install python3-apt for apt's own preview: apt-get install {' '.join(missing)} (a normal run installs "
        "them itself)",
        f"apt-get install {' '.join(missing)}",
    )
