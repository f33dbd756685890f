"""The phases a caller names, as playbooks, tags and the extra variables that switch an opt-in phase on: read from
phases.yml beside this file, the one list of the phases in site.yml's order."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE_PLAYBOOKS = PACKAGE_DIR / "playbooks"
PHASES_FILE = PACKAGE_DIR / "phases.yml"  # the order of site.yml, written once


@dataclass(frozen=True)
class Phase:
    name: str
    playbook: str  # relative to the project directory, or absolute
    tags: str | None = None
    extravars: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""


def load_phases(path: Path = PHASES_FILE) -> list[dict[str, Any]]:
    """The phases of phases.yml, in site.yml's order: name, playbook, tag, description, opt_in and alone when set."""
    return list(yaml.safe_load(path.read_text())["phases"])


def _phases() -> Mapping[str, Phase]:
    """`deploy` (all of site.yml), each phase of phases.yml (site.yml with its tag, its opt-in variable set),
    `upgrade` (a change proven on a canary first, playbooks/upgrade.yml) and `status` (read-only, a playbook of this
    package)."""
    phases = [Phase("deploy", "site.yml", description="every phase of site.yml, bare OS to a verified endpoint")]
    for entry in load_phases():
        extravars = {entry["opt_in"]: True} if entry.get("opt_in") else {}
        phases.append(Phase(entry["name"], "site.yml", entry["tag"], extravars, entry["description"]))
    phases.append(
        Phase(
            "upgrade",
            "playbooks/upgrade.yml",
            description="a new image, launch or profile on one server first: verified and benchmarked against the old "
            "release on the same load, then the rest, or rolled back by itself (--dry-run: the plan)",
        )
    )
    phases.append(
        Phase(
            "status",
            str(PACKAGE_PLAYBOOKS / "status.yml"),
            description="read-only: container state, load progress and /health",
        )
    )
    return MappingProxyType({phase.name: phase for phase in phases})


PHASES: Mapping[str, Phase] = _phases()


def resolve(playbook: str) -> Phase:
    """A phase name, or a playbook path (taken as a phase of its own, without tags)."""
    if playbook in PHASES:
        return PHASES[playbook]
    return Phase(Path(playbook).stem, playbook)
