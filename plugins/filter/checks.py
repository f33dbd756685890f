"""Filters: the two printers of check records (plugins/module_utils/checks.py), for every role's stops and tables.

    a800.vllm.preflight_failures   one line per failed check: the fact, what was measured and expected, the fix
    a800.vllm.preflight_table      every check as an aligned line, and a line of counts by status

The names say where they began (the preflight); the roles' own checks (serve, image, fleet, monitoring, host
tuning) print through them too.
"""

from __future__ import annotations

from ansible_collections.a800.vllm.plugins.module_utils.checks import failure_lines, table_lines


class FilterModule:
    def filters(self) -> dict:
        return {"preflight_failures": failure_lines, "preflight_table": table_lines}
