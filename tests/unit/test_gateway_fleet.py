"""fleet_answered (plugins/filter/gateway.py): the servers' own counters before and after the gateway smoke decide
whether this fleet answered. Exposition text as real vLLM 0.32 writes it (tests/contract/REAL_VLLM_SHAPES.md)."""

from __future__ import annotations

import yaml
from ansible_collections.a800.vllm.plugins.filter.gateway import gateway_fleet_check
from conftest import ROOT

DIAGNOSES = yaml.safe_load((ROOT / "roles/gateway/defaults/main/diagnoses.yml").read_text())["gateway_diagnoses"]
ANSWERED = [{"name": "gateway_chat", "status": "pass"}, {"name": "gateway_messages", "status": "pass"}]


def metrics(success: float, prompt: float = 0, generated: float = 0) -> str:
    return (
        "# TYPE vllm:request_success counter\n"
        f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="glm-5.2-nvfp4"}} {success}\n'
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="glm-5.2-nvfp4"} 0.0\n'
        f'vllm:prompt_tokens_total{{engine="0",model_name="glm-5.2-nvfp4"}} {prompt}\n'
        f'vllm:generation_tokens_total{{engine="0",model_name="glm-5.2-nvfp4"}} {generated}\n'
    )


def reading(host: str, text: str | None) -> dict:
    return {"item": host, "status": 200 if text is not None else -1, "content": text or ""}


def test_the_fleet_counted_the_answers():
    before = [reading("a800-1", metrics(10, 100, 200)), reading("a800-2", metrics(5))]
    after = [reading("a800-1", metrics(11, 130, 260)), reading("a800-2", metrics(6, 20, 40))]
    result = gateway_fleet_check(before, after, ANSWERED, DIAGNOSES)
    assert (result["status"], result["measured"]) == ("pass", 2)
    assert "a800-1: +1 requests, +30 prompt and +60 generated tokens" in result["detail"]


def test_no_counter_moved_is_answered_elsewhere():
    same = [reading("a800-1", metrics(10)), reading("a800-2", metrics(5))]
    result = gateway_fleet_check(same, same, ANSWERED, DIAGNOSES)
    assert (result["status"], result["diagnosis"]) == ("fail", "answered_elsewhere")
    assert "gateway_fleet" in result["fix"]


def test_unreadable_servers_are_a_warning_not_a_verdict():
    result = gateway_fleet_check([reading("a800-1", None)], [reading("a800-1", None)], ANSWERED, DIAGNOSES)
    assert result["status"] == "warn" and "a800-1" in result["detail"]
    partial = gateway_fleet_check(
        [reading("a800-1", metrics(1)), reading("a800-2", None)],
        [reading("a800-1", metrics(1)), reading("a800-2", None)],
        ANSWERED,
        DIAGNOSES,
    )
    assert partial["status"] == "warn"  # +0 on the one read, the other unknown: not proven either way


def test_nothing_answered_attributes_nothing():
    failed = [{"name": "gateway_chat", "status": "fail"}, {"name": "gateway_messages", "status": "fail"}]
    same = [reading("a800-1", metrics(1))]
    assert gateway_fleet_check(same, same, failed, DIAGNOSES)["status"] == "pass"
