"""The check record: the one shape of every verdict the project gives, wherever it is judged.

The preflight, the launch rules, the verification's smoke requests and log markers, the benchmark and the
gateway's smoke each return a list of these records, so that the play's output, ``set_stats`` for ansible-runner
callers, ``verify.json``/``report.md`` and the Python API (``a800vllm``) read one shape:

    name      what was checked (unique within its list)
    status    pass | pending | warn | fail (``pending``: the fact is not there yet, e.g. no driver before the host
              phase; it does not fail a run)
    fact      where the measured value came from (a host fact, a profile key, an endpoint); "" when obvious
    measured  what was found
    expected  what it had to be
    detail    one sentence a person reads
    fix       what to change when it did not pass ("" when it passed)

A check may carry more keys of its own (the benchmark's ``unit`` and ``limits``, the gateway's ``diagnosis``).
Modules import it as ``ansible_collections.a800.vllm.plugins.module_utils.checks``; so do the filters. Its two
printers, ``failure_lines`` and ``table_lines``, are the filters ``a800.vllm.preflight_failures`` and
``a800.vllm.preflight_table`` (plugins/filter/checks.py) that every stop and every check table of the roles prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PASS = "pass"
PENDING = "pending"
WARN = "warn"
FAIL = "fail"
# From best to worst: the worst status of a list is its verdict.
STATUSES = (PASS, PENDING, WARN, FAIL)


def check(
    name: str,
    status: str,
    fact: str = "",
    measured: Any = None,
    expected: Any = None,
    detail: str = "",
    fix: str = "",
    **extra: Any,
) -> dict[str, Any]:
    """One check record (see the module's docstring); ``fix`` is dropped when the check passed."""
    if status not in STATUSES:
        raise ValueError(f"check {name!r}: status {status!r} is not one of {', '.join(STATUSES)}")
    return {
        "name": name,
        "status": status,
        "fact": fact,
        "measured": measured,
        "expected": expected,
        "detail": detail,
        "fix": fix if status != PASS else "",
        **extra,
    }


def worst(checks: Iterable[Mapping[str, Any]]) -> str:
    """The worst status of the checks (pass when there are none)."""
    return max((c["status"] for c in checks), key=STATUSES.index, default=PASS)


def counts(checks: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many checks have each status, in the order of STATUSES (every status present, 0 when none)."""
    statuses = [c["status"] for c in checks]
    return {s: statuses.count(s) for s in STATUSES}


def failed(checks: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The checks that failed."""
    return [c for c in checks if c["status"] == FAIL]


def failure_lines(checks: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per failed check: what was found, what was expected, and the fix."""
    return [
        f"{c['name']}: {c['detail']} [{c['fact']} = {c['measured']!r}, expected {c['expected']}]. Fix: {c['fix']}"
        for c in checks
        if c["status"] == FAIL
    ]


def table_lines(checks: Iterable[Mapping[str, Any]]) -> list[str]:
    """The checks as aligned lines for a person to read, and a last line that counts them by status."""
    checks = list(checks)
    width = max((len(c["name"]) for c in checks), default=0)
    lines = [f"{c['status'].upper():<7} {c['name']:<{width}}  {c['detail']}" for c in checks]
    by_status = counts(checks)
    lines.append(", ".join(f"{by_status[s]} {s}" for s in (PASS, WARN, FAIL, PENDING) if by_status[s]) or "no checks")
    return lines
