"""The project's own load generator for an OpenAI-compatible chat endpoint: streamed chat completions at a fixed
concurrency, measured the way `vllm bench serve --backend openai-chat` measures them. Standard library only (it runs
on the GPU hosts inside an Ansible module, where python3 is all there is): asyncio streams speaking HTTP/1.1, chunked
transfer encoding and server-sent events, one keep-alive connection per concurrent stream.

Measures, per request and with vLLM's names and definitions (vllm/benchmarks/serve.py, lib/endpoint_request_func.py):
  TTFT  time from sending the request to the first streamed chunk that has `choices` (vLLM sends the role chunk with
        the first generated token, so this is the time to the first token);
  ITL   gaps between the following chunks with `choices` (with MTP one chunk can carry several tokens);
  E2EL  time from sending the request to the last chunk with `choices` (the trailing usage chunk does not count);
  TPOT  (E2EL - TTFT) / (output tokens - 1), for requests with more than one output token;
  output tokens: `usage.completion_tokens` of the final chunk (`stream_options.include_usage`); a server that sends
        no usage gets the number of chunks that carried text or tool-call arguments (exact without MTP, a lower bound
        with it).
And for the run: duration (first request sent to last request done), output_throughput = total output tokens /
duration, request_throughput, total_token_throughput, and mean/median/std/p50/p90/p99 of TTFT, TPOT, ITL, E2EL in ms
(percentiles interpolated linearly, as numpy's default).

Prompts are synthetic: `prompt_tokens` words of three letters, each followed by a space (4 characters: one token for
the vLLM test double, which counts a token per 4 characters; a short common English word is about one token for the
large-vocabulary BPE tokenizers of real models, but small vocabularies cut them into more). The chat template adds a
few tokens. What the server counted is reported (`total_input_tokens`, per request `input_tokens` from usage). Every
request gets different words from its first one on, so that prefix caching cannot shorten the prefill.
With `fixed_length` (default) the requests ask for `ignore_eos` (a vLLM extension of the OpenAI API, sent by
`vllm bench serve --ignore-eos` too), so that every request produces exactly `max_tokens` tokens where the server
supports it. `min_tokens` = `max_tokens` is opt-in (`min_tokens=True`, for servers that know only that one): vLLM
applies a per-step logits processor for it, which slowed the decode of a small model on CPU by about 5 %, and
`ignore_eos` alone fixes the length there.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import ssl
import time
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

_WORD_TEXT = (
    "the and for are but not you all any can had her was one our out day get has him his how man new now old see "
    "two way who boy did its let put say she too use air bed big box car cat cup dog ear eye fan fly fun gas hat "
    "ice job key leg map net oil pen pig red run sea sky sun tea top toy van war win yes zoo art bag bus egg"
)
WORDS = tuple(_WORD_TEXT.split())
CHAT_PATH = "/v1/chat/completions"
PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")
ERRORS_KEPT = 5
# asyncio.wait_for raises asyncio.TimeoutError, the builtin only from Python 3.11 on (hosts may have older ones)
TIMEOUT_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, getattr(asyncio, "TimeoutError", TimeoutError))


def synthetic_prompt(tokens: int, seed: int, tokens_per_word: float = 1.0) -> str:
    """About `tokens` tokens of text (see the module's docstring), different for every seed; `tokens_per_word` is
    what `calibrate` measured on the server's tokenizer (1 word = 1 token when not calibrated)."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(max(1, round(tokens / tokens_per_word))))


def chat_url(base_url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, request path) of the chat endpoint under `base_url` (`http://host:8001` or a gateway's
    `https://host/api`; a base that already ends in `/v1` is not given a second one)."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url must be http(s)://host[:port][/path], not {base_url!r}")
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[: -len("/v1")]
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port, prefix + CHAT_PATH


def request_body(
    model: str,
    prompt: str,
    max_tokens: int,
    fixed_length: bool = True,
    extra: dict[str, Any] | None = None,
    min_tokens: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if fixed_length:
        body["ignore_eos"] = True
        if min_tokens:
            body["min_tokens"] = max_tokens
    body.update(extra or {})
    return body


class HttpError(Exception):
    """The connection broke or the server did not speak HTTP/1.1 as expected."""


class Connection:
    """One HTTP/1.1 keep-alive connection: `request` sends a POST and reads the head of the answer, `body` yields the
    body's bytes as they arrive."""

    def __init__(self, scheme: str, host: str, port: int, connect_timeout: float = 30.0) -> None:
        self.scheme, self.host, self.port, self.connect_timeout = scheme, host, port, connect_timeout
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        context = ssl.create_default_context() if self.scheme == "https" else None
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=context), self.connect_timeout
        )

    async def _send(self, message: bytes) -> bytes:
        assert self.reader is not None and self.writer is not None
        self.writer.write(message)
        await self.writer.drain()
        status_line = await self.reader.readline()
        if not status_line:
            raise HttpError("the server closed the connection without answering")
        return status_line

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, path: str, payload: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
        """Send the POST; return the status and the (lower-cased) response headers. A kept-alive connection that the
        server closed while idle is replaced once by a new one."""
        fresh = self.writer is None or self.writer.is_closing()
        if fresh:
            await self._open()
        host = self.host if self.port in (80, 443) else f"{self.host}:{self.port}"
        head = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(payload)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        message = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload
        try:
            status_line = await self._send(message)
        except (ConnectionError, HttpError):
            if fresh:
                raise
            self.close()
            await self._open()
            status_line = await self._send(message)
        try:
            status = int(status_line.split()[1])
        except (IndexError, ValueError) as exc:
            raise HttpError(f"not an HTTP status line: {status_line[:80]!r}") from exc
        response_headers: dict[str, str] = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            response_headers[name.strip().lower()] = value.strip()
        return status, response_headers

    async def body(self, headers: dict[str, str]) -> AsyncIterator[bytes]:
        """The response body's bytes as they arrive (chunked, sized or until the connection closes)."""
        assert self.reader is not None
        reader = self.reader
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await reader.readline()
                if not size_line:
                    raise HttpError("connection closed inside a chunked body")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                data = await reader.readexactly(size + 2)
                yield data[:-2]
        elif "content-length" in headers:
            remaining = int(headers["content-length"])
            while remaining > 0:
                data = await reader.read(min(remaining, 65536))
                if not data:
                    raise HttpError("connection closed inside the body")
                remaining -= len(data)
                yield data
        else:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                yield data
            self.close()
        if headers.get("connection", "").lower() == "close":
            self.close()


def sse_messages(buffer: bytearray, data: bytes) -> list[str]:
    """Append `data` to `buffer` and take out the complete server-sent events' `data:` payloads."""
    buffer.extend(data)
    if b"\r" in buffer:  # CRLF or CR line ends (the SSE spec allows both); a CR at the end may precede an LF
        pending = buffer.endswith(b"\r")
        text = bytes(buffer[:-1] if pending else buffer).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer[:] = text + (b"\r" if pending else b"")
    messages: list[str] = []
    while True:
        end = buffer.find(b"\n\n")
        if end < 0:
            return messages
        event = bytes(buffer[:end]).decode("utf-8", "replace")
        del buffer[: end + 2]
        lines = [line[5:].lstrip(" ") if line.startswith("data:") else None for line in event.split("\n")]
        payload = "\n".join(line for line in lines if line is not None)
        if any(line is not None for line in lines):
            messages.append(payload)


def _has_output(choice: dict[str, Any]) -> bool:
    delta = choice.get("delta") or {}
    return bool(
        delta.get("content") or delta.get("reasoning") or delta.get("reasoning_content") or delta.get("tool_calls")
    )


async def one_request(conn: Connection, path: str, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    """Send one streamed chat completion and time it (vLLM's definitions, see the module's docstring)."""
    out: dict[str, Any] = {
        "success": False,
        "ttft": None,
        "latency": None,
        "itl": [],
        "output_tokens": None,
        "input_tokens": None,
        "chunks": 0,
        "usage_seen": False,
        "finish_reason": None,
        "malformed": 0,
        "error": None,
    }
    payload = json.dumps(body).encode()
    start = time.perf_counter()
    out["start"] = start
    status, response_headers = await conn.request(path, payload, headers)
    buffer = bytearray()
    last = start
    counted = 0
    error_text: list[str] = []
    async for data in conn.body(response_headers):
        if status != 200:
            error_text.append(data.decode("utf-8", "replace"))
            continue
        for message in sse_messages(buffer, data):
            if message.startswith(":") or message == "[DONE]":
                continue
            now = time.perf_counter()
            try:
                chunk = json.loads(message)
            except ValueError:
                out["malformed"] += 1
                continue
            choices = chunk.get("choices")
            if choices:
                if out["ttft"] is None:
                    out["ttft"] = now - start
                else:
                    out["itl"].append(now - last)
                last = now
                out["chunks"] += 1
                counted += 1 if _has_output(choices[0]) else 0
                out["finish_reason"] = choices[0].get("finish_reason") or out["finish_reason"]
            elif chunk.get("usage"):
                usage = chunk["usage"]
                out["usage_seen"] = True
                out["output_tokens"] = usage.get("completion_tokens")
                out["input_tokens"] = usage.get("prompt_tokens")
            elif chunk.get("error"):
                out["error"] = json.dumps(chunk["error"])[:500]
    if status != 200:
        out["error"] = f"HTTP {status}: {''.join(error_text)[:500]}"
        return out
    if out["ttft"] is None:
        out["error"] = out["error"] or "no streamed chunk with choices (cannot measure TTFT)"
        return out
    if out["output_tokens"] is None:
        out["output_tokens"] = counted
    out["latency"] = last - start
    out["success"] = True
    return out


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile, linearly interpolated between the closest ranks (numpy's default); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def stats_ms(name: str, values: list[float], percentiles: tuple[float, ...] = PERCENTILES) -> dict[str, float]:
    """mean/median/std/pNN of `values` (seconds) in milliseconds, under vLLM's result keys (`mean_ttft_ms`, ...)."""
    n = len(values)
    mean = sum(values) / n if n else 0.0
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n) if n else 0.0
    out = {
        f"mean_{name}_ms": mean * 1000,
        f"median_{name}_ms": percentile(values, 50) * 1000,
        f"std_{name}_ms": std * 1000,
    }
    for p in percentiles:
        word = str(int(p)) if int(p) == p else str(p)
        out[f"p{word}_{name}_ms"] = percentile(values, p) * 1000
    return out


def summarize(outputs: list[dict[str, Any]], duration: float, percentiles: tuple[float, ...] = PERCENTILES) -> dict:
    """The run's figures under the keys of `vllm bench serve --save-result` (calculate_metrics)."""
    done = [o for o in outputs if o["success"]]
    total_output = sum(o["output_tokens"] or 0 for o in done)
    total_input = sum(o["input_tokens"] or 0 for o in done)
    values = {
        "ttft": [o["ttft"] for o in done],
        "tpot": [(o["latency"] - o["ttft"]) / (o["output_tokens"] - 1) for o in done if (o["output_tokens"] or 0) > 1],
        "itl": [gap for o in done for gap in o["itl"]],
        "e2el": [o["latency"] for o in done],
    }
    result: dict[str, Any] = {
        "duration": duration,
        "completed": len(done),
        "failed": len(outputs) - len(done),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(done) / duration if duration > 0 else 0.0,
        "output_throughput": total_output / duration if duration > 0 else 0.0,
        "total_token_throughput": (total_input + total_output) / duration if duration > 0 else 0.0,
    }
    for name in METRICS:
        result.update(stats_ms(name, values[name], percentiles))
    return result


async def _run(
    url: tuple[str, str, int, str],
    bodies: list[dict[str, Any]],
    headers: dict[str, str],
    concurrency: int,
    timeout_s: float,
) -> tuple[list[dict[str, Any]], float]:
    scheme, host, port, path = url
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(bodies)):
        queue.put_nowait(index)
    outputs: list[dict[str, Any]] = [{} for _ in bodies]

    async def worker() -> None:
        conn = Connection(scheme, host, port)
        try:
            while not queue.empty():
                index = queue.get_nowait()
                try:
                    outputs[index] = await asyncio.wait_for(one_request(conn, path, headers, bodies[index]), timeout_s)
                except (*TIMEOUT_ERRORS, OSError, HttpError, asyncio.IncompleteReadError, ValueError) as exc:
                    conn.close()
                    reason = f"timed out after {timeout_s:g} s" if isinstance(exc, TIMEOUT_ERRORS) else repr(exc)
                    outputs[index] = {"success": False, "error": reason, "start": None}
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(bodies))))))
    duration = time.perf_counter() - start
    for output in outputs:
        if output.get("start") is not None:
            output["start"] -= start  # seconds after the run began
    return outputs, duration


def run_load(
    base_url: str,
    model: str,
    api_key: str | None = None,
    concurrency: int = 1,
    num_requests: int | None = None,
    prompt_tokens: int = 80,
    max_tokens: int = 256,
    *,
    fixed_length: bool = True,
    min_tokens: bool = False,
    tokens_per_word: float = 1.0,
    extra_body: dict[str, Any] | None = None,
    timeout_s: float = 600.0,
    seed: int = 0,
    percentiles: tuple[float, ...] = PERCENTILES,
    keep_requests: bool = True,
) -> dict[str, Any]:
    """Send `num_requests` (default: `concurrency`) streamed chat completions, at most `concurrency` at a time, each
    with a synthetic prompt of about `prompt_tokens` tokens (`tokens_per_word`: see `calibrate`) and `max_tokens`
    of output; return the figures (keys of
    `vllm bench serve --save-result`, see `summarize`) plus the run's settings, the first errors, the client's CPU
    seconds and, with `keep_requests`, a record per request (start_s after the run began, ttft_s, tpot_s, e2el_s,
    output and input tokens)."""
    num_requests = concurrency if num_requests is None else num_requests
    url = chat_url(base_url)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    bodies = [
        request_body(
            model,
            synthetic_prompt(prompt_tokens, seed * 1_000_003 + i, tokens_per_word),
            max_tokens,
            fixed_length,
            extra_body,
            min_tokens,
        )
        for i in range(num_requests)
    ]
    cpu = time.process_time()
    outputs, duration = asyncio.run(_run(url, bodies, headers, concurrency, timeout_s))
    cpu = time.process_time() - cpu
    result = summarize(outputs, duration, percentiles)
    result.update(
        tool="client",
        backend="openai-chat",
        max_concurrency=concurrency,
        num_prompts=num_requests,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        fixed_length=fixed_length,
        min_tokens=min_tokens,
        tokens_per_word=tokens_per_word,
        usage_reported=all(o.get("usage_seen") for o in outputs if o.get("success")),
        client_cpu_s=cpu,
        chunks=sum(o.get("chunks", 0) for o in outputs),
        malformed_events=sum(o.get("malformed", 0) for o in outputs),
        errors=[o["error"] for o in outputs if not o.get("success")][:ERRORS_KEPT],
    )
    if keep_requests:
        result["requests"] = [request_record(o) for o in outputs]
    return result


def request_record(output: dict[str, Any]) -> dict[str, Any]:
    """One request's figures in seconds (TPOT null for a single output token)."""
    if not output.get("success"):
        return {"success": False, "error": output.get("error")}
    tokens = output["output_tokens"] or 0
    return {
        "success": True,
        "start_s": output["start"],
        "ttft_s": output["ttft"],
        "tpot_s": (output["latency"] - output["ttft"]) / (tokens - 1) if tokens > 1 else None,
        "e2el_s": output["latency"],
        "output_tokens": tokens,
        "input_tokens": output["input_tokens"],
        "chunks": output["chunks"],
        "finish_reason": output["finish_reason"],
    }


def calibrate(
    base_url: str, model: str, api_key: str | None = None, words: tuple[int, int] = (64, 512), timeout_s: float = 120.0
) -> dict[str, Any]:
    """How many tokens the server's tokenizer makes of a synthetic word, and how many the chat template adds, from the
    `usage.prompt_tokens` of two requests (`words` words each, one output token). Pass `tokens_per_word` to `run_load`
    so that its prompts have `prompt_tokens` tokens of content (what `vllm bench serve --random-input-len` means), the
    template's tokens on top. Without usage in the stream the figures stay 1 and None."""
    probes = []
    for i, count in enumerate(words):
        run = run_load(base_url, model, api_key, 1, 1, count, 1, seed=-1 - i, timeout_s=timeout_s, fixed_length=False)
        probes.append({"words": count, "prompt_tokens": run["total_input_tokens"] if run["completed"] else None})
        if not run["completed"]:
            return {"tokens_per_word": 1.0, "template_tokens": None, "probes": probes, "error": run["errors"][0]}
    (w0, t0), (w1, t1) = ((p["words"], p["prompt_tokens"]) for p in probes)
    if not t0 or not t1 or t1 <= t0:
        return {"tokens_per_word": 1.0, "template_tokens": None, "probes": probes, "error": "no usage in the stream"}
    per_word = (t1 - t0) / (w1 - w0)
    return {"tokens_per_word": per_word, "template_tokens": round(t0 - per_word * w0), "probes": probes, "error": None}
