"""The phases a caller names, as playbooks, tags and the extra variables that switch an opt-in phase on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

PACKAGE_PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"


@dataclass(frozen=True)
class Phase:
    name: str
    playbook: str  # relative to the project directory, or absolute
    tags: str | None = None
    extravars: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""


PHASES: Mapping[str, Phase] = MappingProxyType(
    {
        phase.name: phase
        for phase in (
            Phase("deploy", "site.yml", description="every phase of site.yml, bare OS to a verified endpoint"),
            Phase("preflight", "site.yml", "preflight", description="read-only facts and checks"),
            Phase("host", "site.yml", "host", description="driver, container runtime, host tuning"),
            Phase("weights", "site.yml", "weights", description="integrity and page-cache prewarm"),
            Phase("image", "site.yml", "image", description="the serving image"),
            Phase("serve", "site.yml", "serve", description="image and vLLM server, one host at a time"),
            Phase("verify", "site.yml", "verify", description="log markers, answers, GPUs"),
            Phase("bench", "site.yml", "bench", {"bench_enabled": True}, "benchmarks against the baselines"),
            Phase("gateway", "site.yml", "gateway", {"gateway_enabled": True}, "client files, smoke via gateway"),
            Phase(
                "status",
                str(PACKAGE_PLAYBOOKS / "status.yml"),
                description="read-only: container state, load progress and /health",
            ),
        )
    }
)


def resolve(playbook: str) -> Phase:
    """A phase name, or a playbook path (taken as a phase of its own, without tags)."""
    if playbook in PHASES:
        return PHASES[playbook]
    return Phase(Path(playbook).stem, playbook)
