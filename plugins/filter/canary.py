"""Filters: a canary upgrade's plan, its figures and its verdict (plugins/module_utils/canary.py), for
playbooks/upgrade.yml.

    a800.vllm.upgrade_plan        hosts | upgrade_plan(hostvars, canary): who goes first, against whom, then who
    a800.vllm.canary_figures      a vllm_bench result -> mean TTFT, decode throughput, completed and failed requests
    a800.vllm.canary_verdict      checks | canary_verdict(new figures, old figures, rules): promote or roll back
    a800.vllm.canary_verdict_lines  the verdict as lines
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.a800.vllm.plugins.module_utils.canary import (
    canary_figures,
    canary_verdict,
    upgrade_plan,
    verdict_lines,
)


def upgrade_plan_filter(hosts: list[str], hostvars: Any, canary: str | None = None) -> dict:
    """The plan from each host's serve decision (serve_restarts, __serve_decision), in the order of `hosts`."""
    decisions, images = {}, {}
    for host in hosts:
        facts = hostvars[host]
        decision = facts.get("__serve_decision") or {}
        decisions[host] = {
            "restarts": bool(facts.get("serve_restarts")),
            "why": decision.get("why", ""),
            "differences": list(decision.get("differences") or []),
        }
        images[host] = dict(facts.get("upgrade_images") or {})
    try:
        return upgrade_plan(decisions, hosts, canary or None, images)
    except ValueError as exc:
        raise AnsibleFilterError(f"upgrade_canary: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {
            "upgrade_plan": upgrade_plan_filter,
            "canary_figures": canary_figures,
            "canary_verdict": canary_verdict,
            "canary_verdict_lines": verdict_lines,
        }
