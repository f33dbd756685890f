"""What the double answers, and how fast.

Answers: "What is A multiplied by B" -> content "A*B", with the working in the reasoning field (article: 17x24
-> "408"); a `max_tokens` too small for thinking + answer ends with no content and finish_reason "length".
Speed, calibrated to the article's baselines on 8x A800 (TP8 + MTP): total decode throughput 80 tok/s at 1
stream, 180 at 4, 390 at 16 (interpolated in between, flat beyond); TTFT 0.2-0.5 s for 80-960 prompt tokens,
growing with longer prompts. VLLM_TEST_DOUBLE_SPEED multiplies every rate (tests run faster);
VLLM_TEST_DOUBLE_TTFT_FACTOR multiplies the prefill time alone (a release slower to its first token, for the canary
upgrade's tests).
VLLM_TEST_DOUBLE_FAULTS (comma separated) makes a bad release for the canary's tests, as a client sees one:
`wrong_answer` (A*B+1), `tool_call_parse_error` (the tool call comes back as the model's raw text in `content`, with
no `tool_calls`: what a client gets when the server's tool parser cannot read the model's output) and
`no_sparse_marker` (startup.py: the sparse backend's selection line is not logged).
Tokens are counted as one per 4 characters of text (a fixed, documented approximation of a tokenizer).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from dataclasses import dataclass

THROUGHPUT = ((1, 80.0), (4, 180.0), (16, 390.0))  # (concurrent streams, total tok/s)
_MULTIPLY = re.compile(r"what is\s+(-?\d+)\s*(?:multiplied by|times|\*|x|\u00d7)\s*(-?\d+)", re.IGNORECASE)


def count_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4)) if text else 0


def prompt_tokens(messages: list[dict], tools: list | None = None) -> int:
    text = "".join(f"<|{m.get('role', '')}|>{_content_text(m.get('content'))}" for m in messages)
    if tools:
        text += json.dumps(tools)
    return count_tokens(text) + 2


def _content_text(content) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def total_throughput(streams: int) -> float:
    """Total decode tok/s with `streams` sequences decoding (piecewise linear through the baselines)."""
    if streams <= THROUGHPUT[0][0]:
        return THROUGHPUT[0][1]
    for (n0, t0), (n1, t1) in itertools.pairwise(THROUGHPUT):
        if streams <= n1:
            return t0 + (t1 - t0) * (streams - n0) / (n1 - n0)
    return THROUGHPUT[-1][1]


def faults() -> set[str]:
    """The bad-release faults this double was started with (VLLM_TEST_DOUBLE_FAULTS)."""
    return {f.strip() for f in os.environ.get("VLLM_TEST_DOUBLE_FAULTS", "").split(",") if f.strip()}


def ttft_seconds(tokens: int) -> float:
    """Prefill time: 0.2 s at 80 tokens to 0.45 s at 960 (article: 0.2-0.5 s), then ~20k tokens/s beyond."""
    factor = float(os.environ.get("VLLM_TEST_DOUBLE_TTFT_FACTOR", "1"))
    if tokens <= 80:
        return 0.2 * factor
    if tokens <= 960:
        return (0.2 + 0.25 * (tokens - 80) / 880) * factor
    return (0.45 + (tokens - 960) / 20000) * factor


@dataclass
class Plan:
    """The reply to one request, as lists of tokens (words with their spacing)."""

    reasoning: list[str]
    content: list[str]
    tool_call: dict | None = None
    tool_choice: str | dict | None = None
    tools_offered: bool = False


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text)


def plan_reply(
    messages: list[dict], reasoning_on: bool, tools: list | None, tool_choice, max_tokens: int | None, ignore_eos: bool
) -> Plan:
    last = next((_content_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    tool = _pick_tool(last, tools, tool_choice)
    if tool is not None and "tool_call_parse_error" in faults():
        # GLM's own tool-call markup, left unparsed: the text reaches the client, no tool call does
        arguments = json.loads(tool["arguments"]).items()
        raw = f"<tool_call>{tool['name']}<arg_key>" + "".join(
            f"{k}</arg_key><arg_value>{json.dumps(v, ensure_ascii=False)}" for k, v in arguments
        )
        return Plan(reasoning=[], content=_words(raw), tools_offered=True)
    if tool is not None:
        return Plan(
            reasoning=_words(f"The user needs {tool['name']}; I will call it. ") if reasoning_on else [],
            content=[],
            tool_call=tool,
            tool_choice=tool_choice,
            tools_offered=True,
        )
    match = _MULTIPLY.search(last)
    if match:
        a, b = int(match.group(1)), int(match.group(2))
        tens, ones = divmod(abs(b), 10)
        times = "\u00d7"
        thinking = (
            f"The user asks for {a} multiplied by {b} and wants a brief answer. "
            f"{a} {times} {b} = {a} {times} {tens * 10} + {a} {times} {ones} = {a * tens * 10} + {a * ones} "
            f"= {a * b}. "
            f"So the answer is {a * b}."
        )
        answer = f"{a * b + 1}" if "wrong_answer" in faults() else f"{a * b}"
    else:
        thinking = (
            "Let me think about the request. The user wants a helpful answer; I will reply directly and keep it short."
        )
        answer = (
            "Here is a short answer to your message. The serving path works: the model read the prompt, "
            "reasoned about it and produced this reply token by token."
        )
    reasoning = _words(thinking) if reasoning_on else []
    content = _words(answer) if reasoning_on else _words(thinking + " " + answer)
    if ignore_eos and max_tokens:  # benchmark mode: exactly max_tokens of output
        while len(reasoning) + len(content) < max_tokens:
            content += _words("and more text ")
    return Plan(reasoning=reasoning, content=content, tool_choice=tool_choice, tools_offered=bool(tools))


def _pick_tool(last: str, tools: list | None, tool_choice) -> dict | None:
    if not tools or tool_choice == "none":
        return None
    functions = [t["function"] for t in tools if t.get("type", "function") == "function" and "function" in t]
    chosen = None
    if isinstance(tool_choice, dict):
        name = tool_choice.get("function", {}).get("name")
        chosen = next((f for f in functions if f["name"] == name), None)
    elif tool_choice == "required":
        chosen = functions[0] if functions else None
    else:  # auto: call a tool whose name the request talks about
        text = last.lower()
        for f in functions:
            words = [w for w in f["name"].lower().split("_") if w not in ("get", "set", "do", "the")]
            if any(w in text for w in words):
                chosen = f
                break
    if chosen is None:
        return None
    return {"name": chosen["name"], "arguments": json.dumps(_arguments(chosen, last), ensure_ascii=False)}


def _arguments(function: dict, text: str) -> dict:
    params = function.get("parameters") or {}
    props = params.get("properties") or {}
    names = re.findall(r"\b[A-Z][a-z]+\b", text)
    args = {}
    for key in params.get("required") or list(props)[:1]:
        kind = (props.get(key) or {}).get("type", "string")
        enum = (props.get(key) or {}).get("enum")
        if enum:
            args[key] = enum[0]
        elif kind in ("integer", "number"):
            numbers = re.findall(r"-?\d+", text)
            args[key] = int(numbers[0]) if numbers else 1
        elif kind == "boolean":
            args[key] = True
        else:
            args[key] = names[-1] if names else "Beijing"
    return args
