"""The OpenAI-compatible HTTP server of the test double (aiohttp): /health, /ping, /load, /version,
/v1/models, /metrics, /v1/chat/completions (plain and streamed), with vLLM's response and error shapes."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

from aiohttp import web

from . import log
from .generate import Plan, plan_reply, prompt_tokens, total_throughput, ttft_seconds
from .metrics import Metrics
from .startup import Engine

FORWARD_MHA_FRAMES = [
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py",
        3310,
        "execute_model",
        "model_output = self._model_forward(",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/mla.py",
        183,
        "forward_native",
        "attn_out = self.mla_attn(",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/v1/attention/backends/mla/common.py",
        2104,
        "forward",
        "output[num_decode_tokens:] = self._forward_prefill(",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/v1/attention/backends/mla/common.py",
        1702,
        "forward_mha",
        "raise NotImplementedError",
    ),
]


FINGERPRINT = "vllm-0.26.0-d0ub1e00"
MIN_CHUNK_S = 0.002  # below this pacing interval, tokens travel in shared chunks


def error(status: int, message: str, kind: str, param: str | None = None) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": param, "code": status}}, status=status
    )


class Server:
    def __init__(self, engine: Engine, args, speed: float) -> None:
        self.engine, self.args, self.speed = engine, args, speed
        self.metrics = Metrics(model=engine.served_name)
        self.slots = asyncio.Semaphore(engine.max_num_seqs)
        self.decoding = 0
        self.dead = False
        self.spec_since_log = 0
        self.shutting_down = False  # SIGTERM received: new requests are refused (entrypoints/cli/main.py)
        self.aborting = False  # the requests in flight end now, with finish_reason "abort"

    # --- plumbing -------------------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.auth])
        app.router.add_get("/health", self.health)
        app.router.add_get("/ping", self.health)
        app.router.add_get("/load", self.load)
        app.router.add_get("/version", self.version)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/messages", self.messages)
        if self.engine.speculative:
            app.on_startup.append(self._start_spec_logger)
        return app

    @web.middleware
    async def auth(self, request: web.Request, handler):
        key = self.args.api_key or os.environ.get("VLLM_API_KEY")  # --api-key wins, as in vLLM
        if key and request.path.startswith("/v1") and request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def _start_spec_logger(self, app: web.Application) -> None:
        app["spec_logger"] = asyncio.get_running_loop().create_task(self._spec_logger())

    async def _spec_logger(self) -> None:
        while True:
            await asyncio.sleep(10 / self.speed)
            if self.spec_since_log:
                c = self.metrics.counters
                drafts = max(c["vllm:spec_decode_num_drafts_total"], 1)
                accepted = c["vllm:spec_decode_num_accepted_tokens_total"]
                drafted = c["vllm:spec_decode_num_draft_tokens_total"]
                log.info(
                    "metrics.py:100",
                    f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, "
                    f"Accepted: {int(accepted)} tokens, Drafted: {int(drafted)} tokens, "
                    f"Avg Draft acceptance rate: {100 * accepted / max(drafted, 1):.1f}%",
                    "APIServer",
                )
                self.spec_since_log = 0

    def in_flight(self) -> int:
        return self.metrics.running + self.metrics.waiting

    # --- simple endpoints -----------------------------------------------------------------------------------------
    async def health(self, _: web.Request) -> web.Response:
        return web.Response(status=503 if self.dead else 200)

    async def load(self, _: web.Request) -> web.Response:
        return web.json_response({"server_load": self.metrics.running + self.metrics.waiting})

    async def version(self, _: web.Request) -> web.Response:
        from .. import __version__

        return web.json_response({"version": __version__})

    async def prometheus(self, _: web.Request) -> web.Response:
        return web.Response(text=self.metrics.render(), content_type="text/plain")

    async def models(self, _: web.Request) -> web.Response:
        now = int(time.time())
        card = {
            "id": self.engine.served_name,
            "object": "model",
            "created": now,
            "owned_by": "vllm",
            "root": self.engine.model,
            "parent": None,
            "max_model_len": self.engine.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{uuid.uuid4().hex}",
                    "object": "model_permission",
                    "created": now,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return web.json_response({"object": "list", "data": [card]})

    # --- chat -----------------------------------------------------------------------------------------------------
    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return error(
                400,
                "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.0', "
                f"'msg': 'JSON decode error', 'ctx': {{'error': '{exc.msg}'}}}}",
                "Bad Request",
                "body.0",
            )
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return error(
                400,
                "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field required'}",
                "BadRequestError",
            )
        if body.get("model") not in (None, self.engine.served_name):
            return error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError", "model")
        if self.dead:
            return error(
                500,
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                "InternalServerError",
            )
        if self.shutting_down:  # vLLM 0.32 during a drain: the engine client takes no new request
            return error(500, "cannot schedule new futures after shutdown", "InternalServerError")
        tools, tool_choice = body.get("tools"), body.get("tool_choice", "auto" if body.get("tools") else "none")
        if tools and tool_choice == "auto" and not self.args.enable_auto_tool_choice:
            return error(
                400,
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
                "BadRequestError",
            )
        n_prompt = prompt_tokens(body["messages"], tools)
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        if max_tokens and max_tokens > self.engine.max_model_len:
            return error(
                400,
                f"max_tokens={max_tokens} cannot be greater than max_model_len="
                f"{self.engine.max_model_len}. Please request fewer output tokens. "
                f"(parameter=max_tokens, value={max_tokens})",
                "BadRequestError",
                "max_tokens",
            )
        if n_prompt + (max_tokens or 0) > self.engine.max_model_len:
            return error(
                400,
                f"This model's maximum context length is {self.engine.max_model_len} tokens. However, "
                f"you requested {n_prompt + (max_tokens or 0)} tokens ({n_prompt} in the messages, "
                f"{max_tokens or 0} in the completion). Please reduce the length of the messages or "
                "completion.",
                "BadRequestError",
            )
        plan = plan_reply(
            body["messages"],
            bool(self.args.reasoning_parser),
            tools,
            tool_choice,
            max_tokens,
            bool(body.get("ignore_eos")),
        )
        budget = max_tokens or (self.engine.max_model_len - n_prompt)
        stream = bool(body.get("stream"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        rid = f"chatcmpl-{uuid.uuid4().hex[:16]}"
        created = int(time.time())

        self.metrics.waiting += 1
        async with self.slots:
            self.metrics.waiting -= 1
            self.metrics.running += 1
            start = time.monotonic()
            try:
                return await self._serve(request, rid, created, plan, n_prompt, budget, stream, include_usage, start)
            finally:
                self.metrics.running -= 1

    # --- Anthropic Messages (vLLM's /v1/messages: converted to a chat completion and back) -------------------------
    async def messages(self, request: web.Request) -> web.StreamResponse:
        """The shapes recorded from real vLLM 0.32 (tests/contract/REAL_VLLM_SHAPES.md, "Anthropic Messages"): a
        message with thinking / text / tool_use blocks, stop_reason, usage.input_tokens/output_tokens; max_tokens
        required (an OpenAI-style 400); an unknown model a 404 in Anthropic's error form; stream as Anthropic's
        events."""
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            return error(400, "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body'}", "Bad Request", "body")
        if "max_tokens" not in body:
            return error(
                400,
                "1 validation error:\n  {'type': 'missing', 'loc': 'body.max_tokens', 'msg': 'Field required', "
                f"'input': '<dict of {len(body)} items>'}}",
                "Bad Request",
                "body.max_tokens",
            )
        if body.get("model") != self.engine.served_name:
            return web.json_response(
                {
                    "type": "error",
                    "error": {
                        "type": "NotFoundError",
                        "message": f"The model `{body.get('model')}` does not exist. "
                        f"Valid aliases: {self.engine.served_name}.",
                    },
                },
                status=404,
            )
        chat = {"model": body["model"], "max_tokens": body["max_tokens"], "messages": _chat_messages(body)}
        reply = await self.chat(_Body(chat))
        answer = json.loads(reply.body)
        if reply.status != 200:
            return web.json_response(answer, status=reply.status)
        message = _anthropic_message(answer)
        if not body.get("stream"):
            return web.json_response(message)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await response.prepare(request)
        for event, data in _anthropic_events(message):
            await response.write(f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode())
        await response.write_eof()
        return response

    def _prefill_crashes(self, n_prompt: int) -> bool:
        return (
            self.engine.sparse
            and self.engine.backend == "TRITON_MLA_SPARSE"
            and not self.engine.force_mqa
            and n_prompt <= 2048
        )

    async def _serve(self, request, rid, created, plan: Plan, n_prompt, budget, stream, include_usage, start):
        await asyncio.sleep(max(start + ttft_seconds(n_prompt) / self.speed - time.monotonic(), 0.0))
        if self._prefill_crashes(n_prompt):
            log.error("multiproc_executor.py:822", "WorkerProc hit an exception.", "Worker_TP0")
            log.traceback("Worker_TP0", FORWARD_MHA_FRAMES, "NotImplementedError")
            log.error("core.py:868", "EngineCore encountered a fatal error.", "EngineCore_DP0")
            self.dead = True
            return error(
                500,
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                "InternalServerError",
            )
        self.metrics.counters["vllm:prompt_tokens_total"] += n_prompt
        self.metrics.histograms["vllm:time_to_first_token_seconds"].observe(time.monotonic() - start)
        tokens: list[tuple[str, str]] = [("reasoning", t) for t in plan.reasoning]
        tokens += [("content", t) for t in plan.content]
        named = isinstance(plan.tool_choice, dict)
        finish = "tool_calls" if plan.tool_call and not named else "stop"
        if len(tokens) > budget:
            tokens, finish = tokens[:budget], "length"
        if plan.tool_call and finish == "length":
            plan.tool_call = None
        response = None
        if stream:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
            await response.prepare(request)
            first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            await self._event(response, self._chunk(rid, created, [first], prompt_token_ids=None))
        self.decoding += 1
        try:
            sent = await self._decode(tokens, response, rid, created)
        finally:
            self.decoding -= 1
        if sent < len(tokens):  # aborted by a shutdown
            tokens, finish = tokens[:sent], "abort"
            plan.tool_call = None
        n_completion = len(tokens) + (len(plan.tool_call["arguments"]) // 4 if plan.tool_call else 0)
        elapsed = time.monotonic() - start
        self.metrics.histograms["vllm:e2e_request_latency_seconds"].observe(elapsed)
        if n_completion > 1:
            self.metrics.histograms["vllm:request_time_per_output_token_seconds"].observe(elapsed / n_completion)
        self.metrics.finished[finish] = self.metrics.finished.get(finish, 0) + 1
        n_reasoning = sum(1 for kind, _ in tokens if kind == "reasoning")
        usage = {
            "prompt_tokens": n_prompt,
            "total_tokens": n_prompt + n_completion,
            "completion_tokens": n_completion,
            "prompt_tokens_details": None,
            "completion_tokens_details": {"reasoning_tokens": n_reasoning},
        }
        tool_calls = []
        if plan.tool_call:
            tool_calls = [
                {
                    "id": f"chatcmpl-tool-{uuid.uuid4().hex[:16]}",
                    "type": "function",
                    "function": {"name": plan.tool_call["name"], "arguments": plan.tool_call["arguments"]},
                }
            ]
        reasoning = "".join(t for k, t in tokens if k == "reasoning") or None
        # content: null when nothing was said; "" when the request offered tools (recorded from vLLM 0.32)
        content = "".join(t for k, t in tokens if k == "content") or ("" if plan.tools_offered else None)
        if response is not None:
            if tool_calls:
                await self._sse(response, rid, created, {"tool_calls": [dict(tool_calls[0], index=0)]}, None)
            await self._sse(response, rid, created, {}, finish)
            if include_usage:
                chunk_usage = {k: v for k, v in usage.items() if k != "prompt_tokens_details"}
                await self._event(
                    response, self._chunk(rid, created, [], usage=chunk_usage, system_fingerprint=FINGERPRINT)
                )
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        message = {
            "role": "assistant",
            "content": content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
        }
        if tool_calls:
            message["tool_calls"] = tool_calls
        message["reasoning"] = reasoning
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
            "token_ids": None,
        }
        return web.json_response(
            {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": self.engine.served_name,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": FINGERPRINT,
                "usage": usage,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "kv_transfer_params": None,
            }
        )

    async def _decode(self, tokens: list[tuple[str, str]], response, rid: str, created: int) -> int:
        """Pace the tokens on absolute deadlines (no drift from the work between them); when the interval is
        shorter than the event loop can keep up with, or the loop fell behind, send the due tokens in one chunk
        (as MTP does when several drafted tokens are accepted at once). Returns how many were sent: fewer than all
        when a shutdown aborted the request."""
        due = time.monotonic()
        i = 0
        while i < len(tokens) and not self.aborting:
            interval = self.decoding / (total_throughput(self.decoding) * self.speed)
            due += interval
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            batch = [tokens[i]]
            i += 1
            now = time.monotonic()
            while i < len(tokens) and (due + interval <= now or len(batch) * interval < MIN_CHUNK_S):
                due += interval
                batch.append(tokens[i])
                i += 1
            for _ in batch:
                self._count_token()
            if response is not None:
                for kind in ("reasoning", "content"):
                    text = "".join(t for k, t in batch if k == kind)
                    if text:
                        await self._sse(response, rid, created, {kind: text}, None)
        return i

    def _count_token(self) -> None:
        c = self.metrics.counters
        c["vllm:generation_tokens_total"] += 1
        if self.engine.speculative:
            # MTP: ~2.8 tokens per verification step (acceptance of 5 drafts around 36 %).
            c["vllm:spec_decode_num_drafts_total"] += 1 / 2.8
            c["vllm:spec_decode_num_draft_tokens_total"] += 5 / 2.8
            c["vllm:spec_decode_num_accepted_tokens_total"] += 1.8 / 2.8
            self.spec_since_log += 1

    def _chunk(self, rid: str, created: int, choices: list, **extra) -> dict:
        return {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": self.engine.served_name,
            "choices": choices,
            **extra,
        }

    async def _sse(self, response, rid, created, delta: dict, finish: str | None) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "token_ids": None}
        if finish:
            choice["stop_reason"] = None
        await self._event(response, self._chunk(rid, created, [choice]))

    @staticmethod
    async def _event(response, payload: dict) -> None:
        await response.write(f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode())


class _Body:
    """A request whose JSON body is given (the Messages endpoint runs its converted request through chat)."""

    def __init__(self, body: dict) -> None:
        self._body = body

    async def json(self) -> dict:
        return self._body


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


def _chat_messages(body: dict) -> list[dict]:
    system = body.get("system")
    messages = [{"role": "system", "content": _text_of(system)}] if system else []
    return messages + [
        {"role": m.get("role"), "content": _text_of(m.get("content"))} for m in body.get("messages") or []
    ]


def _anthropic_message(answer: dict) -> dict:
    """vLLM 0.32 entrypoints/anthropic/serving.py: reasoning -> a thinking block (with a signature), content -> a text
    block, tool calls -> tool_use blocks; no block at all -> one empty text block; finish_reason length -> max_tokens,
    tool calls -> tool_use, else end_turn."""
    choice = answer["choices"][0]
    msg = choice["message"]
    content: list[dict] = []
    if msg.get("reasoning"):
        content.append({"type": "thinking", "thinking": msg["reasoning"], "signature": uuid.uuid4().hex})
    if msg.get("content"):
        content.append({"type": "text", "text": msg["content"]})
    for call in msg.get("tool_calls") or []:
        fn = call["function"]
        content.append({"type": "tool_use", "id": call["id"], "name": fn["name"], "input": json.loads(fn["arguments"])})
    if not content:
        content.append({"type": "text", "text": ""})
    finish = choice["finish_reason"]
    stop = "max_tokens" if finish == "length" else "tool_use" if msg.get("tool_calls") else "end_turn"
    usage = answer["usage"]
    return {
        "id": answer["id"],
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": answer["model"],
        "stop_reason": stop,
        "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]},
    }


def _anthropic_events(message: dict) -> list[tuple[str, dict]]:
    """The event sequence real vLLM streams: message_start, per block start / delta(s) / stop (a thinking block
    ends with a signature_delta), message_delta with the stop reason and usage, message_stop."""
    start = dict(message, content=[], stop_reason=None, stop_sequence=None)
    start["usage"] = {"input_tokens": message["usage"]["input_tokens"], "output_tokens": 0}
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        empty = {"thinking": {"type": "thinking", "thinking": ""}, "text": {"type": "text", "text": ""}}.get(
            kind, block
        )
        events.append(("content_block_start", {"type": "content_block_start", "content_block": empty, "index": index}))
        if kind == "thinking":
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                      {"type": "signature_delta", "signature": block["signature"]}]  # fmt: skip
        elif kind == "text":
            deltas = [{"type": "text_delta", "text": block["text"]}] if block["text"] else []
        else:
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        for delta in deltas:
            events.append(("content_block_delta", {"type": "content_block_delta", "delta": delta, "index": index}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": message["usage"],
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events
