"""The canary upgrade's plan and verdict (plugins/module_utils/canary.py): which host goes first, against which old
release, and when the canary is promoted or rolled back, named."""

from __future__ import annotations

import pytest
from ansible_collections.a800.vllm.plugins.module_utils.canary import (
    PROMOTE,
    ROLL_BACK,
    canary_figures,
    canary_verdict,
    upgrade_plan,
    verdict_lines,
)

ORDER = ["a800-1", "a800-2", "a800-3"]


def restarts(why: str = "the image changed", differences: tuple = ("image: v0.26.0 -> v0.27.0",)) -> dict:
    return {"restarts": True, "why": why, "differences": list(differences)}


KEEPS = {"restarts": False, "why": "", "differences": []}


def test_the_first_host_that_restarts_is_the_canary_and_the_next_its_baseline():
    plan = upgrade_plan({"a800-1": KEEPS, "a800-2": restarts(), "a800-3": restarts()}, ORDER)
    assert (plan["canary"], plan["baseline"], plan["batches"], plan["unchanged"]) == (
        "a800-2", "a800-3", [["a800-3"]], ["a800-1"])  # fmt: skip
    text = "\n".join(plan["lines"])
    assert text.startswith("1. canary a800-2: the image changed\n     - image: v0.26.0 -> v0.27.0"), text
    assert "beside a800-3 (still on the old release) on the same load" in text
    assert "2. a800-3, once the canary is promoted" in text and text.endswith("unchanged: a800-1")


def test_a_named_canary_goes_first_and_one_that_does_not_restart_is_refused():
    decisions = {h: restarts() for h in ORDER}
    plan = upgrade_plan(decisions, ORDER, canary="a800-3")
    assert (plan["canary"], plan["baseline"], plan["batches"]) == ("a800-3", "a800-1", [["a800-1"], ["a800-2"]])
    with pytest.raises(ValueError, match=r"canary 'a800-2' keeps running \(nothing to upgrade\): name one of a800-1"):
        upgrade_plan({"a800-1": restarts(), "a800-2": KEEPS}, ORDER[:2], canary="a800-2")
    with pytest.raises(ValueError, match="canary 'gpu-9' is not a server of this run"):
        upgrade_plan(decisions, ORDER, canary="gpu-9")


def test_a_single_changing_host_is_judged_against_its_own_figures_and_nothing_to_do_says_so():
    plan = upgrade_plan({"a800-1": restarts(), "a800-2": KEEPS}, ORDER[:2])
    assert (plan["canary"], plan["baseline"], plan["batches"]) == ("a800-1", None, [])
    assert any("against its own figures from before the restart" in line for line in plan["lines"])
    idle = upgrade_plan({"a800-1": KEEPS, "a800-2": KEEPS}, ORDER[:2])
    assert idle["canary"] is None and idle["lines"] == [
        "nothing to upgrade: every server runs its launch already a800-1, a800-2"
    ]


def test_the_old_image_a_rollback_needs_is_kept_and_its_disk_cost_counted():
    """Only restarting hosts onto another image keep one; a size not read counts 0, never fails the plan."""
    old, new = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    images = {
        "a800-1": {"old": old, "new": new, "old_bytes": 24_600_000_000},
        "a800-2": {"old": old, "new": new, "old_bytes": 24_600_000_000},
        "a800-3": {"old": old, "new": new},  # keeps running: nothing to keep for a rollback
    }
    plan = upgrade_plan({"a800-1": restarts(), "a800-2": restarts(), "a800-3": KEEPS}, ORDER, images=images)
    assert plan["kept_images"] == {
        "hosts": {"a800-1": {"image": old, "bytes": 24_600_000_000}, "a800-2": {"image": old, "bytes": 24_600_000_000}},
        "bytes": 49_200_000_000,
    }
    line = next(line for line in plan["lines"] if line.startswith("the old image stays"))
    assert line == (
        "the old image stays on 2 server(s) until the fleet is promoted, and after (nothing here removes it): 49.2 GB "
        f"in all (a800-1 {old[:19]} 24.6 GB, a800-2 {old[:19]} 24.6 GB)"
    )
    same = {h: {"old": old, "new": old, "old_bytes": 1} for h in ORDER}
    plan = upgrade_plan({h: restarts() for h in ORDER}, ORDER, images=same)
    assert plan["kept_images"] == {"hosts": {}, "bytes": 0}
    assert "the release runs the image the servers run now: no old image to keep" in plan["lines"]
    unread = upgrade_plan({"a800-1": restarts()}, ORDER[:1], images={"a800-1": {"old": old, "new": new}})
    assert unread["kept_images"]["bytes"] == 0 and unread["kept_images"]["hosts"]["a800-1"]["image"] == old


OLD = {"mean_ttft_ms": 400.0, "decode_throughput": 390.0, "completed": 32, "failed": 0}
PASSED = [{"name": "log:sparse_backend_in_use", "status": "pass"}, {"name": "answer_17x24", "status": "pass"}]


def test_a_release_as_fast_and_correct_as_the_old_one_is_promoted():
    verdict = canary_verdict(PASSED, {**OLD, "mean_ttft_ms": 440.0, "decode_throughput": 370.0}, OLD)
    assert (verdict["decision"], verdict["reasons"]) == (PROMOTE, [])
    assert [(r["ratio"], r["ok"]) for r in verdict["rows"]] == [(1.1, True), (0.949, True)]
    assert verdict_lines(verdict)[0] == "promote: every check held"


@pytest.mark.parametrize(
    ("checks", "bench", "reason"),
    [
        (PASSED, {**OLD, "mean_ttft_ms": 800.0}, "mean TTFT (ms) 2x the old release's, above the limit 1.3x"),
        (
            PASSED,
            {**OLD, "decode_throughput": 300.0},
            "decode throughput (tok/s) 0.769x the old release's, below the limit 0.9x",
        ),
        (
            [{"name": "answer_17x24", "status": "fail", "detail": "answered 418, expected 408"}],
            OLD,
            "answer_17x24 failed on the canary: answered 418, expected 408",
        ),
        (
            [{"name": "log:sparse_backend_in_use", "status": "fail", "detail": "not in the log"}],
            OLD,
            "log:sparse_backend_in_use failed on the canary: not in the log",
        ),
        (
            [{"name": "tool_call_auto", "status": "fail", "detail": "no tool call parsed"}],
            OLD,
            "tool_call_auto failed on the canary: no tool call parsed",
        ),
        (PASSED, {**OLD, "failed": 2, "completed": 30}, "2 of the canary's 32 requests failed"),
        (PASSED, {**OLD, "decode_throughput": None}, "decode throughput (tok/s): no figure to compare"),
    ],
)
def test_each_bad_release_is_rolled_back_with_its_reason(checks, bench, reason):
    verdict = canary_verdict(checks, bench, OLD)
    assert verdict["decision"] == ROLL_BACK and any(r.startswith(reason) for r in verdict["reasons"]), verdict
    assert verdict_lines(verdict)[0].startswith("roll back: ")


def test_a_failed_host_check_alone_does_not_judge_the_release_and_the_limits_are_variables():
    host_only = [*PASSED, {"name": "gpu_memory", "status": "fail", "detail": "a host matter"}]
    assert canary_verdict(host_only, OLD, OLD)["decision"] == PROMOTE
    strict = canary_verdict(PASSED, {**OLD, "mean_ttft_ms": 440.0}, OLD, {"max_ttft_ratio": 1.05})
    assert strict["decision"] == ROLL_BACK and strict["rules"] == {"max_ttft_ratio": 1.05, "min_decode_ratio": 0.9}


def test_the_figures_are_read_from_the_benchmarks_result():
    bench = {"scenarios": {
        "concurrency": [{"max_concurrency": 4, "decode_throughput": 180.0, "completed": 8, "failed": 0},
                        {"max_concurrency": 16, "decode_throughput": 388.04, "completed": 16, "failed": 1}],
        "ttft": [{"mean_ttft_ms": 260.0, "completed": 3, "failed": 0}, {"mean_ttft_ms": 450.0, "completed": 3}],
        "long_context": None,
    }}  # fmt: skip
    assert canary_figures(bench) == {"mean_ttft_ms": 355.0, "decode_throughput": 388.0, "completed": 30, "failed": 1}
    assert canary_figures({}) == {"mean_ttft_ms": None, "decode_throughput": None, "completed": 0, "failed": 0}


def test_the_filter_reads_each_hosts_decision_and_names_a_bad_canary():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.a800.vllm.plugins.filter.canary import upgrade_plan_filter

    hostvars = {
        "a800-1": {"serve_restarts": False, "__serve_decision": {"why": "", "differences": []}},
        "a800-2": {"serve_restarts": True, "__serve_decision": {"why": "the launch changed", "differences": ["x"]}},
    }
    assert upgrade_plan_filter(["a800-1", "a800-2"], hostvars)["canary"] == "a800-2"
    hostvars["a800-2"]["upgrade_images"] = {"old": "sha256:1", "new": "sha256:2", "old_bytes": 2_000_000_000}
    assert upgrade_plan_filter(["a800-1", "a800-2"], hostvars)["kept_images"]["bytes"] == 2_000_000_000
    with pytest.raises(AnsibleFilterError, match="upgrade_canary: canary 'a800-1' keeps running"):
        upgrade_plan_filter(["a800-1", "a800-2"], hostvars, "a800-1")


def test_a_release_that_failed_its_checks_is_not_measured_and_its_figures_are_no_reason():
    checks = [{"name": "answer_17x24", "status": "fail", "detail": "answered 409"}]
    verdict = canary_verdict(checks, {}, OLD)
    assert verdict["decision"] == ROLL_BACK
    assert verdict["reasons"] == ["answer_17x24 failed on the canary: answered 409"]
    assert [r["ok"] for r in verdict["rows"]] == [None, None]
    assert verdict_lines(verdict)[1].endswith("not measured (it failed its checks)")
    # measured and passing its checks, a missing figure is still a reason
    assert canary_verdict(PASSED, {}, OLD)["reasons"][0].startswith("mean TTFT (ms): no figure to compare")
