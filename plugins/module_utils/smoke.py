"""Judge what a vLLM OpenAI server answered to the verification requests: one record per check.

Pure functions over parsed responses (plugins/module_utils/openai_api.py reads them), so the same judgement serves
the vllm_smoke module on the hosts and the unit tests. A record is the project's check record
(plugins/module_utils/checks.py); its fact is the request that was judged.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, WARN, check

SPARSE_PREFILL_LIMIT = 2048  # index_topk of GLM-5.2: a prefill up to this takes the path sparse_mla_force_mqa fixes


def http_failure(name: str, status: int | None, error: dict[str, Any] | None, what: str, fix: str) -> dict[str, Any]:
    """A request that did not return 200: the status and the server's own error message."""
    message = (error or {}).get("message") or "no answer"
    return check(name, FAIL, what, status, 200, f"{what}: HTTP {status}: {message}", fix)


def models_check(status: int, body: dict[str, Any] | None, served_name: str) -> dict[str, Any]:
    ids = [m.get("id") for m in (body or {}).get("data") or []]
    ok = status == 200 and served_name in ids
    close = [i for i in ids if isinstance(i, str) and i.lower() == served_name.lower() and i != served_name]
    return check(
        "models_lists_served_name",
        PASS if ok else FAIL,
        "GET /v1/models",
        ids,
        served_name,
        f"/v1/models lists {ids}" if status == 200 else f"/v1/models answered HTTP {status}",
        f"the model id is case-sensitive: {close[0]!r} differs from {served_name!r}"
        if close
        else "set --served-model-name (model_profile.served_model_name) to the id clients send",
    )


def prompt_check(name: str, fields: dict[str, Any], longer_than: int | None, shorter_than: int | None) -> dict:
    """A chat that must succeed with a prompt on one side of the sparse prefill limit."""
    tokens = (fields.get("usage") or {}).get("prompt_tokens")
    answered = bool(fields.get("content") or fields.get("reasoning") or fields.get("tool_calls"))
    in_range = tokens is not None and (longer_than is None or tokens > longer_than)
    in_range = in_range and (shorter_than is None or tokens < shorter_than)
    side = f"< {shorter_than}" if shorter_than else f"> {longer_than}"
    ok = answered and in_range
    return check(
        name,
        PASS if ok else FAIL,
        "POST /v1/chat/completions",
        tokens,
        f"{side} prompt tokens, an answer",
        f"{tokens} prompt tokens, finish_reason {fields.get('finish_reason')}"
        + ("" if answered else ", no content, reasoning or tool call")
        + ("" if in_range else f": the prompt is not {side} tokens, so this check proves nothing"),
        "a short prefill failing is the missing sparse_mla_force_mqa (model_profile.launch.attention_config)"
        if shorter_than
        else "read the server log (docker logs) for the long prefill's error",
    )


def arithmetic_checks(fields: dict[str, Any], expect: str, max_tokens: int) -> list[dict[str, Any]]:
    """The article's 17 x 24 = 408: the answer in `content`, the thinking in the reasoning field. Empty content
    with finish_reason `length` is the reasoning parser working as designed with too small a budget: a warning.
    An empty `expect` (a profile whose model cannot answer, e.g. random test weights) asks only for a reply."""
    content = fields.get("content") or ""
    reasoning = fields.get("reasoning") or ""
    if not expect:  # a model that cannot answer the question (random test weights): any reply counts
        answered = bool(content or reasoning)
        answer = check(
            "answer",
            PASS if answered else FAIL,
            "POST /v1/chat/completions",
            (content or reasoning).strip()[:200],
            "an answer (content or reasoning; the profile expects no text)",
            f"{len(content)} characters of content, {len(reasoning)} of reasoning, "
            f"finish_reason {fields.get('finish_reason')}",
            "read the server log; check that the model and its weights are the intended ones",
        )
    elif expect in content:
        answer = check(
            "answer_17x24",
            PASS,
            "POST /v1/chat/completions",
            content.strip()[:200],
            f"content contains {expect}",
            "correct answer",
        )
    elif not content and fields.get("finish_reason") == "length" and reasoning:
        answer = check(
            "answer_17x24",
            WARN,
            "POST /v1/chat/completions",
            "",
            f"content contains {expect}",
            f"budget spent on reasoning: max_tokens {max_tokens} ran out while thinking (finish_reason length, "
            f"{len(reasoning)} characters of reasoning, empty content)",
            "raise model_profile.smoke.max_tokens so that the answer fits after the reasoning",
        )
    else:
        answer = check(
            "answer_17x24",
            FAIL,
            "POST /v1/chat/completions",
            content.strip()[:200],
            f"content contains {expect}",
            f"wrong or missing answer (finish_reason {fields.get('finish_reason')})",
            "read the server log; check that the model and its weights are the intended ones",
        )
    has_reasoning = bool(reasoning)
    parser = check(
        "reasoning_field",
        PASS if has_reasoning else FAIL,
        "POST /v1/chat/completions",
        len(reasoning),
        "thinking in message.reasoning (or reasoning_content)",
        "the reasoning parser separates the thinking from the answer"
        if has_reasoning
        else "no reasoning field: the thinking is mixed into content or missing",
        "set model_profile.launch.reasoning_parser (glm45 for GLM-5.x)",
    )
    return [answer, parser]


def tool_call_check(fields: dict[str, Any], tool_name: str) -> dict[str, Any]:
    calls = fields.get("tool_calls") or []
    names = [c.get("name") for c in calls]
    ok = tool_name in names and fields.get("finish_reason") == "tool_calls"
    return check(
        "tool_call_auto",
        PASS if ok else FAIL,
        "POST /v1/chat/completions",
        names,
        f"a call of {tool_name}, finish_reason tool_calls",
        f"tool_choice auto returned calls {names}, finish_reason {fields.get('finish_reason')}",
        "set model_profile.launch.tool_call_parser (glm47) and enable_auto_tool_choice: true",
    )


def stream_check(stream: dict[str, Any]) -> dict[str, Any]:
    text = stream.get("content") or stream.get("reasoning") or ""
    ok = stream.get("done") and stream.get("role") == "assistant" and bool(text) and not stream.get("malformed")
    return check(
        "stream",
        PASS if ok else FAIL,
        "POST /v1/chat/completions (stream)",
        stream.get("events"),
        "SSE chunks, the assistant role first, text, data: [DONE]",
        f"{stream.get('events')} chunks, role {stream.get('role')}, {len(text)} characters, "
        f"{'[DONE]' if stream.get('done') else 'no [DONE]'}"
        + (f", {len(stream['malformed'])} malformed" if stream.get("malformed") else ""),
        "read the server log; a proxy in front of the server must not buffer text/event-stream",
    )


def messages_check(status: int | None, body: Any, expect: str, max_tokens: int) -> dict[str, Any]:
    """The Anthropic Messages API (POST /v1/messages, what Claude Code calls): a message of content blocks
    (thinking, text, tool_use), a stop_reason and usage, as real vLLM 0.32 answers (tests/contract/REAL_VLLM_SHAPES.md);
    the answer in a text block when the profile expects one. Only thinking with stop_reason max_tokens: a warning,
    as for the chat."""
    what = "POST /v1/messages"
    expected = "a message with content blocks" + (f", {expect} in a text block" if expect else "")
    fix = "read the server log; vLLM serves /v1/messages since 0.10 (an older image or a proxy without the route: 404)"
    if status != 200 or not isinstance(body, dict):
        return check("messages_api", FAIL, what, status, expected, f"HTTP {status}: {str(body)[:300]}", fix)
    blocks = body.get("content") if isinstance(body.get("content"), list) else []
    kinds = [b.get("type") for b in blocks if isinstance(b, dict)]
    text = "".join(b.get("text") or "" for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    thinking = "".join(b.get("thinking") or "" for b in blocks if isinstance(b, dict) and b.get("type") == "thinking")
    usage = body.get("usage") or {}
    shaped = body.get("type") == "message" and bool(kinds) and isinstance(usage.get("output_tokens"), int)
    detail = f"blocks {kinds}, stop_reason {body.get('stop_reason')}, {usage.get('output_tokens')} output tokens"
    if not shaped:
        return check("messages_api", FAIL, what, kinds, expected, "not an Anthropic message: " + detail, fix)
    if not expect or expect in text:
        answered = bool(text or thinking)
        return check("messages_api", PASS if answered else FAIL, what, kinds, expected, detail, "" if answered else fix)
    if not text and thinking and body.get("stop_reason") == "max_tokens":
        return check(
            "messages_api",
            WARN,
            what,
            kinds,
            expected,
            f"budget spent on reasoning: max_tokens {max_tokens} ran out while thinking ({detail})",
            "raise model_profile.smoke.max_tokens so that the answer fits after the reasoning",
        )
    return check("messages_api", FAIL, what, kinds, expected, f"no {expect} in the text: {text[:200]!r}; {detail}", fix)


def metrics_checks(before: dict[str, float], after: dict[str, float], speculative: bool) -> list[dict[str, Any]]:
    """`/metrics` moving: generation tokens counted; MTP drafts accepted when speculative decoding is on."""
    gen = after.get("generation_tokens", 0) - before.get("generation_tokens", 0)
    checks = [
        check(
            "metrics_generation_tokens",
            PASS if gen > 0 else FAIL,
            "GET /metrics",
            gen,
            "> 0 during the smoke",
            f"vllm:generation_tokens_total rose by {gen:.0f}",
            "check that /metrics is this server's (a proxy or a second server answers?)",
        )
    ]
    if speculative:
        drafts = after.get("spec_drafts", 0) - before.get("spec_drafts", 0)
        draft_tokens = after.get("spec_draft_tokens", 0) - before.get("spec_draft_tokens", 0)
        accepted = after.get("spec_accepted", 0) - before.get("spec_accepted", 0)
        rate = accepted / draft_tokens if draft_tokens else 0.0
        checks.append(
            check(
                "mtp_acceptance",
                PASS if drafts > 0 and accepted > 0 else FAIL,
                "GET /metrics",
                round(rate, 3),
                "drafts proposed and accepted",
                f"{drafts:.0f} drafts, {accepted:.0f} of {draft_tokens:.0f} draft tokens accepted ({rate:.0%}); mean "
                f"acceptance length {1 + accepted / drafts:.2f}"
                if drafts
                else "no speculative drafts counted",
                "check model_profile.launch.speculative_config (method mtp)",
            )
        )
    return checks
