"""The verification requests (plugins/modules/vllm_smoke.py, judged by plugins/module_utils/smoke.py): every check
passes against the vLLM test double started with the article's flags, and each one fails on the fault it names."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.module_utils import smoke
from ansible_collections.a800.vllm.plugins.modules import vllm_smoke
from conftest import ROOT

SMOKE = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"][
    "smoke"
]


def params(url: str, **over) -> dict:
    return {
        "base_url": url,
        "model": "glm-5.2-nvfp4",
        "api_key": None,
        "prompt": SMOKE["prompt"],
        "expect": SMOKE["expect_in_content"],
        "max_tokens": SMOKE["max_tokens"],
        "temperature": SMOKE["temperature"],
        "long_prompt_tokens": 2600,
        "speculative": True,
        "tool_call": True,
        "timeout": 30,
        **over,
    }


def by_name(checks: list[dict]) -> dict[str, dict]:
    return {c["name"]: c for c in checks}


@pytest.fixture(scope="module")
def article_server(tmp_path_factory, installs, weights):
    from harness import Launcher

    launcher = Launcher(tmp_path_factory.mktemp("smoke"), installs, weights)
    run = launcher.start(["--api-key", "sk-smoke"])
    assert "Application startup complete." in run.log, run.log
    yield run
    launcher.stop_all()


def test_every_check_passes_against_the_article_launch(article_server):
    checks, answers = vllm_smoke.run(params(article_server.url, api_key="sk-smoke"))
    names = by_name(checks)
    assert list(names) == [
        "models_lists_served_name",
        "chat_short_prompt",
        "chat_long_prompt",
        "answer_17x24",
        "reasoning_field",
        "tool_call_auto",
        "stream",
        "messages_api",
        "metrics_generation_tokens",
        "mtp_acceptance",
    ]
    assert {c["status"] for c in checks} == {"pass"}, [c for c in checks if c["status"] != "pass"]
    assert "408" in answers["answer_17x24"]["content"]
    assert answers["chat_long_prompt"]["usage"]["prompt_tokens"] > 2048


def test_small_budget_is_a_warning_named_budget_spent_on_reasoning(article_server):
    checks, _ = vllm_smoke.run(params(article_server.url, api_key="sk-smoke", max_tokens=8))
    answer = by_name(checks)["answer_17x24"]
    assert answer["status"] == "warn" and "budget spent on reasoning" in answer["detail"]
    assert "max_tokens" in answer["fix"]


def test_a_profile_without_an_expected_answer_or_tool_call_asks_for_a_reply_only(article_server):
    """A model that cannot answer (the real-engine scenario's random tiny model): expect_in_content "" and
    tool_call false - the answer check wants a reply, and no tool chat is sent."""
    checks, answers = vllm_smoke.run(params(article_server.url, api_key="sk-smoke", expect="", tool_call=False))
    names = by_name(checks)
    assert "answer" in names and "answer_17x24" not in names and "tool_call_auto" not in names
    assert names["answer"]["status"] == "pass" and "answer" in answers
    silent = {"content": "", "reasoning": "", "finish_reason": "length"}
    assert by_name(smoke.arithmetic_checks(silent, "", 32))["answer"]["status"] == "fail"


def test_wrong_key_and_wrong_model_fail_with_the_server_message(article_server):
    checks, _ = vllm_smoke.run(params(article_server.url, api_key="sk-wrong"))
    assert by_name(checks)["chat_short_prompt"]["measured"] == 401
    checks, _ = vllm_smoke.run(params(article_server.url, api_key="sk-smoke", model="GLM-5.2-NVFP4"))
    models = by_name(checks)["models_lists_served_name"]
    assert models["status"] == "fail" and "case-sensitive" in models["fix"]
    assert by_name(checks)["answer_17x24"]["measured"] == 404


def test_missing_force_mqa_fails_the_short_prompt_only(launcher):
    """The article's crash: a prefill <= 2048 tokens without sparse_mla_force_mqa; a long prompt alone hides it."""
    run = launcher.start(["--attention-config", "{}"])
    checks = by_name(vllm_smoke.run(params(run.url))[0])
    assert checks["chat_short_prompt"]["status"] == "fail"
    assert "sparse_mla_force_mqa" in checks["chat_short_prompt"]["fix"]


def test_the_messages_api_judgement():
    """POST /v1/messages (Claude Code's API): shapes as real vLLM 0.32 answers them."""
    good = {"type": "message", "content": [{"type": "thinking", "thinking": "..."}, {"type": "text", "text": "408"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 20, "output_tokens": 30}}  # fmt: skip
    assert smoke.messages_check(200, good, "408", 150)["status"] == "pass"
    thinking_only = {**good, "content": [{"type": "thinking", "thinking": "..."}], "stop_reason": "max_tokens"}
    assert smoke.messages_check(200, thinking_only, "408", 8)["status"] == "warn"
    assert smoke.messages_check(200, thinking_only, "", 8)["status"] == "pass"  # a profile without an answer
    wrong = {**good, "content": [{"type": "text", "text": "407"}]}
    assert smoke.messages_check(200, wrong, "408", 150)["status"] == "fail"
    chat_shaped = {"object": "chat.completion", "choices": [{"message": {"content": "408"}}]}
    assert smoke.messages_check(200, chat_shaped, "408", 150)["status"] == "fail"
    missing = smoke.messages_check(404, {"detail": "Not Found"}, "408", 150)
    assert missing["status"] == "fail" and "/v1/messages" in missing["fix"]


def test_judgements_fail_on_their_faults():
    no_reasoning = {"content": "408", "reasoning": None, "finish_reason": "stop"}
    assert by_name(smoke.arithmetic_checks(no_reasoning, "408", 150))["reasoning_field"]["status"] == "fail"
    wrong = {"content": "407", "reasoning": "...", "finish_reason": "stop"}
    assert by_name(smoke.arithmetic_checks(wrong, "408", 150))["answer_17x24"]["status"] == "fail"
    long_but_short = {"content": "x", "usage": {"prompt_tokens": 300}, "finish_reason": "stop"}
    assert smoke.prompt_check("chat_long_prompt", long_but_short, 2048, None)["status"] == "fail"
    assert smoke.tool_call_check({"tool_calls": [], "finish_reason": "stop"}, "get_weather")["status"] == "fail"
    assert smoke.stream_check({"done": False, "role": "assistant", "content": "a"})["status"] == "fail"
    still = smoke.metrics_checks({"generation_tokens": 5}, {"generation_tokens": 5}, speculative=True)
    assert [c["status"] for c in still] == ["fail", "fail"]


def test_gpu_rows_from_real_h200_output_and_the_verify_gpu_checks():
    """nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu captured on 2x H200 (idle, and with
    30 GB allocated and a matmul loop on GPU 0)."""
    from ansible_collections.a800.vllm.plugins.filter import verify_report

    fixtures = ROOT / "tests/fixtures/nvidia-smi/h200-x2"
    busy = verify_report.nvidia_smi_rows((fixtures / "query-verify-busy.csv").read_text())
    assert busy[0] == {"index": 0, "name": "NVIDIA H200", "memory_used_mib": 30009, "memory_total_mib": 143771,
                       "utilization_pct": 100}  # fmt: skip
    assert busy[1]["memory_used_mib"] == 4 and busy[1]["utilization_pct"] == 0
    idle = verify_report.nvidia_smi_rows((fixtures / "query-verify-idle.csv").read_text())
    progress = {"load_gib": 53.2}  # "Model loading took 53.2 GiB" = 57.1 GB
    baselines = {"memory_per_gpu_gb": {"weights": 57}}
    checks = {c["name"]: c for c in verify_report.verify_gpu_checks(idle, 8, progress, baselines, 15)}
    assert checks["gpus_visible"]["status"] == "fail"  # 2 GPUs for tensor parallel 8
    assert checks["weights_per_gpu"]["status"] == "pass"
    far = verify_report.verify_gpu_checks(idle, 2, {"load_gib": 20.0}, baselines, 15)
    assert [c["status"] for c in far] == ["pass", "warn"]
