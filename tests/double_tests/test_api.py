"""The vLLM test double's HTTP contract: endpoints, answers, streaming, tools, errors, metrics, prefill bug."""

from __future__ import annotations

import json

import pytest
import requests

QUESTION = "What is 17 multiplied by 24? Answer briefly."
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def server(tmp_path_factory, installs, weights):
    from harness import Launcher

    launcher = Launcher(tmp_path_factory.mktemp("api"), installs, weights)
    run = launcher.start(["--api-key", "sk-test-key"])
    assert "Application startup complete." in run.log, run.log
    yield run
    launcher.stop_all()


def post(server, body, key="sk-test-key", **kw):
    return requests.post(
        server.url + "/v1/chat/completions",
        json=body,
        timeout=30,
        headers={"Authorization": f"Bearer {key}"} if key else {},
        **kw,
    )


def chat(server, content, **extra):
    return post(server, {"model": "glm-5.2-nvfp4", "messages": [{"role": "user", "content": content}], **extra})


def metric(server, name):
    text = requests.get(server.url + "/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_health_version_models(server):
    assert requests.get(server.url + "/health", timeout=5).status_code == 200
    assert requests.get(server.url + "/version", timeout=5).json() == {"version": "0.26.0"}
    models = requests.get(server.url + "/v1/models", timeout=5, headers={"Authorization": "Bearer sk-test-key"})
    assert [m["id"] for m in models.json()["data"]] == ["glm-5.2-nvfp4"]


def test_the_articles_smoke_request(server):
    reply = chat(server, QUESTION, max_tokens=150, temperature=0.6).json()
    message = reply["choices"][0]["message"]
    assert message["content"] == "408"
    assert "17" in message["reasoning"] and "408" in message["reasoning"]
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["usage"]["completion_tokens"] > 1


def test_budget_spent_on_reasoning_leaves_no_content(server):
    reply = chat(server, QUESTION, max_tokens=10).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] is None
    assert choice["message"]["reasoning"]


def test_streaming_carries_reasoning_then_content_then_usage(server):
    body = {
        "model": "glm-5.2-nvfp4",
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": 150,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with post(server, body, stream=True) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines(decode_unicode=True) if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    reasoning = "".join(d.get("reasoning", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    assert "408" in reasoning and content == "408"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 1
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"


def test_auto_tool_choice_calls_the_tool(server):
    reply = chat(server, "What's the weather in Paris right now?", tools=[WEATHER_TOOL], tool_choice="auto").json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_unknown_model_is_a_404_error_object(server):
    reply = post(server, {"model": "GLM-5.2-NVFP4", "messages": [{"role": "user", "content": "hi"}]})
    assert reply.status_code == 404
    assert reply.json()["error"]["type"] == "NotFoundError"
    assert "GLM-5.2-NVFP4" in reply.json()["error"]["message"]


def test_missing_messages_is_a_400(server):
    reply = post(server, {"model": "glm-5.2-nvfp4"})
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == 400


@pytest.mark.parametrize("key", [None, "wrong", " sk-test-key"])
def test_api_key_is_enforced(server, key):
    reply = post(server, {"model": "glm-5.2-nvfp4", "messages": [{"role": "user", "content": "hi"}]}, key=key)
    assert reply.status_code == 401
    assert reply.json() == {"error": "Unauthorized"}


def test_metrics_move_with_traffic(server):
    before = metric(server, "vllm:generation_tokens_total")
    accepted = metric(server, "vllm:spec_decode_num_accepted_tokens_total")
    chat(server, "Say something.", max_tokens=30)
    assert metric(server, "vllm:generation_tokens_total") >= before + 30 - 1
    assert metric(server, "vllm:spec_decode_num_accepted_tokens_total") > accepted
    text = requests.get(server.url + "/metrics", timeout=5).text
    for name in (
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
    ):
        assert name in text


def test_short_prefill_without_force_mqa_crashes_the_engine(launcher):
    run = launcher.start(["--attention-config", "{}"])
    assert "Application startup complete." in run.log, run.log
    long_prompt = "word " * 3000  # > 2048 tokens: the top-k path, no crash
    assert chat(run, long_prompt, max_tokens=5).status_code == 200
    reply = chat(run, QUESTION, max_tokens=50)
    assert reply.status_code == 500
    assert "in forward_mha" in run.log and "NotImplementedError" in run.log
    assert requests.get(run.url + "/health", timeout=5).status_code == 503


def test_a_bad_release_answers_wrongly_leaves_the_tool_call_unparsed_and_logs_no_sparse_backend(launcher):
    """VLLM_TEST_DOUBLE_FAULTS: the bad releases of the canary upgrade's tests, each as a client or the log shows it;
    with none set, the same double answers right (the tests above)."""
    run = launcher.start(env={"VLLM_TEST_DOUBLE_FAULTS": "wrong_answer,tool_call_parse_error,no_sparse_marker"})
    assert "Application startup complete." in run.log, run.log
    assert "TRITON_MLA_SPARSE" not in run.log  # the marker the verify role requires
    assert "DeepGEMM not supported on this platform" in run.log  # the rest of the start as before
    assert chat(run, QUESTION, max_tokens=150).json()["choices"][0]["message"]["content"] == "409"
    reply = chat(run, "What's the weather in Paris right now?", tools=[WEATHER_TOOL], tool_choice="auto").json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "stop" and not choice["message"].get("tool_calls"), choice
    assert choice["message"]["content"].startswith("<tool_call>get_weather<arg_key>city</arg_key>"), choice
