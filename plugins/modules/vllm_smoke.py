#!/usr/bin/python
"""Ansible module: the verification requests against a vLLM OpenAI server, judged check by check."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_smoke
short_description: Prove that a vLLM OpenAI server answers correctly (models, chats, reasoning, tools, stream, metrics)
description:
  - Sends the verification requests of docs/article.md and docs/vllm.md to the server and returns one record per
    check (name, status pass/warn/fail, measured, expected, detail, fix) - C(/v1/models) lists the served name; a
    chat with a prompt shorter than 2048 tokens (the prefill that C(sparse_mla_force_mqa) keeps alive) and one longer;
    "What is 17 multiplied by 24? Answer briefly." answered 408 in C(content) with the thinking in the reasoning field
    (empty content with finish_reason C(length) is a warning, "budget spent on reasoning"); a tool call with
    C(tool_choice) auto; a streamed reply; the same question through the Anthropic Messages API
    (C(POST /v1/messages), what Claude Code calls); C(/metrics) moving (generation tokens; MTP acceptance when
    speculative decoding is on).
  - The requests go out at once (one connection each), and are judged in the order above; C(/metrics) is read
    before them and after the last has answered.
  - Changes nothing; runs in check mode too. The module itself fails only when the server cannot be reached at all.
options:
  base_url:
    description: The server, without C(/v1).
    type: str
    default: http://127.0.0.1:8001
  model:
    description: The served model name (C(--served-model-name)).
    type: str
    required: true
  api_key:
    description: The server's API key, if it has one.
    type: str
    no_log: true
  prompt:
    description: The arithmetic prompt.
    type: str
    required: true
  expect:
    description: Text the answer's content must contain; empty - any reply (content or reasoning) passes.
    type: str
    required: true
  max_tokens:
    description: Token budget of the arithmetic chat.
    type: int
    required: true
  temperature:
    description: Temperature of the arithmetic chat.
    type: float
    required: true
  long_prompt_tokens:
    description: Approximate size of the long prompt (above the 2048-token sparse prefill limit).
    type: int
    default: 2600
  speculative:
    description: Speculative decoding (MTP) is on, so its acceptance counters must move.
    type: bool
    default: false
  tool_call:
    description: Send the tool-call chat (tool_choice auto) and require the call; false for a model that never
      chooses a tool (random test weights).
    type: bool
    default: true
  timeout:
    description: Seconds one request may take.
    type: float
    default: 120
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Prove the server answers
  vllm_smoke:
    base_url: http://127.0.0.1:8001
    model: glm-5.2-nvfp4
    speculative: true
  register: smoke
"""

RETURN = r"""
checks:
  description: One record per check, in the order above.
  returned: always
  type: list
  elements: dict
  sample:
    - name: answer_17x24
      status: pass
      measured: "408"
      expected: content contains 408
      detail: correct answer
      fix: ""
answers:
  description: What the server said (content, reasoning length, finish_reason, usage) per request, for the report.
  returned: always
  type: dict
"""

import json  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.openai_api import (  # noqa: E402
    chat_fields,
    error_info,
    metric_total,
    parse_prometheus,
    parse_sse,
)
from ansible_collections.a800.vllm.plugins.module_utils.smoke import (  # noqa: E402
    SPARSE_PREFILL_LIMIT,
    arithmetic_checks,
    http_failure,
    messages_check,
    metrics_checks,
    models_check,
    prompt_check,
    stream_check,
    tool_call_check,
)

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


class Client:
    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def request(self, path: str, payload: dict | None = None) -> tuple[int | None, str]:
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=self.headers)
        try:
            with self.opener.open(req, timeout=self.timeout) as response:
                return response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", "replace")
        except (OSError, ValueError) as exc:
            return None, str(exc)

    def chat(self, payload: dict) -> tuple[int | None, Any]:
        status, text = self.request("/v1/chat/completions", payload)
        if status == 200:
            return status, json.loads(text)
        return status, error_info(status or 0, text)

    def metrics(self) -> dict[str, float]:
        status, text = self.request("/metrics")
        families = parse_prometheus(text) if status == 200 else {}
        names = {
            "generation_tokens": "vllm:generation_tokens_total",
            "spec_drafts": "vllm:spec_decode_num_drafts_total",
            "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
            "spec_accepted": "vllm:spec_decode_num_accepted_tokens_total",
        }
        return {key: metric_total(families, name) for key, name in names.items()}


def long_prompt(tokens: int) -> str:
    """About `tokens` tokens of plain text (real tokenizers: ~1 token per short word; the test double: 4 characters)."""
    words = ["the", "page", "cache", "keeps", "weights", "warm", "between", "restarts", "of", "the", "server"]
    return " ".join(words[i % len(words)] for i in range(tokens)) + "\nSummarize this text in one sentence."


def requests_of(p: dict[str, Any]) -> list[tuple[str, str, dict | None]]:
    """The verification requests, in the order their checks are reported: (name, path, payload)."""
    model = p["model"]
    prompt = [{"role": "user", "content": p["prompt"]}]
    out: list[tuple[str, str, dict | None]] = [
        ("models", "/v1/models", None),
        ("chat_short_prompt", "/v1/chat/completions",
         {"model": model, "messages": [{"role": "user", "content": "Say hello in five words."}], "max_tokens": 64}),
        ("chat_long_prompt", "/v1/chat/completions",
         {"model": model, "messages": [{"role": "user", "content": long_prompt(p["long_prompt_tokens"])}],
          "max_tokens": 64}),
        ("answer_17x24" if p["expect"] else "answer", "/v1/chat/completions",
         {"model": model, "messages": prompt, "max_tokens": p["max_tokens"], "temperature": p["temperature"]}),
    ]  # fmt: skip
    if p["tool_call"]:
        out.append(("tool_call_auto", "/v1/chat/completions", {
            "model": model,
            "messages": [{"role": "user", "content": "What is the weather in Beijing? Use the get_weather tool."}],
            "tools": [TOOL], "tool_choice": "auto", "max_tokens": 256}))  # fmt: skip
    out.append(("stream", "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": "Count from one to five."}], "max_tokens": 64,
        "stream": True, "stream_options": {"include_usage": True}}))  # fmt: skip
    out.append(("messages", "/v1/messages", {"model": model, "max_tokens": p["max_tokens"], "messages": prompt}))
    return out


def run(p: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every request at once (one thread each: the smoke waits on the server, not on the one before), then each
    judged in order; the metrics are read before the first and after the last."""
    client = Client(p["base_url"], p["api_key"], p["timeout"])
    checks: list[dict[str, Any]] = []
    answers: dict[str, Any] = {}
    before = client.metrics()
    asked = requests_of(p)
    with ThreadPoolExecutor(max_workers=len(asked)) as pool:
        said = dict(zip([name for name, _, _ in asked],
                        pool.map(lambda one: client.request(one[1], one[2]), asked), strict=True))  # fmt: skip

    status, text = said["models"]
    checks.append(models_check(status or 0, json.loads(text) if status == 200 else None, p["model"]))

    def chat(name: str, what: str, fix: str) -> dict | None:
        status, text = said[name]
        if status != 200:
            checks.append(http_failure(name, status, error_info(status or 0, text), what, fix))
            return None
        fields = chat_fields(json.loads(text))
        answers[name] = {
            "content": (fields["content"] or "")[:300],
            "reasoning_chars": len(fields["reasoning"] or ""),
            "finish_reason": fields["finish_reason"],
            "usage": fields["usage"],
            "tool_calls": [c["name"] for c in fields["tool_calls"]],
        }
        return fields

    short_fix = "set model_profile.launch.attention_config.sparse_mla_force_mqa: true (forward_mha NotImplementedError)"
    fields = chat("chat_short_prompt", "a chat with a short prompt", short_fix)
    if fields is not None:
        checks.append(prompt_check("chat_short_prompt", fields, None, SPARSE_PREFILL_LIMIT))
    fields = chat("chat_long_prompt", "a chat with a long prompt", "read the server log (docker logs) for the error")
    if fields is not None:
        checks.append(prompt_check("chat_long_prompt", fields, SPARSE_PREFILL_LIMIT, None))
    name = "answer_17x24" if p["expect"] else "answer"
    fields = chat(name, "the arithmetic chat", "read the server log (docker logs) for the error")
    if fields is not None:
        checks += arithmetic_checks(fields, p["expect"], p["max_tokens"])
    if p["tool_call"]:
        fields = chat(
            "tool_call_auto",
            "a chat with tools",
            "set model_profile.launch.tool_call_parser and enable_auto_tool_choice (a 400 says which is missing)",
        )
        if fields is not None:
            checks.append(tool_call_check(fields, TOOL["function"]["name"]))

    status, text = said["stream"]
    if status == 200:
        checks.append(stream_check(parse_sse(text.splitlines())))
    else:
        checks.append(http_failure("stream", status, error_info(status or 0, text), "a streamed chat", "read the log"))

    status, text = said["messages"]
    try:
        body = json.loads(text) if text else None
    except json.JSONDecodeError:
        body = text
    checks.append(messages_check(status, body, p["expect"], p["max_tokens"]))

    checks += metrics_checks(before, client.metrics(), p["speculative"])
    return checks, answers


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "default": "http://127.0.0.1:8001"},
            "model": {"type": "str", "required": True},
            "api_key": {"type": "str", "no_log": True},
            # the arithmetic check: model_profile.smoke (prompt, expect_in_content, max_tokens, temperature)
            "prompt": {"type": "str", "required": True},
            "expect": {"type": "str", "required": True},
            "max_tokens": {"type": "int", "required": True},
            "temperature": {"type": "float", "required": True},
            "long_prompt_tokens": {"type": "int", "default": 2600},
            "speculative": {"type": "bool", "default": False},
            "tool_call": {"type": "bool", "default": True},
            "timeout": {"type": "float", "default": 120},
        },
        supports_check_mode=True,
    )
    status, text = Client(module.params["base_url"], module.params["api_key"], 10).request("/health")
    if status is None:
        module.fail_json(msg=f"the server at {module.params['base_url']} cannot be reached: {text}", checks=[])
    checks, answers = run(module.params)
    module.exit_json(changed=False, checks=checks, answers=answers)


if __name__ == "__main__":
    main()
