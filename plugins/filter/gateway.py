"""Filter: did this fleet answer the gateway smoke (the servers' own counters before and after it)."""

from __future__ import annotations

from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.gateway_checks import fleet_check


def gateway_fleet_check(before: list[dict], after: list[dict], smoke_checks: list[dict], diagnoses: list[dict]) -> dict:
    """before/after: the results of the role's GET /metrics loop (one per serving host: item, status, content);
    smoke_checks: the gateway smoke's checks (gateway_chat and gateway_messages answered = not failed)."""

    def by_host(results: list[dict]) -> dict[str, dict[str, Any]]:
        return {r["item"]: {"status": r.get("status"), "content": r.get("content", "")} for r in results or []}

    answered = sum(
        1 for c in smoke_checks if c["name"] in ("gateway_chat", "gateway_messages") and c["status"] != "fail"
    )
    diag = next(d for d in diagnoses if d["name"] == "answered_elsewhere")
    return fleet_check(by_host(before), by_host(after), answered, diag)


class FilterModule:
    def filters(self) -> dict:
        return {"gateway_fleet_check": gateway_fleet_check}
