"""Filter: one message for a vLLM start that did not become ready, from the readiness module's result (state,
diagnosis from the error catalogue, log lines) and what the rollback did."""

from __future__ import annotations


def vllm_failure_message(ready: dict, rollback: dict | None = None) -> str:
    """One message for a start that did not become ready: the state, the diagnosis (cause and fix for each
    catalogue match), the log lines that show it, and what the rollback did."""
    lines = [f"vLLM did not become ready: {ready.get('message') or ready.get('state')}"]
    for diag in ready.get("diagnosis") or []:
        lines.append(f"DIAGNOSIS {diag.get('name')}: {diag.get('cause')} FIX: {diag.get('fix')}")
    shown = []
    for diag in (ready.get("diagnosis") or [])[:1]:
        shown = diag.get("context") or diag.get("lines") or []
    if not shown:
        shown = (ready.get("log_tail") or [])[-15:]
    if shown:
        lines.append("log:")
        lines += ["  " + line for line in shown]
    if rollback:
        lines.append(f"ROLLBACK: {rollback.get('message')}")
    return "\n".join(lines)


class FilterModule:
    def filters(self) -> dict:
        return {"vllm_failure_message": vllm_failure_message}
