"""The check record (plugins/module_utils/checks.py): one shape, one set of statuses, for every verdict."""

from __future__ import annotations

import ast

import pytest
from ansible_collections.a800.vllm.plugins.module_utils.checks import (
    FAIL,
    PASS,
    PENDING,
    STATUSES,
    WARN,
    check,
    counts,
    failed,
    worst,
)
from conftest import ROOT

KEYS = ["name", "status", "fact", "measured", "expected", "detail", "fix"]


def test_a_record_has_the_seven_keys_in_order_and_extras_after():
    record = check("gpu_count", FAIL, "gpus.count", 4, 8, "4 GPUs", "use a host with 8", unit="GPUs")
    assert list(record) == [*KEYS, "unit"]
    assert record["fix"] == "use a host with 8" and record["unit"] == "GPUs"


def test_a_pass_carries_no_fix():
    assert check("x", PASS, fix="never shown")["fix"] == ""
    assert check("x", WARN, fix="shown")["fix"] == "shown"


def test_an_unknown_status_is_refused_naming_the_check():
    with pytest.raises(ValueError, match=r"check 'x': status 'ok' is not one of pass, pending, warn, fail"):
        check("x", "ok")


@pytest.mark.parametrize(
    ("statuses", "verdict"),
    [([], PASS), ([PASS, PASS], PASS), ([PASS, PENDING], PENDING), ([PENDING, WARN], WARN), ([WARN, FAIL, PASS], FAIL)],
)
def test_worst(statuses, verdict):
    assert worst(check(str(i), s) for i, s in enumerate(statuses)) == verdict


def test_counts_name_every_status_and_failed_lists_the_failures():
    records = [check("a", PASS), check("b", FAIL), check("c", FAIL), check("d", PENDING)]
    assert counts(records) == {PASS: 1, PENDING: 1, WARN: 0, FAIL: 2}
    assert list(counts([])) == list(STATUSES)
    assert [c["name"] for c in failed(records)] == ["b", "c"]


def test_no_other_file_defines_the_statuses_or_builds_a_record_by_hand():
    """The one definition: no plugin assigns a status constant or writes a record's `fix` key next to `status`."""
    offenders = []
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        if path.name == "checks.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if {"PASS", "WARN", "FAIL", "PENDING", "STATUSES"} & set(names):
                    offenders.append(f"{path.name}:{node.lineno} defines {names}")
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                if {"status", "fix", "detail"} <= keys:
                    offenders.append(f"{path.name}:{node.lineno} builds a check record by hand")
    assert offenders == []
