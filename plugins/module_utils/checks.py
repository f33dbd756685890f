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
Modules import it as ``ansible_collections.a800.vllm.plugins.module_utils.checks``; so do the filters.
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
