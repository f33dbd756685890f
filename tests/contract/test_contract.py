"""Contract suite: the client-side checks of the verify and bench code (plugins/module_utils/openai_api.py) run
against the vLLM test double AND a real vLLM (CPU build 0.32.0, tiny random model), and must agree on response
shapes, streaming format, reasoning field, tool-call shape, error shapes, /metrics names and CLI errors.

The real model writes random tokens that stay inside its reasoning (its chat template opens `<think>`), so the
shared checks are about shapes; answers are checked on the double alone (tests/double_tests).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "tests" / "doubles" / "vllm"), str(ROOT / "collections")]

import real_vllm  # noqa: E402
from ansible_collections.a800.vllm.plugins.filter.fleet import vllm_requests_in_flight  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils import openai_api, vllm_log  # noqa: E402
from harness import Launcher, free_port, make_installs, make_weights  # noqa: E402

pytestmark = pytest.mark.contract
KEY = "sk-contract-key"
MODEL = "glm-5.2-nvfp4"
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
METRICS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:num_requests_running",
           "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total",
           "vllm:request_success_total", "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
           "vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds")  # fmt: skip


class Server:
    def __init__(self, kind: str, url: str, think_end: int | None, log_path: Path) -> None:
        self.kind, self.url, self.think_end, self.log_path = kind, url, think_end, log_path

    def post(self, body: dict, key: str | None = KEY, **kw) -> requests.Response:
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        return requests.post(self.url + "/v1/chat/completions", json=body, headers=headers, timeout=120, **kw)

    def get(self, path: str, key: str | None = KEY) -> requests.Response:
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        return requests.get(self.url + path, headers=headers, timeout=30)


def think_end_id(model_dir: Path) -> int:
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    return next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == "</think>")


@pytest.fixture(scope="module", params=["double", "real"])
def server(request, tmp_path_factory):
    if request.param == "double":
        base = tmp_path_factory.mktemp("double")
        launcher = Launcher(base, make_installs(base / "installs"), make_weights(base / "weights"))
        run = launcher.start(["--api-key", KEY])
        assert "Application startup complete." in run.log, run.log
        yield Server("double", run.url, None, run.log_path)
        launcher.stop_all()
    else:
        model = request.getfixturevalue("tiny_model")
        real = real_vllm.RealVllm(free_port(), model, api_key=KEY, log_path=tmp_path_factory.mktemp("real") / "log")
        real.start()
        yield Server("real", real.base_url, think_end_id(real.model_dir), real.log_path)
        real.stop()


def chat_body(content: str, **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "temperature": 0, **extra}


def close_reasoning(server: Server) -> dict:
    """The random real model never ends its reasoning: bias it to `</think>` so a forced tool call follows."""
    return {"logit_bias": {str(server.think_end): 100}} if server.think_end is not None else {}


# --- the start's ledger -------------------------------------------------------------------------------------------
def test_the_start_ledger_reads_the_engines_own_lines(server):
    """Where this start's time went (plugins/module_utils/vllm_log.py ledger(), as the verify report and the serve
    role's metrics read it): the real engine's lines (CPU build, eager: no compile or graphs) and the double's, which
    logs them as the GPU engine does, give the phases each should; the start is complete and has a total."""
    start = vllm_log.ledger(vllm_log.split_lines(server.log_path.read_text(errors="replace")))
    phases = [p["phase"] for p in start["phases"]]
    assert start["ready"] is True and start["total_s"] is not None, start
    if server.kind == "real":
        assert phases == ["model_loading", "kv_cache", "api_server"], start
    else:
        assert phases == ["model_loading", "torch_compile", "kv_cache", "cuda_graphs", "api_server"], start
    assert start["weights_s"] is not None, start


# The GPU engine's lines of a compile that the double writes, and where the real 0.32 source logs each (the CPU
# build compiles in its warm-up and writes none of them; the ledger reads both, tests/unit/test_vllm_log.py).
COMPILE_LINES = {
    "compilation/monitor.py": "%storch.compile took %.2f s in total",
    "compilation/backends.py": "%sDynamo bytecode transform time: %.2f s",
}


def test_the_doubles_compile_lines_are_the_real_sources(server):
    """Each compile line the double logs is one of real vLLM 0.32's format strings, read from its installed source."""
    if server.kind == "real":
        pytest.skip("the CPU build logs its compile as a warm-up (the double's lines are the GPU engine's)")
    origin = subprocess.run(
        [real_vllm.vllm_python(), "-c", "import importlib.util; print(importlib.util.find_spec('vllm').origin)"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.strip()  # fmt: skip
    package = Path(origin).parent
    log = server.log_path.read_text(errors="replace")
    for source, form in COMPILE_LINES.items():
        assert f'"{form}"' in (package / source).read_text(), (source, form)
        pattern = re.escape(form).replace("%s", "").replace(r"%\.2f", r"[\d.]+")
        assert re.search(pattern, log), (form, log[-2000:])


# --- endpoints --------------------------------------------------------------------------------------------------
def test_health_is_200_with_an_empty_body_and_needs_no_key(server):
    reply = server.get("/health", key=None)
    assert reply.status_code == 200
    assert reply.content == b""


def test_models_lists_the_served_name(server):
    body = server.get("/v1/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == [MODEL]
    assert body["data"][0]["object"] == "model" and isinstance(body["data"][0]["max_model_len"], int)


def test_version_is_a_version_string(server):
    version = server.get("/version", key=None).json()["version"]
    assert version.split(".")[0].isdigit()


# --- chat -------------------------------------------------------------------------------------------------------
def test_budget_spent_on_reasoning_shape(server):
    reply = server.post(chat_body("What is 17 multiplied by 24? Answer briefly.", max_tokens=6))
    assert reply.status_code == 200
    fields = openai_api.chat_fields(reply.json())
    assert fields["has_reasoning_field"]
    assert isinstance(fields["reasoning"], str) and fields["reasoning"]
    assert fields["content"] is None
    assert fields["finish_reason"] == "length"
    usage = fields["usage"]
    assert usage["completion_tokens"] == 6 and usage["total_tokens"] == usage["prompt_tokens"] + 6
    assert isinstance(usage["completion_tokens_details"]["reasoning_tokens"], int)
    assert fields["id"].startswith("chatcmpl-") and fields["model"] == MODEL


def test_streaming_shape(server):
    body = chat_body("Hello there", max_tokens=6, stream=True, stream_options={"include_usage": True})
    with server.post(body, stream=True) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        lines = list(reply.iter_lines(decode_unicode=True))
    stream = openai_api.parse_sse(lines)
    assert stream["done"] and not stream["malformed"]
    assert stream["role"] == "assistant"
    assert stream["reasoning"] and stream["content"] == ""
    assert stream["finish_reason"] == "length"
    assert stream["usage"]["completion_tokens"] == 6
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[-1]["choices"] == [] and "usage" in events[-1]
    assert lines[-1] == "" or lines[-1] == "data: [DONE]"


def test_named_tool_call_shape(server):
    body = chat_body(
        "What's the weather in Paris?",
        tools=[TOOL],
        max_tokens=60,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        **close_reasoning(server),
    )
    fields = openai_api.chat_fields(server.post(body).json())
    assert fields["tool_calls"], fields
    call = fields["tool_calls"][0]
    assert call["id"].startswith("chatcmpl-tool-") and call["type"] == "function" and call["name"] == "get_weather"
    assert isinstance(json.loads(call["arguments"]), dict)  # a JSON string
    assert fields["content"] == ""  # "" next to tool calls, not null
    assert fields["finish_reason"] == "stop"  # named tool choice


# --- errors -----------------------------------------------------------------------------------------------------
def test_unknown_model_is_a_404_error_object(server):
    reply = server.post({**chat_body("hi", max_tokens=2), "model": "GLM-5.2-NVFP4"})
    info = openai_api.error_info(reply.status_code, reply.text)
    assert (info["status"], info["shape"], info["type"], info["param"], info["code"]) == (
        404,
        "error-object",
        "NotFoundError",
        "model",
        404,
    )
    assert "GLM-5.2-NVFP4" in info["message"]


def test_missing_messages_is_a_400_error_object(server):
    reply = server.post({"model": MODEL, "max_tokens": 2})
    info = openai_api.error_info(reply.status_code, reply.text)
    assert (info["status"], info["shape"], info["code"]) == (400, "error-object", 400)
    assert "messages" in info["message"]


def test_too_many_output_tokens_is_a_400(server):
    reply = server.post(chat_body("hi", max_tokens=10**7))
    info = openai_api.error_info(reply.status_code, reply.text)
    assert (info["status"], info["shape"], info["type"]) == (400, "error-object", "BadRequestError")


@pytest.mark.parametrize("key", [None, "wrong-key", f" {KEY}"])
def test_api_key_enforced_on_v1(server, key):
    reply = server.post(chat_body("hi", max_tokens=2), key=key)
    info = openai_api.error_info(reply.status_code, reply.text)
    assert (info["status"], info["shape"], info["message"]) == (401, "error-string", "Unauthorized")


# --- Anthropic Messages (/v1/messages) -----------------------------------------------------------------------------
def messages(server: Server, body: dict, key: str | None = KEY, **kw) -> requests.Response:
    headers = {"anthropic-version": "2023-06-01", **({"Authorization": f"Bearer {key}"} if key is not None else {})}
    return requests.post(server.url + "/v1/messages", json=body, headers=headers, timeout=120, **kw)


def test_messages_shape(server):
    reply = messages(server, {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert set(body) == {"id", "type", "role", "content", "model", "stop_reason", "usage"}
    assert (body["type"], body["role"], body["model"], body["stop_reason"]) == ("message", "assistant", MODEL,
                                                                                 "max_tokens")  # fmt: skip
    assert body["usage"] == {"input_tokens": body["usage"]["input_tokens"], "output_tokens": 8}
    first = body["content"][0]
    assert first["type"] == "thinking" and first["thinking"] and re.fullmatch(r"[0-9a-f]{32}", first["signature"])


def test_messages_stream_events(server):
    body = {"model": MODEL, "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    reply = messages(server, body, stream=True)
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
    events = [line.split(": ", 1)[1] for line in reply.text.splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    assert events[1] == "content_block_start" and "content_block_stop" in events
    data = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: ")]
    assert [d["type"] for d in data] == events  # every event's data names it; no [DONE]
    deltas = [d["delta"]["type"] for d in data if d["type"] == "content_block_delta"]
    assert deltas[0] == "thinking_delta" and deltas[-1] == "signature_delta"
    assert data[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}


def test_messages_errors(server):
    wrong = messages(server, {"model": MODEL.upper(), "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
    assert wrong.status_code == 404
    message = f"The model `{MODEL.upper()}` does not exist. Valid aliases: {MODEL}."
    assert wrong.json() == {"type": "error", "error": {"type": "NotFoundError", "message": message}}
    no_max = messages(server, {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]})
    info = openai_api.error_info(no_max.status_code, no_max.text)
    assert (info["status"], info["shape"], info["param"]) == (400, "error-object", "body.max_tokens")
    unauthorized = messages(server, {"model": MODEL, "max_tokens": 2, "messages": []}, key=None)
    assert unauthorized.status_code == 401


# --- metrics ----------------------------------------------------------------------------------------------------
def test_metrics_names_labels_and_movement(server):
    before = openai_api.parse_prometheus(server.get("/metrics", key=None).text)
    for name in METRICS:
        family = before.get(name) or before.get(name.removesuffix("_total"))
        assert family is not None or f"{name}_count" in before, name
    generated = openai_api.metric_total(before, "vllm:generation_tokens_total", model_name=MODEL)
    assert server.post(chat_body("Say something", max_tokens=5)).status_code == 200
    after = openai_api.parse_prometheus(server.get("/metrics", key=None).text)
    assert openai_api.metric_total(after, "vllm:generation_tokens_total", model_name=MODEL) >= generated + 5
    assert openai_api.metric_total(after, "vllm:request_success_total", finished_reason="length") >= 1


def test_requests_in_flight_read_from_the_metrics_during_a_stream(server):
    """The fleet's drain waits on vllm_requests_in_flight (running + waiting): 1 while the stream is still generating,
    0 after. Whether the read lands before the last token is up to the machine's load (the double at speed 50 and the
    tiny real model both finish in well under a second), so the read is judged by the token counter read with it:
    fewer generation tokens than at the end means the request was still running when the gauges were read."""
    body = chat_body("Tell me a long story", max_tokens=2000, stream=True)
    with server.post(body, stream=True) as stream:
        lines = stream.iter_lines()
        assert next(line for line in lines if line.startswith(b"data: "))
        during = server.get("/metrics", key=None).text
        assert re.search(r"^vllm:num_requests_running\{[^}]*\} [0-9.]+$", during, re.M)
        assert re.search(r"^vllm:num_requests_waiting\{[^}]*\} [0-9.]+$", during, re.M)
        for _ in lines:
            pass
    deadline = time.monotonic() + 30
    while vllm_requests_in_flight(server.get("/metrics", key=None).text) and time.monotonic() < deadline:
        time.sleep(0.2)
    after = server.get("/metrics", key=None).text
    assert vllm_requests_in_flight(after) == 0
    families_during, families_after = openai_api.parse_prometheus(during), openai_api.parse_prometheus(after)
    assert "vllm:generation_tokens_total" in families_during
    still_generating = openai_api.metric_total(families_during, "vllm:generation_tokens_total") < (
        openai_api.metric_total(families_after, "vllm:generation_tokens_total")
    )
    assert vllm_requests_in_flight(during) in ((1,) if still_generating else (0, 1))


# --- command line ---------------------------------------------------------------------------------------------------
CLI_CASES = [
    (["--kv-cache-dtype", "bf16"], "vllm serve: error: argument --kv-cache-dtype: invalid choice: 'bf16'"),
    (["--dtype", "bf16"], "vllm serve: error: argument --dtype: invalid choice: 'bf16'"),
    (["--tensor-parallel-size", "8.5"], "argument --tensor-parallel-size/-tp: invalid int value: '8.5'"),
    (["--no-such-flag"], "vllm: error: unrecognized arguments: --no-such-flag"),
    (["--speculative-config", "{bad json"], "vllm serve: error: argument --speculative-config/-sc: Value {bad json"),
    (["--attention-config", "{bad json"], "argument --attention-config/-ac: 1 validation error for AttentionConfig"),
]  # fmt: skip


@pytest.fixture(scope="module")
def cli_runners(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli")
    installs = make_installs(base / "installs")
    double_env = {**os.environ, "PYTHONPATH": str(installs["patched"])}

    def double(extra: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "vllm", "serve", "/nonexistent", *extra],
            capture_output=True,
            text=True,
            env=double_env,
            timeout=60,
        )

    def real(extra: list[str]) -> subprocess.CompletedProcess:
        return real_vllm.run_cli(["serve", "/nonexistent", *extra], timeout=120)

    return {"double": double, "real": real}


@pytest.mark.parametrize(("extra", "message"), CLI_CASES, ids=[c[0][0] for c in CLI_CASES])
def test_cli_errors_agree(cli_runners, extra, message):
    for kind, run in cli_runners.items():
        result = run(extra)
        assert result.returncode == 2, (kind, result.stderr[-2000:])
        assert message in result.stderr, (kind, result.stderr[-2000:])
