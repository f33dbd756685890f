"""Read what an OpenAI-compatible vLLM server answers: chat completions, SSE streams, errors, Prometheus metrics.

Pure Python, shared by the verification and benchmark code and by the contract suite, which runs these same
functions against the vLLM test double and a real vLLM. Tolerant where vLLM versions differ: the reasoning
text is `reasoning` (current) or `reasoning_content` (before vllm PR #33402); errors come as
`{"error": {...}}`, `{"error": "Unauthorized"}` or the older `{"object": "error", ...}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any


def reasoning_of(message: dict[str, Any]) -> str | None:
    """The reasoning text of a message or delta, whichever field name the server uses."""
    value = message.get("reasoning")
    if value is None:
        value = message.get("reasoning_content")
    return value


def chat_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The parts of a non-streamed chat completion that checks look at."""
    choice = (body.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    calls = message.get("tool_calls") or []
    return {
        "id": body.get("id"),
        "model": body.get("model"),
        "content": message.get("content"),
        "reasoning": reasoning_of(message),
        "has_reasoning_field": "reasoning" in message or "reasoning_content" in message,
        "finish_reason": choice.get("finish_reason"),
        "tool_calls": [
            {
                "id": c.get("id"),
                "type": c.get("type"),
                "name": (c.get("function") or {}).get("name"),
                "arguments": (c.get("function") or {}).get("arguments"),
            }
            for c in calls
        ],
        "usage": body.get("usage") or {},
    }


def parse_sse(lines: Iterable[str | bytes]) -> dict[str, Any]:
    """Assemble a streamed chat completion from its `data: ...` lines."""
    out: dict[str, Any] = {
        "events": 0,
        "done": False,
        "role": None,
        "content": "",
        "reasoning": "",
        "finish_reason": None,
        "usage": None,
        "tool_calls": {},
        "first_delta_index": None,
        "malformed": [],
    }
    for raw in lines:
        line = raw.decode() if isinstance(raw, bytes) else raw
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            out["done"] = True
            continue
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            out["malformed"].append(data)
            continue
        out["events"] += 1
        if chunk.get("usage"):
            out["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            out["role"] = out["role"] or delta.get("role")
            text = delta.get("content")
            thought = reasoning_of(delta)
            if (text or thought) and out["first_delta_index"] is None:
                out["first_delta_index"] = out["events"]
            out["content"] += text or ""
            out["reasoning"] += thought or ""
            for call in delta.get("tool_calls") or []:
                slot = out["tool_calls"].setdefault(call.get("index", 0), {"id": None, "name": None, "arguments": ""})
                slot["id"] = slot["id"] or call.get("id")
                function = call.get("function") or {}
                slot["name"] = slot["name"] or function.get("name")
                slot["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                out["finish_reason"] = choice["finish_reason"]
    out["tool_calls"] = [out["tool_calls"][k] for k in sorted(out["tool_calls"])]
    return out


def error_info(status: int, text: str) -> dict[str, Any]:
    """What an error response says, whatever its shape."""
    info: dict[str, Any] = {
        "status": status,
        "shape": "not-json",
        "type": None,
        "message": text[:500],
        "param": None,
        "code": None,
    }
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return info
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and body.get("type") == "error":
        # The Anthropic API's form (docs.anthropic.com/en/api/errors), which gateways speaking the Messages API
        # answer with: {"type": "error", "error": {"type": "authentication_error", "message": ...}, "request_id"}
        info.update(shape="anthropic-error", type=error.get("type"), message=error.get("message"))
    elif isinstance(error, dict):
        info.update(
            shape="error-object",
            type=error.get("type"),
            message=error.get("message"),
            param=error.get("param"),
            code=error.get("code"),
        )
    elif isinstance(error, str):
        info.update(shape="error-string", message=error)
    elif isinstance(body, dict) and body.get("object") == "error":
        info.update(shape="object-error", type=body.get("type"), message=body.get("message"), code=body.get("code"))
    return info


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+([^\s]+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> dict[str, dict[str, Any]]:
    """Metric families of a Prometheus text exposition: {name: {"type": ..., "samples": [(labels, value)]}}.
    Samples of histograms (`_bucket`, `_sum`, `_count`) and `_created` series stay under their own names."""
    families: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            families.setdefault(name, {"type": kind, "samples": []})["type"] = kind
            continue
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        families.setdefault(name, {"type": None, "samples": []})["samples"].append(
            (dict(_LABEL.findall(labels or "")), number)
        )
    return families


def metric_total(families: dict[str, dict[str, Any]], name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include `labels`."""
    samples = (families.get(name) or {}).get("samples", [])
    return sum(v for lab, v in samples if all(lab.get(k) == want for k, want in labels.items()))
